"""Great Expectations suites over the audit tables (filled by the nightly-checks issue)."""
