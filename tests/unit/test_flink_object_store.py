"""Flink checkpoints on S3 (moto's server, in its own Python process): the committed fixture
checkpoints and savepoints uploaded to a bucket decode as they do on local disk through every name
Flink gives the store (s3://, s3a://, s3p://), and `flink-import --path s3a://...` writes the ledger
rows a local import writes, once, with no JVM (the import writes through delta-rs); the sidecar
recovers the checkpoints a killed job completed on the store after its last poll."""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from app.audit import import_flink_checkpoints
from app.commands.outcome import EXIT_OK, EXIT_USAGE
from app.contracts import vocabulary as vocab
from app.errors import FlinkCheckpointGoneError, InfrastructureError
from app.flink import files
from app.flink.import_ import find_retained
from app.flink.metadata import read_checkpoint
from app.storage import backend
from tests.cluster import servers
from tests.cluster.servers import S3_ACCESS_KEY, S3_REGION, S3_SECRET_KEY, S3Server
from tests.support.flink_watcher import JOB_A, JOB_B, T0, FakeClock, FakeFlink, clock, flink, of, watcher
from tests.unit import flink_bytes as fb
from tests.unit.no_jvm import run_without_java

pytestmark = pytest.mark.unit

__all__ = ["clock", "flink"]  # fixtures shared with the tests they come from
BUCKET = "flink-checkpoints"
FIXTURES = Path(__file__).parent / "flink_fixtures"
# Every retained checkpoint and savepoint directory of the fixtures (the large one's state in files).
RETAINED = sorted(p.parent for p in FIXTURES.glob("*/*/_metadata"))


def storage_options(s3: S3Server) -> dict[str, str]:
    """Config `storage.options` for the server, as conf/cluster.yaml spells them."""
    return {
        "fs.s3a.endpoint": s3.endpoint,
        "fs.s3a.endpoint.region": S3_REGION,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.access.key": S3_ACCESS_KEY,
        "fs.s3a.secret.key": S3_SECRET_KEY,
    }


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with servers.s3_server(tmp_path_factory.mktemp("s3"), BUCKET) as server:
        yield server


@pytest.fixture(scope="module")
def uploaded(s3: S3Server) -> str:
    """The fixture tree under a fresh prefix of the bucket: its s3a:// root."""
    prefix = f"fixtures-{uuid.uuid4().hex}"
    client = s3.client()
    for local in FIXTURES.rglob("*"):
        if local.is_file():
            key = f"{prefix}/{local.relative_to(FIXTURES).as_posix()}"
            client.put_object(Bucket=BUCKET, Key=key, Body=local.read_bytes())
    return f"s3a://{BUCKET}/{prefix}"


def test_a_checkpoint_on_s3_decodes_as_on_local_disk_under_every_scheme_flink_names(
    s3: S3Server, uploaded: str
) -> None:
    assert len(RETAINED) >= 10
    for directory in RETAINED:
        local = read_checkpoint(str(directory))
        relative = directory.relative_to(FIXTURES).as_posix()
        for scheme in ("s3a", "s3", "s3p"):
            remote_dir = f"{scheme}://{uploaded.split('://', 1)[1]}/{relative}"
            remote = read_checkpoint(remote_dir, storage_options(s3))
            assert remote.path == remote_dir
            assert dataclasses.replace(remote, path=local.path) == local, remote_dir


def test_a_missing_checkpoint_on_s3_is_gone_naming_its_location(s3: S3Server, uploaded: str) -> None:
    missing = f"{uploaded}/no-such-job/chk-9"
    with pytest.raises(FlinkCheckpointGoneError) as gone:
        read_checkpoint(missing, storage_options(s3))
    assert f"{missing}/_metadata" in str(gone.value)


def test_an_object_store_failure_names_the_location_and_masks_the_credentials() -> None:
    where = backend.Location("s3://bucket", {"AWS_SECRET_ACCESS_KEY": "very-secret-key"})
    location = "s3a://bucket/job/chk-3/_metadata"
    with pytest.raises(InfrastructureError) as failed, files._store_errors(location, where, "be read"):
        raise OSError("signature for very-secret-key does not match")
    text = str(failed.value)
    assert location in text
    assert "very-secret-key" not in text
    assert failed.value.__cause__ is None


