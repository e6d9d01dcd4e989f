"""The run report: a new directory per run under report.root, read from files, never from live objects."""
