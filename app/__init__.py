"""offset-audit: audit Kafka-reading streaming jobs against their checkpoints, Kafka and their sink."""

import logging

__version__ = "0.1.0"

# A library leaves handlers and levels to the application: the package's loggers ("app.*") end in a
# handler that drops, so with no logging configured Python's last-resort handler does not print
# their warnings into the job's stderr. An application's own configuration still receives them
# (records propagate to its handlers); the CLI configures its own console (app.cli).
logging.getLogger(__name__).addHandler(logging.NullHandler())
