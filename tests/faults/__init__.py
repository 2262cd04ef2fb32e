"""Fault scenarios: real worker processes, real kills (run with -m faults)."""
