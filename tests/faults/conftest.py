"""Fixtures of the fault-injection suite (see _support.py)."""

from _support import fault_env

__all__ = ["fault_env"]
