"""The vocabulary is the only speller: no word of `app/contracts/vocabulary.py` is written as a string
literal in `app/` (outside `app/contracts`) or `checks/`; code takes the named constant instead.

The words are every value of the vocabulary's closed sets (its tuples of strings: event types, skip
reasons, restore sources and startup modes, record kinds, finding types, severities, statuses,
skipped reasons, restart classes, incident kinds and statuses, remedy actions, run statuses, run
commands, engines, offset semantics, detail keys) and its single string constants.

What counts as spelling a word (each rule below has no hit on a legitimate use today; a new hit is
either a leak to fix or a new homonym, which goes into HOMONYMS with the reason):

1. A *distinctive* word (upper-case like GAP, or holding `_` or `-` like commit_disabled,
   flink-legacy) anywhere in a string literal, as a whole word: a literal of its own, a part of an
   f-string, a word inside SQL text. Docstrings and SQL comments (`--` to the end of the line) are
   prose and not looked at. A word that is also a column of a table contract (`resume_source` is a
   restarts column and a detail key) is a column name there, which the contract spells.
2. A *common* word (one lower-case word such as open, error, info, commit, next, snapshot, spark,
   group, latest) only where the literal does the vocabulary's job:
   a. an operand of a comparison or membership test (`x == "open"`, `x in ("earliest", "latest")`),
   b. a tuple, list or set literal of two or more words that all belong to one vocabulary set
      (a re-spelled set, such as a second list of startup modes),
   c. a dict literal whose two or more keys all belong to one vocabulary set (a table keyed by the
      vocabulary, such as severity by restart class),
   d. a SQL string literal compared in SQL text (`status = 'open'`, `kind IN ('a', 'b')`).
   A common word anywhere else (a JSON key of command output, a Kafka option value, a Spark
   column name that happens to be `timestamp`) is the English word, not the vocabulary's.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from pyspark.sql.types import StructType

from app.contracts import tables as table_contracts
from app.contracts import vocabulary as vocab

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("app", "checks")
EXEMPT_DIRS = (ROOT / "app" / "contracts",)

# Literals that spell a vocabulary word for another idea, by (file, word): why it is not the word.
HOMONYMS: dict[tuple[str, str], str] = {
    ("app/reconcile/ledger/commit_rules.py", "superseded_by"): (
        "a SKIPPED_COMMIT's evidence key and its SQL column, named after the detail it carries"
    ),
    ("app/reconcile/ledger/audit.py", "exact"): "a claim's match kind in the SQL of `matched`",
    ("app/offsets_topic/run.py", "snapshot"): "the ingest mode (config.INGEST_MODES)",
    ("app/flink/rest.py", "external_path"): "the field of Flink's REST documents the detail key is named for",
    ("app/config.py", "startup_mode"): "the config key `stream.startup_mode` the detail key is named for",
    ("app/demo/story.py", "startup_mode"): "the config key `stream.startup_mode`, set by the demo's runs",
    ("app/maintenance/run.py", "sink"): "the table name `sink` (TABLE_NAMES), not the detail key",
    ("app/storage/handles.py", "sink"): "the table name `sink` (TABLE_NAMES), not the detail key",
}

# Leaks in modules another branch of the same change rewrites, by (file, word): that branch.
# Narrow on purpose: the same word in any other file still fails.
PENDING: dict[tuple[str, str], str] = {}


class Leak(NamedTuple):
    path: str
    line: int
    word: str
    rule: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.word!r} ({self.rule})"


def vocabulary_sets() -> list[frozenset[str]]:
    """Every closed set of the vocabulary, and each single constant as a set of its own."""
    sets: list[frozenset[str]] = []
    for name, value in vars(vocab).items():
        if not name.isupper():
            continue
        if isinstance(value, tuple) and value and all(isinstance(v, str) for v in value):
            sets.append(frozenset(value))
        elif isinstance(value, str):
            sets.append(frozenset({value}))
    return sets


SETS = vocabulary_sets()
WORDS = frozenset().union(*SETS)


def is_distinctive(word: str) -> bool:
    return "_" in word or "-" in word or word.isupper()


DISTINCTIVE = sorted((w for w in WORDS if is_distinctive(w)), key=len, reverse=True)
# A distinctive word as a whole word: not part of a longer identifier or name (GAP_X, x-flink-legacy).
WHOLE_WORD = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, DISTINCTIVE)) + r")(?![\w-])")
SQL_COMMENT = re.compile(r"--[^\n]*")
# A SQL string literal compared: `= 'w'`, `'w' <>`, or one of `IN ('a', 'b')`.
SQL_COMPARED = (
    re.compile(r"(?:=|<>|!=)\s*'([\w-]+)'"),
    re.compile(r"'([\w-]+)'\s*(?:=|<>|!=)"),
)
SQL_IN_LIST = re.compile(r"\bIN\s*\(([^)]*)\)", re.IGNORECASE)
SQL_STRING = re.compile(r"'([\w-]+)'")
COLUMNS = frozenset(
    f.name for v in vars(table_contracts).values() if isinstance(v, StructType) for f in v.fields
)


def in_one_set(words: list[str | None]) -> bool:
    """Two or more literal words, all of one vocabulary set."""
    return len(words) >= 2 and any(set(words) <= s for s in SETS)


def docstring_nodes(tree: ast.AST) -> set[int]:
    """ids of string constants that are statements of their own: docstrings and the like."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def string_value(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def sql_compared(text: str) -> Iterator[str]:
    """The SQL string literals of ``text`` that are compared (rule 2d)."""
    for pattern in SQL_COMPARED:
        yield from (m.group(1) for m in pattern.finditer(text))
    for listed in SQL_IN_LIST.finditer(text):
        yield from (m.group(1) for m in SQL_STRING.finditer(listed.group(1)))