def ledger_rows(ledger: Path, root: str) -> list[dict[str, Any]]:
    """The ledger's rows with the checkpoint root's name made neutral and the file times left out,
    the event date with them (a local file's time is its checkout's, an object's its upload's: a
    day apart when the suite runs past midnight after the checkout)."""
    rows = DeltaTable(str(ledger)).to_pyarrow_table().to_pylist()
    out = []
    for row in rows:
        kept = {k: v for k, v in row.items() if not k.endswith(("_time", "_at", "_ms", "_date"))}
        kept["detail"] = json.loads((kept.get("detail") or "{}").replace(root, "ROOT"))
        out.append(kept)
    return sorted(out, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def test_flink_import_from_s3a_writes_the_rows_a_local_import_writes_once_without_a_jvm(
    s3: S3Server, uploaded: str, tmp_path: Path
) -> None:
    retained = find_retained(uploaded, storage_options(s3))
    assert sorted(f.path.removeprefix(uploaded) for f in retained) == sorted(
        f.path.removeprefix(str(FIXTURES)) for f in find_retained(str(FIXTURES))
    )
    assert all(f.modified_ms > 0 for f in retained)  # the objects' times time the events
    local_ledger = tmp_path / "local-ledger"
    local = import_flink_checkpoints(str(FIXTURES), job_name="payments", ledger=str(local_ledger))
    assert local.imported >= 9
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "OFFSET_AUDIT"))}
    env.update(  # what conf/cluster.yaml reads
        S3_ENDPOINT=s3.endpoint,
        S3_PATH_STYLE_ACCESS="true",
        AWS_REGION=S3_REGION,
        AWS_ACCESS_KEY_ID=S3_ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY=S3_SECRET_KEY,
        KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9",
        KAFKA_USERNAME="user",
        KAFKA_PASSWORD="password",
        OFFSET_AUDIT_DATA_DIR=str(tmp_path / "data"),
        OFFSET_AUDIT_LOCAL_DIR=str(tmp_path),
    )
    s3_ledger = tmp_path / "s3-ledger"
    argv = ["flink-import", "--path", uploaded, "--job", "payments", "--ledger", str(s3_ledger)]

    missing = ["flink-import", "--path", f"{uploaded}/no-such-job", "--job", "payments", "--env", "cluster"]
    # one process, as a person would run them: the import, the same again, a path with no job
    probe = run_without_java(
        tmp_path / "no-java", [[*argv, "--env", "cluster", "--json"]] * 2 + [missing], env
    )
    first, again, absent = probe.runs

    assert first.code == EXIT_OK, first.stderr
    assert again.code == EXIT_OK, again.stderr
    imported, repeated = json.loads(first.stdout), json.loads(again.stdout)
    assert (imported["found"], imported["imported"]) == (local.found, local.imported)
    assert (repeated["imported"], repeated["events_written"]) == (0, 0)
    assert repeated["already_recorded"] == local.imported
    assert ledger_rows(s3_ledger, uploaded) == ledger_rows(local_ledger, str(FIXTURES))
    assert S3_SECRET_KEY not in first.stdout + first.stderr
    assert (absent.code, f"{uploaded}/no-such-job" in absent.stderr) == (EXIT_USAGE, True), absent.stderr
    assert probe.java_calls == ""


def test_checkpoints_on_s3_completed_between_the_last_poll_and_a_kill_are_recovered(
    s3: S3Server, flink: FakeFlink, clock: FakeClock, tmp_path: Path
) -> None:
    prefix = f"s3p://{BUCKET}/watch-{uuid.uuid4().hex}"
    client = s3.client()

    def retained(job: str, checkpoint_id: int, offset: int) -> str:
        chk = f"{prefix}/{job}/chk-{checkpoint_id}"
        metadata = fb.kafka_source_checkpoint(4, checkpoint_id, [[("orders", 0, offset)]])
        client.put_object(Bucket=BUCKET, Key=f"{chk.split('/', 3)[3]}/_metadata", Body=metadata)
        return chk

    options = storage_options(s3)
    ledger = tmp_path / "ledger"
    flink.submit(JOB_A, T0, name="payments")
    w = watcher(flink, ledger, clock, flink_job_id=None, flink_job_name="payments", storage_options=options)
    w.read = lambda path: read_checkpoint(path, options)
    w.start()
    flink.complete(JOB_A, 1, T0 + 1000, {})
    flink.history[JOB_A][-1]["external_path"] = retained(JOB_A, 1, 10)
    w.poll_once()
    # Checkpoints 2 and 3 complete on the store, and the process is killed before the next poll.
    retained(JOB_A, 2, 20)
    restored = retained(JOB_A, 3, 30)
    flink.jobs.clear()
    flink.submit(JOB_B, T0 + 9000, name="payments")
    flink.restore(JOB_B, 3, T0 + 9500)
    flink.restored[JOB_B]["external_path"] = restored  # type: ignore[index]
    w.poll_once()

    completed = of(ledger, vocab.EVENT_CHECKPOINT_COMPLETED, JOB_A)
    assert sorted((r["checkpoint_id"], r["offset"]) for r in completed) == [(1, 10), (2, 20), (3, 30)]
    restarted = of(ledger, vocab.EVENT_OFFSETS_RESTORED)
    assert [(r["checkpoint_id"], r["offset"]) for r in restarted] == [(3, 30)]
