"""Table contracts, the ledger vocabulary and offset semantics (CONTRACTS.md sections 3-4)."""
