"""Who may speak on the console: our loggers at the chosen level, everybody else's from WARNING.

A command's output is its own progress and results. Libraries log at INFO for their own developers
(Great Expectations alone logged 209 lines in one demo), and the local Spark driver's JVM warns about
things a user cannot act on (native Hadoop libraries, a hostname, a broker outage the job rides out).
So below DEBUG, third-party Python loggers and the local driver JVM speak only at WARNING and above
(the JVM's known noise only at ERROR); at DEBUG everything keeps its normal level, so nothing is out
of reach. Under spark-submit the cluster's own log4j configuration is left alone (app.runtime.spark
uses these options only for a local driver).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from app.runtime.jvm import JVM_CONF_DIR

# Our loggers: the package's modules (logging.getLogger(__name__)) and the CLI's.
OWN_LOGGERS = ("app", "offset-audit")
# Libraries we load that log below WARNING. Setting their level saves building records nobody sees;
# ThirdPartyFilter is what holds for every other logger and for one that sets its own level (Great
# Expectations sets one of its loggers to INFO when imported).
THIRD_PARTY_LOGGERS = (
    "great_expectations",
    "pyspark",
    "urllib3",
    "requests",
    "botocore",
    "boto3",
    "s3transfer",
    "asyncio",
    "numexpr",
    "tzlocal",
    "altair",
    "deltalake",
)
# At WARNING even at DEBUG: py4j's DEBUG lines trace every value sent to the JVM, storage
# credentials included, and secrets never go to a log.
ALWAYS_QUIET = ("py4j",)

# The local driver JVM's log4j2 configuration; its levels are system properties set from ours.
LOG4J2_CONFIG = JVM_CONF_DIR / "spark" / "log4j2.properties"


def is_own(logger_name: str) -> bool:
    return any(logger_name == own or logger_name.startswith(own + ".") for own in OWN_LOGGERS)


class ThirdPartyFilter(logging.Filter):
    """A handler filter letting through every record of ours, and others' from `threshold` up."""

    def __init__(self, threshold: int) -> None:
        super().__init__()
        self.threshold = threshold

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.threshold or is_own(record.name)


def quiet_third_party(level: int, handlers: Sequence[logging.Handler]) -> None:
    """Third-party loggers at WARNING (or `level` when higher) on `handlers`; at DEBUG left alone,
    but for ALWAYS_QUIET."""
    threshold = max(logging.WARNING, level)
    for name in ALWAYS_QUIET:
        logging.getLogger(name).setLevel(threshold)
    for handler in handlers:
        for old in [f for f in handler.filters if isinstance(f, ThirdPartyFilter)]:
            handler.removeFilter(old)
    if level <= logging.DEBUG:
        return
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(threshold)
    for handler in handlers:
        handler.addFilter(ThirdPartyFilter(threshold))


def jvm_log_levels(python_level: int) -> tuple[str, str]:
    """(root level, level of the known-noisy loggers) of the local driver JVM for Python's level."""
    if python_level <= logging.DEBUG:
        return "INFO", "INFO"  # Spark's own default; its DEBUG would bury everything else
    if python_level >= logging.ERROR:
        return "ERROR", "ERROR"
    return "WARN", "ERROR"


def driver_log_options(python_level: int) -> list[str]:
    """The local driver JVM's options that select LOG4J2_CONFIG and its levels ([] without it)."""
    if not LOG4J2_CONFIG.is_file():
        return []
    root, noisy = jvm_log_levels(python_level)
    return [
        # A URI: the launcher splits these options at spaces, and a URI has none.
        f"-Dlog4j2.configurationFile={LOG4J2_CONFIG.resolve().as_uri()}",
        f"-Doffset_audit.log.root={root}",
        f"-Doffset_audit.log.noisy={noisy}",
        # Messages the configuration drops by their text: kept at DEBUG.
        f"-Doffset_audit.log.drop={'NEUTRAL' if python_level <= logging.DEBUG else 'DENY'}",
    ]
