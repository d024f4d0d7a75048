"""Small filesystem helpers that work for local paths and cluster URIs alike (through Hadoop's FS)."""

from __future__ import annotations

from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession


def _fs_and_path(spark: SparkSession, path: str) -> tuple[Any, Any]:
    jvm: Any = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hpath


def read_text(spark: SparkSession, path: str) -> str | None:
    """Whole file as text, or None when it does not exist."""
    fs, hpath = _fs_and_path(spark, path)
    if not fs.exists(hpath):
        return None
    jvm: Any = spark.sparkContext._jvm
    stream = fs.open(hpath)
    try:
        data = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    return str(data)


def list_names(spark: SparkSession, path: str) -> list[str]:
    fs, hpath = _fs_and_path(spark, path)
    if not fs.exists(hpath):
        return []
    return [str(status.getPath().getName()) for status in fs.listStatus(hpath)]


def delete_path(spark: SparkSession, path: str) -> None:
    fs, hpath = _fs_and_path(spark, path)
    fs.delete(hpath, True)


def table_exists(spark: SparkSession, path: str) -> bool:
    return bool(DeltaTable.isDeltaTable(spark, path))


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """Write (replace) a small text file, through Hadoop's FS so cluster URIs work too."""
    fs, hpath = _fs_and_path(spark, path)
    stream = fs.create(hpath, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()


def modification_time_ms(spark: SparkSession, path: str) -> int | None:
    fs, hpath = _fs_and_path(spark, path)
    if not fs.exists(hpath):
        return None
    return int(fs.getFileStatus(hpath).getModificationTime())
