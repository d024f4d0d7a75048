"""`offset-audit`: one CLI, thin subcommands, exit codes for schedulers.

0 clean; 1 findings at or above --fail-on; 2 usage or config error; 3 infrastructure error. The
codes and the final print are ``app.commands.outcome``, which the subcommands import (they never
import this module). Errors become exit codes only here, at the top: ``main`` returns the code
(tests call it in process), ``run_and_exit`` ends the process with it (the console script,
``python -m app.cli`` and the spark-submit entry points in jobs/).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from app import __version__
from app.commands.outcome import EXIT_INFRA, EXIT_INTERRUPTED, EXIT_OK, EXIT_READER_GONE, EXIT_USAGE, emit
from app.config import AppConfig, load_config
from app.errors import (
    ConfigError,
    InfrastructureError,
    OffsetAuditError,
    UsageError,
    describe_error,
    error_kind,
)
from app.runtime.log_config import quiet_third_party

log = logging.getLogger("offset-audit")

Handler = Callable[[argparse.Namespace, AppConfig], int]
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

# The pipeline's subcommands, each a module app.commands.<name> with add_arguments and run.
COMMANDS = {
    "stream": "the reference streaming job and its checkpoint ledger",
    "ingest-offsets": "decoding __consumer_offsets into Delta",
    "reconcile": "reconciling ledger, group commits and sink",
    "forensics": "restart forensics and the incident timeline",
    "incidents": "findings grouped by the event that caused them, with impact and remedy",
    "repair": "the remedy plan of one incident: printed, or carried out with --execute",
    "check": "Great Expectations suites",
    "report": "the HTML dashboard",
    "nightly": "the nightly pipeline",
    "maintain": "compaction, log checkpoints, VACUUM and retention of every table we write",
    "watch": "the audit every --interval seconds in one long-lived process, alerting new incidents",
    "demo": "the scripted end-to-end demo",
    "ledger-import": "backfill a job's ledger from an existing Spark checkpoint",
    "flink-watch": "follow a running Flink job from its REST API and write its ledger",
    "flink-import": "backfill a job's ledger from retained Flink checkpoints and savepoints",
}


# --- handlers ------------------------------------------------------------------------------------


def cmd_config_show(args: argparse.Namespace, cfg: AppConfig) -> int:
    shown = cfg.to_display()
    emit(args, shown, json.dumps(shown, indent=2, sort_keys=True))
    return EXIT_OK


def cmd_setup_jvm(args: argparse.Namespace, cfg: AppConfig) -> int:
    from app.runtime import jvm

    counts = {name: len(jvm.resolve_classpath(name, cfg.paths.cache_dir)) for name in jvm.CLASSPATH_NAMES}
    emit(args, {"classpaths": counts}, ", ".join(f"{k}: {v} jars" for k, v in counts.items()))
    return EXIT_OK


def local_kafka(cfg: AppConfig, die_with_parent: bool = False) -> Any:
    from app.demo.local_kafka import LocalKafka
    from app.runtime import jvm

    return LocalKafka(
        cfg.paths.kafka_dir,
        jvm.resolve_classpath("kafka", cfg.paths.cache_dir),
        offsets_partitions=cfg.local_kafka.offsets_partitions,
        heap=cfg.local_kafka.heap,
        start_timeout_s=cfg.local_kafka.start_timeout_s,
        die_with_parent=die_with_parent,
    )


def cmd_kafka_local(args: argparse.Namespace, cfg: AppConfig) -> int:
    from app.demo.local_kafka import LocalKafka

    if args.action == "start":
        state = local_kafka(cfg).start()
        emit(args, {"running": True, "bootstrap_servers": state.bootstrap_servers, "pid": state.pid},
             f"local Kafka running on {state.bootstrap_servers} (pid {state.pid})")  # fmt: skip
        return EXIT_OK
    broker = LocalKafka(cfg.paths.kafka_dir, classpath=[])
    if args.action == "stop":
        stopped = broker.stop()
        emit(args, {"stopped": stopped}, "local Kafka stopped" if stopped else "local Kafka was not running")
        return EXIT_OK
    state = broker.status()
    if state is None:
        emit(args, {"running": False}, "local Kafka is not running")
        return EXIT_INFRA
    emit(args, {"running": True, "bootstrap_servers": state.bootstrap_servers, "pid": state.pid},
         f"local Kafka running on {state.bootstrap_servers} (pid {state.pid})")  # fmt: skip
    return EXIT_OK


def command_module(name: str) -> Any:
    return importlib.import_module("app.commands." + name.replace("-", "_"))


# --- parser --------------------------------------------------------------------------------------


# The subcommands' copy of --set collects apart: a subparser's values replace the main parser's.
_OVERRIDES_AFTER_COMMAND = "overrides_after_command"


def common_options(after_command: bool) -> argparse.ArgumentParser:
    """The options every command takes, before its name (``offset-audit --json reconcile``) or after
    it (``offset-audit reconcile --json``).

    argparse parses a subcommand's options into a namespace of its own and copies every value in it
    over the main parser's, defaults included, so the subcommands' copies have no defaults
    (``SUPPRESS``): a value given before the subcommand then survives, and one given after wins.
    ``--set`` given on both sides adds up (``parse_arguments``).
    """

    def default(value: object) -> object:
        return argparse.SUPPRESS if after_command else value

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--env", default=default("local"), help="config layer conf/<env>.yaml (default: local)"
    )
    common.add_argument(
        "--conf-dir", type=Path, default=default(None), help="directory holding base.yaml and <env>.yaml"
    )
    common.add_argument(
        "--set",
        dest=_OVERRIDES_AFTER_COMMAND if after_command else "overrides",
        action="append",
        default=default([]),
        metavar="KEY=VALUE",
        help="override one config key, e.g. --set spark.shuffle_partitions=8",
    )
    common.add_argument(
        "--json", action="store_true", default=default(False), help="print a machine-readable summary"
    )
    common.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=default(None),
        help="DEBUG, INFO, WARNING or ERROR (default: the config's log_level)",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="offset-audit", description=__doc__, parents=[common_options(after_command=False)]
    )
    parser.add_argument("--version", action="version", version=f"offset-audit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = common_options(after_command=True)

    p = sub.add_parser("config", parents=[common], help="show the effective (redacted) configuration")
    p.add_argument("action", choices=["show"])
    p.set_defaults(handler=cmd_config_show)

    p = sub.add_parser("setup-jvm", parents=[common], help="resolve the JVM jars with Maven (cached)")
    p.set_defaults(handler=cmd_setup_jvm)

    p = sub.add_parser("kafka-local", parents=[common], help="the embedded single-node KRaft broker")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.set_defaults(handler=cmd_kafka_local)

    for name, what in COMMANDS.items():
        module = command_module(name)
        p = sub.add_parser(name, parents=[common], help=what)
        module.add_arguments(p)
        p.set_defaults(handler=module.run)
    return parser


def parse_arguments(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, with the ``--set`` values given before and after the command in order."""
    args = parser.parse_args(argv)
    args.overrides = [*args.overrides, *vars(args).pop(_OVERRIDES_AFTER_COMMAND, [])]
    return args


