"""The driver-side audit of the ledger and the group's commits: one DuckDB session over both, its
views and the rules per finding type, the commit rules among them (they ask the same views)."""
