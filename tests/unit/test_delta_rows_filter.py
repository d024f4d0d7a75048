"""A filter on a string column of a MERGEd table: delta-rs's MERGE writes strings as string_view in
the Parquet files, and pyarrow cannot push such a comparison into them; rows_where still answers."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from app.storage import delta_rows

pytestmark = pytest.mark.unit

SCHEMA = StructType([StructField("job_name", StringType()), StructField("n", LongType())])


def test_a_string_filter_over_a_merged_table_returns_the_matching_rows(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    rows = [{"job_name": "a", "n": 1}, {"job_name": "b", "n": 2}, {"job_name": "a", "n": 3}]
    delta_rows.merge_rows(None, path, SCHEMA, rows, ["job_name", "n"])
    where = pc.field("job_name") == "a"
    data = delta_rows.dataset(None, path)
    assert data is not None
    with pytest.raises(NotImplementedError, match="string_view"):
        data.to_table(filter=where)  # what the scan alone does (if this passes, pyarrow fixed it)
    got = delta_rows.rows_where(None, path, where, prune=pc.field("n") >= 2)
    assert got is not None
    assert got.to_pylist() == [{"job_name": "a", "n": 3}]
    assert delta_rows.rows_where(None, str(tmp_path / "none"), where) is None
