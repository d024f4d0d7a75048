"""The embedded default for trying the tool: a local broker and the demo story."""
