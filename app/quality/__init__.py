"""Great Expectations checks over the audit tables."""
