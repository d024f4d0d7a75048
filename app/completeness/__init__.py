"""Completeness per job, topic, partition and event-time window (README "Completeness")."""
