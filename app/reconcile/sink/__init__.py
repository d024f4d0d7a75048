"""The sink's account, judged by its sink mode: what a `coordinates` sink holds (its offsets,
examined per bucket), a `delta_batches` sink's commits and an `iceberg_snapshots` sink's snapshots
against the completed batches."""
