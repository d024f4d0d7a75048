"""What a command's stderr must not carry."""

from __future__ import annotations

import re

# librdkafka's own log lines ("%3|1700000000.123|FAIL|..."), printed when its logger is not the app's.
RAW_LIBRDKAFKA = re.compile(r"^%\d\|", re.MULTILINE)