def leaks_in(tree: ast.AST, path: str) -> Iterator[Leak]:
    prose = docstring_nodes(tree)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        text = string_value(node)
        if text is not None and id(node) not in prose:
            code = SQL_COMMENT.sub("", text)
            for match in WHOLE_WORD.finditer(code):
                if match.group(1) not in COLUMNS:
                    yield Leak(path, line, match.group(1), "distinctive word")
            for compared in sql_compared(code):
                if compared in WORDS:
                    yield Leak(path, line, compared, "compared in SQL")
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                elements = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
                for element in elements:
                    word = string_value(element)
                    if word is not None and word in WORDS and not is_distinctive(word):
                        yield Leak(path, line, word, "compared")
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            words = [string_value(e) for e in node.elts]
            if in_one_set(words):
                yield Leak(path, line, ", ".join(map(str, words)), "set re-spelled")
        if isinstance(node, ast.Dict):
            keys = [None if k is None else string_value(k) for k in node.keys]
            if in_one_set(keys):
                yield Leak(path, line, ", ".join(map(str, keys)), "dict keyed by a set")


def scanned_files() -> Iterator[Path]:
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if not any(path.is_relative_to(d) for d in EXEMPT_DIRS):
                yield path


def all_leaks() -> list[Leak]:
    found: list[Leak] = []
    for path in scanned_files():
        rel = path.relative_to(ROOT).as_posix()
        found += leaks_in(ast.parse(path.read_text(), filename=rel), rel)
    return found


def test_no_vocabulary_word_is_spelled_outside_contracts() -> None:
    leaks = [
        leak
        for leak in all_leaks()
        if (leak.path, leak.word) not in HOMONYMS and (leak.path, leak.word) not in PENDING
    ]
    assert not leaks, (
        "vocabulary words spelled outside app/contracts (use the named constant):\n"
        + "\n".join(map(str, leaks))
    )


LEAKY = '''
"""A docstring may say GAP and open."""
done = status == "confirmed"
kinds = ("earliest", "latest")
by_class = {"replay": 1, "skip": 2}
sql = f"SELECT * FROM findings WHERE finding_type = '{t}' AND status IN ('open', 'benign')"
reason = "commit_disabled"
'''
PLAIN = """
summary = {"failed": 3, "source": "ledger"}  # JSON keys of an output
conf = consumer_conf(offset_reset="earliest")  # a Kafka option value
ts = F.col("timestamp")  # a Spark column
sql = "SELECT 1 -- GAP in a SQL comment"
names = ("spark", "kafka", "s3")  # not all words of one set
"""


def test_each_rule_finds_the_leak_it_names() -> None:
    found = {(leak.word, leak.rule) for leak in leaks_in(ast.parse(LEAKY), "x.py")}
    assert found == {
        ("confirmed", "compared"),
        ("earliest, latest", "set re-spelled"),
        ("replay, skip", "dict keyed by a set"),
        ("open", "compared in SQL"),
        ("benign", "compared in SQL"),
        ("commit_disabled", "distinctive word"),
    }


def test_common_words_used_as_english_are_not_leaks() -> None:
    assert list(leaks_in(ast.parse(PLAIN), "x.py")) == []
