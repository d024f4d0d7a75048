"""README's spark-submit line for a user's job ("Audit your own job") run as written: taken from
README.md, only its placeholders replaced (the zip `make dist` builds, a job file of the test's
own), its `--packages` resolved by spark-submit's Ivy from Maven Central. The job reads Kafka
through the connector (which needs the token provider's classes), attaches the audit from the zip
and writes a Delta table.

Ivy consults `~/.m2` before Central; `make setup` leaves poms there whose jars it never fetched,
on which Ivy fails ("download failed"). The run therefore gets a home of its own, kept between
runs (so is its Ivy cache under it), and resolves from Central as a user's machine does.

The cluster block's `--packages` are the same plus hadoop-aws (its AWS SDK bundle is 640 MB, which
the cluster tier takes from conf/jvm/s3/pom.xml instead): its token provider's options are the ones
this test runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from app import __version__
from app.contracts import vocabulary as vocab
from tests.cluster import readme
from tests.cluster.servers import JVM_OPTIONS
from tests.cluster.submit import SUBMIT_TIMEOUT_S, py_files_of
from tests.support.streaming import create_topic, produce

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(2400)]

PARTITIONS = 2
RECORDS = 40
# Where Ivy resolves and caches, outside the user's ~/.m2 (above).
SUBMIT_HOME = Path.home() / ".cache" / "offset-audit" / "readme-submit-home"
HADOOP_AWS = "org.apache.hadoop:hadoop-aws:3.4.2"

# The user's job: values from the environment, so that README's line runs unchanged.
JOB = """\
import json
import os

from pyspark.sql import SparkSession

from app import audit

env = os.environ
spark = SparkSession.builder.appName("readme-job").getOrCreate()
records = (
    spark.readStream.format("kafka")
    .option("kafka.bootstrap.servers", env["JOB_BOOTSTRAP"])
    .option("subscribe", env["JOB_TOPIC"])
    .option("startingOffsets", "earliest")
    .load()
    .selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")
)
query = (
    records.writeStream.format("delta")
    .option("checkpointLocation", env["JOB_CHECKPOINT"])
    .trigger(availableNow=True)
    .start(env["JOB_SINK"])
)
attachment = audit.attach(query, job_name="readme-job", ledger=env["JOB_LEDGER"])
try:
    query.awaitTermination()
finally:
    closed = attachment.close()
print(json.dumps({"audit": audit.__file__, "ledger_closed": closed}))
"""


def test_readmes_spark_submit_line_for_a_users_job_resolves_and_runs_as_written(
    tmp_path: Path, dist: Path, bootstrap: str, unique: str
) -> None:
    topic = f"readme-submit-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, RECORDS, PARTITIONS)
    py_files = py_files_of(dist)
    job = tmp_path / "job.py"
    job.write_text(JOB)
    command = readme.user_job_command(__version__, py_files, job)
    SUBMIT_HOME.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_", "PYTHONPATH"))}
    env.update(
        # A shell with the project's virtualenv active: its `spark-submit` and `python3`.
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        SPARK_SUBMIT_OPTS=f"-Duser.home={SUBMIT_HOME} {JVM_OPTIONS}",  # and the tier's fast start
        SPARK_LOCAL_IP="127.0.0.1",
        JOB_BOOTSTRAP=bootstrap,
        JOB_TOPIC=topic,
        JOB_CHECKPOINT=str(tmp_path / "checkpoint"),
        JOB_SINK=str(tmp_path / "sink"),
        JOB_LEDGER=str(tmp_path / "ledger"),
    )
    done = subprocess.run(
        ["bash", "-e", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=SUBMIT_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"

    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert printed == {"audit": f"{py_files}/app/audit.py", "ledger_closed": True}
    assert DeltaTable(str(tmp_path / "sink")).to_pyarrow_table().num_rows == RECORDS
    ledger = DeltaTable(str(tmp_path / "ledger")).to_pyarrow_table()
    completed = ledger.filter(pc.equal(ledger["event_type"], vocab.EVENT_CHECKPOINT_COMPLETED))
    assert completed.num_rows > 0


def test_the_cluster_blocks_packages_are_the_users_plus_hadoop_aws() -> None:
    user = readme.packages_options(readme.user_job_block())
    cluster = readme.packages_options(readme.cluster_block().prelude)
    assert cluster == {**user, "--packages": f"{user['--packages']},{HADOOP_AWS}"}
