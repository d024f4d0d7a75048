"""Who speaks on the console: our loggers at --log-level, third-party ones from WARNING unless DEBUG,
and the local driver JVM's log4j2 levels following the same choice."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli import configure_logging
from app.config import SparkConfig
from app.kafka.clients import LIBRDKAFKA_LOGGER
from app.runtime.log_config import ALWAYS_QUIET, LOG4J2_CONFIG, THIRD_PARTY_LOGGERS
from app.runtime.spark import local_conf

pytestmark = pytest.mark.unit

# Great Expectations sets this one to INFO itself when imported, below any level we give its parent.
SELF_LEVELLED = "great_expectations.data_context.types.base"
UNKNOWN_LIBRARY = "somelibrary.module"


@contextlib.contextmanager
def fresh_root_logger() -> Iterator[None]:
    """The root and third-party loggers as a fresh process has them, for configure_logging, and
    everything put back after (another test may have run the CLI in this process).

    Used inside the test body: pytest gives the root logger a capturing handler per test phase."""
    root = logging.getLogger()
    names = (*THIRD_PARTY_LOGGERS, *ALWAYS_QUIET, SELF_LEVELLED, UNKNOWN_LIBRARY)
    saved = (root.handlers[:], root.level, {n: logging.getLogger(n).level for n in names})
    root.handlers = []
    for name in names:
        logging.getLogger(name).setLevel(logging.NOTSET)
    try:
        yield
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers, level, levels = saved
        root.setLevel(level)
        for name, value in levels.items():
            logging.getLogger(name).setLevel(value)


def log_one_of_each() -> None:
    logging.getLogger(SELF_LEVELLED).setLevel(logging.INFO)
    logging.getLogger("app.stream.job").info("ours at info")
    logging.getLogger("offset-audit").info("the cli at info")
    logging.getLogger("great_expectations._docs_decorators").info("ge at info")
    logging.getLogger(SELF_LEVELLED).info("self-levelled at info")
    logging.getLogger(UNKNOWN_LIBRARY).info("unknown at info")
    logging.getLogger("urllib3.connectionpool").debug("urllib3 at debug")
    logging.getLogger("py4j.clientserver").debug("py4j at debug")
    logging.getLogger(SELF_LEVELLED).warning("self-levelled at warning")
    logging.getLogger(UNKNOWN_LIBRARY).warning("unknown at warning")


def test_third_party_loggers_speak_from_warning_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    with fresh_root_logger():
        configure_logging("INFO")

        for name in THIRD_PARTY_LOGGERS:
            assert logging.getLogger(name).getEffectiveLevel() == logging.WARNING, name
        log_one_of_each()
    err = capsys.readouterr().err
    assert "ours at info" in err
    assert "the cli at info" in err
    assert "self-levelled at warning" in err
    assert "unknown at warning" in err
    for quiet in ("ge at info", "self-levelled at info", "unknown at info", "at debug"):
        assert quiet not in err


def test_debug_leaves_third_party_loggers_at_their_own_levels(capsys: pytest.CaptureFixture[str]) -> None:
    with fresh_root_logger():
        configure_logging("DEBUG")

        for name in THIRD_PARTY_LOGGERS:
            assert logging.getLogger(name).level == logging.NOTSET, name
        # Except py4j, whose DEBUG lines carry every value sent to the JVM, secrets included.
        assert logging.getLogger("py4j").level == logging.WARNING
        log_one_of_each()
    err = capsys.readouterr().err
    for shown in (
        "ours at info",
        "ge at info",
        "self-levelled at info",
        "unknown at info",
        "urllib3 at debug",
    ):
        assert shown in err
    assert "py4j at debug" not in err


def test_a_higher_level_holds_for_third_party_loggers_too(capsys: pytest.CaptureFixture[str]) -> None:
    with fresh_root_logger():
        configure_logging("ERROR")
        log_one_of_each()
    assert capsys.readouterr().err == ""


def java_options(level: int) -> list[str]:
    conf = local_conf(SparkConfig(), [], "/wh", log_level=level)
    return conf["spark.driver.extraJavaOptions"].split()


def test_local_driver_jvm_gets_the_shipped_log4j2_config_at_warn_by_default() -> None:
    options = java_options(logging.INFO)

    assert "-Duser.timezone=UTC" in options
    assert f"-Dlog4j2.configurationFile={LOG4J2_CONFIG.resolve().as_uri()}" in options
    assert "-Doffset_audit.log.root=WARN" in options
    assert "-Doffset_audit.log.noisy=ERROR" in options
    assert "-Doffset_audit.log.drop=DENY" in options


def test_local_driver_jvm_logs_at_info_at_debug() -> None:
    options = java_options(logging.DEBUG)

    assert "-Doffset_audit.log.root=INFO" in options
    assert "-Doffset_audit.log.noisy=INFO" in options
    assert "-Doffset_audit.log.drop=NEUTRAL" in options


def test_a_users_driver_java_options_win() -> None:
    conf = local_conf(SparkConfig(conf={"spark.driver.extraJavaOptions": "-Dmine=1"}), [], "/wh")
    assert conf["spark.driver.extraJavaOptions"] == "-Dmine=1"


def test_driver_java_options_come_after_the_applications_own_and_keep_them() -> None:
    conf = local_conf(SparkConfig(driver_java_options="-XX:+UseSerialGC -Duser.timezone=UTC"), [], "/wh")
    options = conf["spark.driver.extraJavaOptions"].split()
    assert options[0] == "-Duser.timezone=UTC"
    assert f"-Dlog4j2.configurationFile={LOG4J2_CONFIG.resolve().as_uri()}" in options
    assert options[-2:] == ["-XX:+UseSerialGC", "-Duser.timezone=UTC"]
    assert java_options(logging.INFO) == options[:-2]  # none given: the application's alone


def test_shipped_log4j2_config_sets_every_level_from_the_system_properties() -> None:
    props = dict(
        (key.strip(), value.strip())
        for key, _, value in (line.partition("=") for line in Path(LOG4J2_CONFIG).read_text().splitlines())
        if key.strip() and not key.startswith("#")
    )
    assert props["rootLogger.level"] == "${sys:offset_audit.log.root:-WARN}"
    loggers = {props[k]: props.get(k.replace(".name", ".level")) for k in props if k.endswith(".name")}
    assert loggers["org.apache.kafka"] == "${sys:offset_audit.log.noisy:-ERROR}"
    assert loggers["org.apache.hadoop.util.NativeCodeLoader"] == "${sys:offset_audit.log.noisy:-ERROR}"


# An application that imported the library and configured no logging, then configured it: what the
# library's loggers leave on its stdout and stderr before and after (a marker line between them).
_LIBRARY_LOGS = """
import logging, sys
from app import audit  # what a user's job imports
from app.kafka.clients import librdkafka_logger
def speak(what):  # another line each time: the librdkafka logger drops repeats
    logging.getLogger("app.attach").warning("a warning of the library")
    librdkafka_logger().error(f"FAIL [rdkafka#consumer-1] Connect to 127.0.0.1:1 {what}")
speak("refused")
for stream in (sys.stdout, sys.stderr):
    print("-- configured --", file=stream, flush=True)
logging.basicConfig(level=logging.INFO, format="%(name)s|%(message)s")
speak("failed")
"""


def test_the_library_prints_nothing_unless_the_application_configures_logging() -> None:
    """As a library should: a NullHandler on its loggers (`app`, librdkafka's), so Python's
    last-resort handler prints nothing into a job that configured no logging; a job that did gets
    the records under the loggers' names. The CLI's own console is configure_logging's (above).
    A fresh process, as only there is nothing configured yet (pytest's own handlers sit on the root)."""
    done = subprocess.run(
        [sys.executable, "-c", _LIBRARY_LOGS],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],  # the repository's root: `app` imports from there
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "-- configured --\n"
    unconfigured, configured = done.stderr.split("-- configured --\n")
    assert unconfigured == ""
    assert configured.splitlines() == [
        "app.attach|a warning of the library",
        f"{LIBRDKAFKA_LOGGER}|FAIL [rdkafka#consumer-1] Connect to 127.0.0.1:1 failed",
    ]
