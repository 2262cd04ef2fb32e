"""Unit tests: pure logic, fake clock, no database."""
