"""Jobs: running work outside the coordinator process (code generation workers)."""
