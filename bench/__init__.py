"""Benchmarks (not tests): `.venv/bin/python -m bench.<name> --help`."""
