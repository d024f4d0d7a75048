"""`ledger-import` on a wrong path answers before Spark starts: a directory that holds no
checkpoint, a missing one, a sink that is no Delta table or holds no commit of the query exit 2
naming the path, with no JVM started (`java` is a stand-in that records any call and fails; each store's
wrong paths in one process, tests/unit/no_jvm.py), on a local disk and on an S3 store (moto's
server, in its own Python process).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from app.commands.outcome import EXIT_USAGE
from tests.cluster import servers
from tests.cluster.servers import S3_ACCESS_KEY, S3_REGION, S3_SECRET_KEY, S3Server
from tests.cluster.submit import delta_rs_s3_options
from tests.support.config import set_options
from tests.unit.no_jvm import run_without_java

pytestmark = pytest.mark.unit

BUCKET = "ledger-import"
OFFSETS = '{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n{"payments":{"0":20,"1":10}}'


def checkpoint_files() -> dict[str, str]:
    """A query's checkpoint with one committed batch, as Spark lays it out (relative path -> text)."""
    return {
        "metadata": json.dumps({"id": str(uuid.uuid4())}) + "\n",
        "offsets/0": f"v1\n{OFFSETS}",
        "commits/0": 'v1\n{"nextBatchWatermarkMs":0}',
    }


def other_table() -> pa.Table:
    return pa.table({"id": [1, 2]})


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with servers.s3_server(tmp_path_factory.mktemp("s3"), BUCKET) as server:
        yield server


def import_line(checkpoint: str, *extra: str) -> list[str]:
    return ["ledger-import", "--checkpoint", checkpoint, "--job", "payments", *extra]


def test_a_wrong_local_path_answers_with_exit_2_naming_it_before_spark_starts(tmp_path: Path) -> None:
    data = set_options(data_dir=tmp_path / "data")
    empty = tmp_path / "not-a-checkpoint"
    (empty / "offsets").mkdir(parents=True)
    missing = tmp_path / "missing"
    checkpoint = tmp_path / "checkpoint"
    for name, text in checkpoint_files().items():
        (checkpoint / name).parent.mkdir(parents=True, exist_ok=True)
        (checkpoint / name).write_text(text)
    wrong_sink = tmp_path / "other-table"
    write_deltalake(str(wrong_sink), other_table())
    no_table = tmp_path / "no-table"
    no_table.mkdir()

    lines = {
        str(empty): import_line(str(empty), *data),
        str(missing): import_line(str(missing), *data),
        str(wrong_sink): import_line(str(checkpoint), "--sink", str(wrong_sink), *data),
        str(no_table): import_line(str(checkpoint), "--sink", str(no_table), *data),
    }
    probe = run_without_java(tmp_path / "no-java", list(lines.values()))
    for path, run in zip(lines, probe.runs, strict=True):
        assert (run.code, path in run.stderr) == (EXIT_USAGE, True), (path, run.stderr)
    assert probe.java_calls == ""


def test_a_wrong_s3a_path_answers_with_exit_2_naming_it_before_spark_starts(
    tmp_path: Path, s3: S3Server
) -> None:
    prefix = f"s3a://{BUCKET}/{uuid.uuid4().hex}"
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
        OFFSET_AUDIT_DATA_DIR=f"{prefix}/data",
        OFFSET_AUDIT_LOCAL_DIR=str(tmp_path),
    )
    client = s3.client()
    key = prefix.split("/", 3)[3]
    for name, text in checkpoint_files().items():
        client.put_object(Bucket=BUCKET, Key=f"{key}/checkpoint/{name}", Body=text.encode())
    wrong_sink = f"{prefix}/other-table"
    write_deltalake(
        wrong_sink.replace("s3a://", "s3://"), other_table(), storage_options=delta_rs_s3_options(s3)
    )
    cluster = ["--env", "cluster"]

    lines = {
        f"{prefix}/missing": import_line(f"{prefix}/missing", *cluster),
        wrong_sink: import_line(f"{prefix}/checkpoint", "--sink", wrong_sink, *cluster),
    }
    probe = run_without_java(tmp_path / "no-java", list(lines.values()), env)
    for path, run in zip(lines, probe.runs, strict=True):
        assert (run.code, path in run.stderr) == (EXIT_USAGE, True), (path, run.stderr)
    assert probe.java_calls == ""
