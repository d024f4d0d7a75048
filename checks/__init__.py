"""Great Expectations suites over the audit tables (ledger, group_commits, findings,
partition_summary). ``checks.suites`` defines them as data; ``app.quality.runner`` runs them."""
