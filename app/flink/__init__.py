"""Flink jobs audited from outside: their checkpoints and savepoints decoded without a JVM
(`metadata`), their JobManager's REST API (`rest`), the ledger events of both (`events`), the sidecar
that follows a running job (`watcher`) and the import of retained checkpoints and savepoints
(`import_`)."""
