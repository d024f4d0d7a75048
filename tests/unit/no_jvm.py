"""Command lines run through ``cli.main`` in one fresh process where `java` cannot start.

A command that answers "without a JVM" is shown to in a process of its own: no Spark session can be
running in it already, and `java` (JAVA_HOME's and PATH's) is a stand-in that records any call and
fails, so a command that tried to start Spark (or any JVM) leaves a record, whatever the timing.
One process runs every command line of a claim, one after the other, as a person would type them;
it first builds the parser and reports which engines that imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.runtime.jvm import REPO_ROOT

TIMEOUT_S = 300  # a deadline for a hung process, not a speed check

# What the commands' work needs and a parser does not (their imports were two thirds of `--help`'s time).
ENGINES = ("pyspark", "py4j", "pyarrow", "deltalake", "confluent_kafka", "duckdb", "great_expectations")

MARK = "=== offset-audit probe: "

# argv[1]: a JSON list of command lines; argv[2]: the file the `java` stand-in appends to. A marker
# line on stdout and stderr before each command line splits what the commands print (their logs
# included); the codes and each one's calls of `java` follow the last marker.
PROBE = f"""
import json, os, sys
from app import cli
cli.build_parser()
engines = [m for m in {ENGINES!r} if m in sys.modules]
codes, java = [], []
def java_calls():
    return open(sys.argv[2]).read() if os.path.exists(sys.argv[2]) else ""
def mark(what):
    for stream in (sys.stdout, sys.stderr):
        print({MARK!r} + what, file=stream, flush=True)
for i, argv in enumerate(json.loads(sys.argv[1])):
    mark(str(i))
    before = java_calls()
    codes.append(cli.main(argv))
    java.append(java_calls()[len(before):])
mark("end")
print(json.dumps({{"engines": engines, "codes": codes, "java": java}}), flush=True)
os._exit(0)  # as cli.run_and_exit does: no interpreter shutdown for native thread pools to abort
"""


@dataclass(frozen=True)
class Run:
    argv: tuple[str, ...]
    code: int
    stdout: str
    stderr: str
    java_calls: str  # what the stand-in recorded during this run: empty when no JVM was asked for


@dataclass(frozen=True)
class Probe:
    engines: list[str]  # the engines imported by building the parser
    runs: list[Run]  # in the order given
    java_calls: str  # what the stand-in recorded in the whole process, the parser's build included


def no_java_env(home: Path, base: Mapping[str, str] | None = None) -> tuple[dict[str, str], Path]:
    """``base`` (this process's environment) with a `java` that records its arguments and fails."""
    calls = home / "java-calls.log"
    java = home / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f'#!/bin/sh\necho "java $*" >> "{calls}"\nexit 1\n')
    java.chmod(0o755)
    source = os.environ if base is None else base
    env = {k: v for k, v in source.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env.update(JAVA_HOME=str(home), PATH=os.pathsep.join([str(java.parent), env.get("PATH", "")]))
    return env, calls


def _split(text: str, count: int) -> list[str]:
    """What was printed after each of ``count`` markers, up to the end marker."""
    parts: list[list[str]] = []
    for line in text.splitlines(keepends=True):
        if line.startswith(MARK):
            parts.append([])
        elif parts:
            parts[-1].append(line)
    return ["".join(p) for p in parts[:count]]


def run_without_java(
    home: Path, lines: Sequence[Sequence[str]], env: Mapping[str, str] | None = None
) -> Probe:
    """``lines`` run in one process whose `java` is the stand-in (under ``home``); ``env`` the
    environment to start from, this process's by default."""
    child_env, calls = no_java_env(home, env)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps([list(line) for line in lines]), str(calls)],
        cwd=REPO_ROOT,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.splitlines()[-1])
    outs, errs = _split(done.stdout, len(lines)), _split(done.stderr, len(lines))
    runs = [
        Run(tuple(line), code, out, err, java)
        for line, code, out, err, java in zip(lines, result["codes"], outs, errs, result["java"], strict=True)
    ]
    return Probe(result["engines"], runs, calls.read_text() if calls.exists() else "")
