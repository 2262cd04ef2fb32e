"""The golemq-pg test suite (see tests/README.md for where a new test goes)."""
