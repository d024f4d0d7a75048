"""The sink's account, judged by its sink mode: what a `coordinates` sink holds (its offsets,
examined per bucket) and a `delta_batches` sink's commits against the completed batches."""
