"""The audit context and each step of the audit written once, for `nightly`, `watch` and the single
commands alike."""
