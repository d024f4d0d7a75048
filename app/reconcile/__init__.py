"""Reconciliation of the three accounts: the ledger and the group's commits (`ledger`), the sink
(`sink`), their findings, completeness per window and restart forensics; `run` on top."""
