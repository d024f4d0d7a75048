"""Reconciliation: ledger and commit rules, sink examination, findings, forensics."""
