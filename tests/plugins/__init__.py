"""Fixture plugins, loaded by ``pytest_plugins`` in tests/conftest.py (see tests/README.md)."""
