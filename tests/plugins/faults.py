"""Fixtures of the fault-injection suite: ``fault_env`` (see tests/support/fault_env.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fault_env import FaultEnv, make_env


@pytest.fixture
def fault_env(pg_dsn: str, schema: str, tmp_path: Path) -> Iterator[FaultEnv]:
    """A :class:`FaultEnv` (workers killed, backends ended and roles dropped afterwards)."""
    env = make_env(pg_dsn, schema, tmp_path)
    try:
        yield env
    finally:
        env.close()
