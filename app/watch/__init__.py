"""`offset-audit watch`: the audit every few seconds in one long-lived process."""
