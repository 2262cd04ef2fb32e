"""Integration tests: real PostgreSQL, a fresh schema per test."""
