"""Keeping every table the project writes small: compaction, log checkpoints, VACUUM, retention."""
