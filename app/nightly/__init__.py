"""The scheduled run of every step, one run id, resumable."""
