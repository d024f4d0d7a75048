"""`flink-watch` and `flink-import` in process: their options and exit codes, against a real local HTTP
server answering as a JobManager does."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from app import cli
from app.commands.outcome import EXIT_INFRA, EXIT_OK, EXIT_USAGE
from app.contracts import vocabulary as vocab

pytestmark = pytest.mark.unit

JOB = "4f2c7d1e9a6b40c8b1d3e5f7a9c0b2d4"
T0 = 1764237600000


@contextmanager
def jobmanager(documents: dict[str, Any]) -> Iterator[str]:
    """A real HTTP server answering GETs of ``documents`` (path -> JSON), 404 otherwise."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = documents.get(self.path)
            self.send_response(404 if body is None else 200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps(body if body is not None else {"errors": ["Not found"]}).encode())

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        thread.join(10)
        httpd.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def finished_job(checkpoint_dir: str) -> dict[str, Any]:
    job = {"jid": JOB, "name": "payments", "state": "FINISHED", "start-time": T0, "end-time": T0 + 9000}
    checkpoint = {
        "id": 1,
        "status": "COMPLETED",
        "is_savepoint": False,
        "trigger_timestamp": T0 + 1000,
        "latest_ack_timestamp": T0 + 1040,
        "external_path": f"file:{checkpoint_dir}/chk-1",
    }
    return {
        "/jobs/overview": {"jobs": [job]},
        f"/jobs/{JOB}": job,
        f"/jobs/{JOB}/checkpoints": {
            "counts": {"completed": 1, "failed": 0},
            "latest": {"completed": checkpoint, "restored": None},
            "history": [checkpoint],
        },
        f"/jobs/{JOB}/checkpoints/config": {"interval": 1000, "externalization": {"enabled": False}},
        "/jobmanager/config": [],
    }


@pytest.mark.parametrize(
    "argv",
    [
        ["flink-watch", "--rest", "http://127.0.0.1:1", "--job", "payments"],
        ["flink-watch", "--rest", "http://127.0.0.1:1", "--job", "p", "--job-id", JOB, "--job-name", "p"],
        ["flink-watch", "--rest", "http://127.0.0.1:1", "--job-id", JOB],
        [
            "flink-watch",
            "--rest",
            "http://127.0.0.1:1",
            "--job",
            "p",
            "--job-id",
            JOB,
            "--poll-interval",
            "0",
        ],
        ["flink-watch", "--rest", "127.0.0.1:8081", "--job", "p", "--job-id", JOB],
        ["flink-import", "--job", "payments"],
    ],
)
def test_bad_options_exit_2(argv: list[str], tmp_path: Path) -> None:
    assert cli.main([*argv, "--ledger", str(tmp_path / "ledger")]) == EXIT_USAGE


def test_an_unreachable_jobmanager_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"

    code = cli.main(
        ["flink-watch", "--rest", url, "--job-id", JOB, "--job", "p", "--ledger", str(tmp_path / "l")]
    )

    assert code == EXIT_INFRA
    assert "unreachable" in capsys.readouterr().err


def test_an_unknown_job_id_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with jobmanager({"/jobs/overview": {"jobs": []}}) as url:
        code = cli.main(
            ["flink-watch", "--rest", url, "--job-id", JOB, "--job", "p", "--ledger", str(tmp_path / "l")]
        )

    assert code == EXIT_USAGE
    assert f"knows no job {JOB}" in capsys.readouterr().err


def test_following_a_job_that_ended_warns_about_its_retention_and_names_what_it_missed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = tmp_path / "ledger"
    gone = tmp_path / "checkpoints" / JOB  # Flink deleted chk-1 already

    with jobmanager(finished_job(str(gone))) as url:
        code = cli.main(
            [
                "flink-watch",
                "--rest",
                url,
                "--job-id",
                JOB,
                "--job",
                "payments",
                "--ledger",
                str(ledger),
                "--json",
            ]
        )

    assert code == EXIT_OK
    out = capsys.readouterr()
    summary = json.loads(out.out)
    assert summary["runs"] == [JOB]
    assert summary["stopped_runs"] == [JOB]
    assert summary["missed"][0]["id"] == 1
    assert summary["missed"][0][vocab.DETAIL_REASON] == vocab.MISSED_FILES_GONE
    warnings = " ".join(summary["warnings"])  # also logged at WARNING, to stderr
    assert "num-retained" in warnings
    assert "RETAIN_ON_CANCELLATION" in warnings
    events = {r["event_type"] for r in DeltaTable(str(ledger)).to_pyarrow_table().to_pylist()}
    assert events == {vocab.EVENT_RUN_STARTED, vocab.EVENT_RUN_STOPPED}


def test_flink_import_of_a_directory_without_checkpoints_imports_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()

    code = cli.main(
        [
            "flink-import",
            "--path",
            str(tmp_path / "empty"),
            "--job",
            "p",
            "--ledger",
            str(tmp_path / "l"),
            "--json",
        ]
    )

    assert code == EXIT_OK
    assert json.loads(capsys.readouterr().out)["found"] == 0
    assert (
        cli.main(
            [
                "flink-import",
                "--path",
                str(tmp_path / "missing"),
                "--job",
                "p",
                "--ledger",
                str(tmp_path / "l"),
            ]
        )
        == EXIT_USAGE
    )
