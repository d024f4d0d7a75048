"""Restart forensics: where each run resumed against where the previous one got, the sink in those
ranges, the restarts table and the incident timeline around a moment."""
