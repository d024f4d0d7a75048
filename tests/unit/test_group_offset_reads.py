"""A group's committed offsets are read through a consumer of the group, never through the Admin
API's OffsetFetch (`AdminClient.list_consumer_group_offsets`): librdkafka kills the process with
SIGSEGV when that request is answered NOT_COORDINATOR, as a loading coordinator answers
(app/kafka/group_offsets.py). The one exception is the test of retry_kafka, which needs the Admin
API's own retriable answer and first waits, through a consumer of the group, until the coordinator
has loaded."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from app.kafka.group_offsets import group_reader_conf

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("app", "jobs", "checks", "bench", "tests")
ALLOWED = {Path("tests/kafka/test_kafka_retry.py")}
ADMIN_OFFSET_FETCH = "list_consumer_group_offsets"


def admin_offset_fetches(tree: ast.AST) -> list[int]:
    """Lines that call `<anything>.list_consumer_group_offsets(...)`."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == ADMIN_OFFSET_FETCH
    ]


def test_the_check_sees_a_call_and_not_a_mention() -> None:
    source = '"""list_consumer_group_offsets is not used"""\nadmin.list_consumer_group_offsets([g])\n'
    assert admin_offset_fetches(ast.parse(source)) == [2]


def test_no_code_reads_a_groups_offsets_through_the_admin_api() -> None:
    found = {
        rel: lines
        for top in SOURCES
        for path in sorted((ROOT / top).rglob("*.py"))
        if (rel := path.relative_to(ROOT)) not in ALLOWED
        if (lines := admin_offset_fetches(ast.parse(path.read_text(), filename=str(path))))
    }
    assert not found, f"use app.kafka.group_offsets.group_offsets instead: {found}"


def test_the_group_reader_asks_for_stable_offsets_and_never_commits() -> None:
    conf = group_reader_conf({"bootstrap.servers": "b:9092", "enable.auto.commit": True}, "g")
    assert conf["group.id"] == "g"
    assert conf["enable.auto.commit"] is False
    assert conf["isolation.level"] == "read_committed"
