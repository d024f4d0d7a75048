"""The HTML dashboard: reading the audit tables and rendering them."""
