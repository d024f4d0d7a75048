"""The reference streaming job: Flink-style committer, ledger writer, Spark job."""
