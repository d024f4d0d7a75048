"""One key per table: `tables.<name>` locates a table for every command, the keys it replaced fail
at load naming it, and no module but `storage.tables` computes a location."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from app.config import RETIRED_TABLE_KEYS, load_config
from app.errors import ConfigError
from app.offsets_topic.tables import DATA_TABLES, INGEST_POSITIONS
from app.storage.tables import TABLE_NAMES, tables_from_config

pytestmark = pytest.mark.unit

APP = Path(__file__).resolve().parents[2] / "app"


@pytest.mark.parametrize("old", sorted(RETIRED_TABLE_KEYS))
def test_a_retired_table_key_fails_at_load_naming_the_key_to_use(old: str) -> None:
    value = "{}" if old.endswith("sink_tables") else "somewhere"
    with pytest.raises(ConfigError) as raised:
        load_config("local", [f"{old}={value}"], environ={})
    assert raised.value.key == old
    new = RETIRED_TABLE_KEYS[old].split()[0]
    assert new.startswith("tables.")
    assert new in str(raised.value)


def test_a_retired_key_in_a_config_file_fails_the_same_way(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("reconcile:\n  group_commits_table: s3a://audit/gc\n")
    (tmp_path / "x.yaml").write_text("")
    with pytest.raises(ConfigError, match=r"reconcile\.group_commits_table.*tables\.group_commits"):
        load_config("x", conf_dir=tmp_path, environ={})


@pytest.mark.parametrize("name", TABLE_NAMES)
def test_every_table_is_located_by_its_key(name: str) -> None:
    base = ["paths.data_dir=/data"]
    assert tables_from_config(load_config("local", base, environ={})).named(name) == f"/data/tables/{name}"
    bare = load_config("local", [*base, f"tables.{name}=other_{name}"], environ={})
    assert tables_from_config(bare).named(name) == f"/data/tables/other_{name}"
    uri = load_config("local", [*base, f"tables.{name}=s3a://bucket/t/{name}"], environ={})
    assert tables_from_config(uri).named(name) == f"s3a://bucket/t/{name}"
    others = {n: tables_from_config(uri).named(n) for n in TABLE_NAMES if n != name}
    assert others == {n: f"/data/tables/{n}" for n in others}, "one key moves one table"


def test_the_ingest_tables_are_tables_of_the_config() -> None:
    """ingest-offsets writes its tables by the names the config keys carry: one location each."""
    assert set(DATA_TABLES) | {INGEST_POSITIONS} <= set(TABLE_NAMES)


def test_a_job_s_own_sink_wins_for_that_job_and_resolves_like_the_others() -> None:
    cfg = load_config(
        "local",
        ["paths.data_dir=/data", "tables.sink=shared", "tables.sink_by_job.orders.v2=s3a://b/o"],
        environ={},
    )
    tables = tables_from_config(cfg)
    assert tables.sink_for("orders.v2") == "s3a://b/o"
    assert tables.sink_for("other") == "/data/tables/shared"
    assert (tables.sink_key_for("orders.v2"), tables.sink_key_for("other")) == (
        "tables.sink_by_job.orders.v2",
        "tables.sink",
    )
    overridden = tables_from_config(cfg, sink_override="/x/sink")
    assert (overridden.sink_for("orders.v2"), overridden.sink_key_for("orders.v2")) == ("/x/sink", "--sink")


def _joins_tables_segment(node: ast.AST) -> bool:
    """A string literal "tables" passed to a call or formatted into a path: an ad-hoc location."""
    if isinstance(node, ast.Call):
        return any(isinstance(a, ast.Constant) and a.value == "tables" for a in node.args)
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(v, ast.Constant) and "/tables/" in str(v.value) for v in node.values)
    return False


def test_only_the_resolver_computes_a_table_location() -> None:
    offenders = [
        f"{path.relative_to(APP.parent)}:{node.lineno}"
        for path in sorted(APP.rglob("*.py"))
        if path != APP / "storage" / "tables.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.expr) and _joins_tables_segment(node)
    ]
    assert offenders == []
