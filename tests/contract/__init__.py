"""Contract tests: the JobStore port, run against both stores."""
