"""The contracts' DDL spelling reads into exactly the StructType Spark would build, and a typo in a
contract fails at import with the column it cannot read."""

from __future__ import annotations

import pytest
from pyspark.sql import types as t

from app.contracts.tables import INCIDENTS_SCHEMA, schema

pytestmark = pytest.mark.unit


def test_a_column_list_reads_into_fields_with_types_and_nullability() -> None:
    assert schema("a STRING NOT NULL, b BIGINT, c ARRAY<STRING>, d TIMESTAMP NOT NULL") == t.StructType(
        [
            t.StructField("a", t.StringType(), False),
            t.StructField("b", t.LongType(), True),
            t.StructField("c", t.ArrayType(t.StringType(), True), True),
            t.StructField("d", t.TimestampType(), False),
        ]
    )


def test_the_contract_columns_keep_their_spark_types() -> None:
    fields = {f.name: f for f in INCIDENTS_SCHEMA.fields}
    assert fields["run_ids"].dataType == t.ArrayType(t.StringType(), True)
    assert fields["incident_id"].nullable is False
    assert fields["records_lost"].dataType == t.LongType()


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ("a VARCHAR", "unknown column type 'VARCHAR'"),
        ("a STRING NULL", "cannot read column 'a STRING NULL'"),
        ("a", "cannot read column 'a'"),
    ],
)
def test_a_column_it_cannot_read_is_named(columns: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        schema(columns)
