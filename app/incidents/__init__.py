"""Incidents: findings grouped by the event that caused them, and their remedies."""
