"""Flink jobs audited from outside: their checkpoints and savepoints decoded without a JVM."""
