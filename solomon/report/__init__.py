"""The run report: a new directory per run under reports/training/, read from files, never from live objects."""