def log_level(args: argparse.Namespace, cfg: AppConfig) -> str:
    """``--log-level``, else the command's own default (the demo narrates, so its logs show only
    warnings), else the config's ``log_level``."""
    return str(args.log_level or getattr(args, "default_log_level", None) or cfg.log_level)


def configure_logging(level: str) -> None:
    """Our loggers at `level`; third-party ones at WARNING unless `level` is DEBUG (log_config)."""
    numeric = getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(
        level=numeric,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%Y-%m-%dT%H:%M:%S",
        stream=sys.stderr,
    )
    handlers = logging.getLogger().handlers
    quiet_third_party(numeric, handlers)
    for handler in handlers:
        handler.addFilter(_drop_py4j_reconnects)


def _drop_py4j_reconnects(record: logging.LogRecord) -> bool:
    # py4j logs each reconnect of a stale callback connection, with a traceback, on the root logger
    # at INFO; it retries by itself, so the trace is noise that reads like a failure.
    return not (record.name == "root" and str(record.msg).startswith("Exception while sending command"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parse_arguments(parser, argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors and 0 on --help
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    try:
        cfg = load_config(args.env, args.overrides, args.conf_dir)
        configure_logging(log_level(args, cfg))
        log.debug("config: %s", json.dumps(cfg.to_display(), sort_keys=True))
        handler: Handler = args.handler
        return handler(args, cfg)
    except (ConfigError, UsageError) as exc:
        print(f"offset-audit: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except InfrastructureError as exc:
        print(f"offset-audit: infrastructure error: {exc}", file=sys.stderr)
        return EXIT_INFRA
    except OffsetAuditError as exc:
        print(f"offset-audit: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("offset-audit: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of our output went away (`offset-audit incidents | head`): not a failure of the
        # audit, and nobody is left to tell. Later flushes of stdout must not raise again.
        _silence_stdout()
        return EXIT_READER_GONE
    except Exception as exc:  # broad on purpose: the top of the program turns failures into exit codes
        log.debug("unhandled exception", exc_info=True)
        kind = error_kind(exc)
        label = "infrastructure error" if kind == "infrastructure" else "internal error"
        hint = "" if kind == "infrastructure" else " (a bug: --log-level DEBUG shows the traceback)"
        print(f"offset-audit: {label}: {describe_error(exc)}{hint}", file=sys.stderr)
        return EXIT_INFRA


def _silence_stdout() -> None:
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def run_and_exit(argv: Sequence[str] | None = None) -> NoReturn:
    """The process entry point: ``main``, then the end of the process with exactly its code.

    The interpreter's own shutdown is skipped on purpose. Native thread pools still alive while it
    tears down (Arrow's I/O threads releasing buffers of delta-rs's file handler) abort the process
    at random after its work is done ("terminate called without an active exception", SIGABRT): a
    scheduler would read 134 where the code was 0 or 1. What that shutdown would do for us is done
    here first: under spark-submit the SparkContext is stopped (the cluster sees a finished
    application), logging is shut down and the output flushed. The local driver JVM dies with this
    process (``runtime.spark.start_driver_dying_with_us``).
    """
    try:
        code = main(argv)
    except SystemExit as exc:  # a handler that exits by itself still ends here, with its code
        if isinstance(exc.code, int) or exc.code is None:
            code = exc.code or EXIT_OK
        else:
            print(f"offset-audit: {exc.code}", file=sys.stderr)
            code = EXIT_USAGE
    except KeyboardInterrupt:  # outside main's handlers (while parsing)
        code = EXIT_INTERRUPTED
    if "pyspark" in sys.modules:  # a session may run only where pyspark was imported
        from app.runtime.spark import stop_under_spark_submit

        stop_under_spark_submit()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        # A reader gone (closed pipe) or a closed stream: there is nobody left to tell.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    run_and_exit()
