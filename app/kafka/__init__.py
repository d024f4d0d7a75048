"""Kafka clients: retried Admin/consumer calls, the group commit, gap confirmation."""
