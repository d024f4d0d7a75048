"""Completeness per event-time window: what the source holds of each window and what reached the
sink, written by every reconcile to the `completeness` table."""
