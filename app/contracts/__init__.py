"""Table contracts, the ledger vocabulary and offset semantics (DESIGN sections 3-4)."""
