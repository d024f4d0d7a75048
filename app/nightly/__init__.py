"""The scheduled run of every stage, and its alerts."""
