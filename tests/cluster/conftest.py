"""The cluster tier's servers, started once per session (tests/cluster/servers.py starts them the
same way for the reconcile benchmark): a Spark standalone master and two workers from pyspark's
own distribution, and an S3 API server (moto's server mode) with one bucket, reached by the jobs
through Hadoop's s3a:// connector. Each runs in its own process group with the parent-death
signal, so a killed pytest leaves no JVM behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.runtime import jvm
from tests.cluster import servers
from tests.cluster.servers import S3Server, SparkCluster
from tests.cluster.submit import build_dist

WORKERS = 2
BUCKET = "offset-audit"


@pytest.fixture(scope="session")
def cluster_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cluster")


@pytest.fixture(scope="session")
def spark_cluster(cluster_dir: Path) -> Iterator[SparkCluster]:
    with servers.spark_cluster(cluster_dir, WORKERS) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def s3_server(cluster_dir: Path) -> Iterator[S3Server]:
    with servers.s3_server(cluster_dir, BUCKET) as server:
        yield server


@pytest.fixture(scope="session")
def cluster_jars(cluster_dir: Path) -> list[Path]:
    """What spark-submit gets as --jars: Delta and the Kafka connector, then hadoop-aws and the SDK."""
    return jvm.spark_extra_jars() + jvm.resolve_classpath("s3")


@pytest.fixture(scope="session")
def dist(cluster_dir: Path) -> Path:
    """`make dist` once: the wheel and the `--py-files` zip every test of the library's distribution reads."""
    return build_dist(cluster_dir / "dist")
