"""offset-audit: audit Kafka-reading streaming jobs against their checkpoints, Kafka and their sink."""

__version__ = "0.1.0"
