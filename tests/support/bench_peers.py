"""The harness's systems as the bench tests use them: a peer that is not installed here
(the ``bench`` extra: PGQueuer, Procrastinate, Chancy) skips its test with the reason the
harness itself gives, instead of failing it. ``pip install -e '.[dev]'`` alone runs the
suite; ``pip install -e '.[dev,bench]'`` adds the peers' tests."""

from __future__ import annotations

import pytest

from benchmarks.systems import System, UnavailableError, system_named


def installed_system(name: str) -> System:
    """The harness's system ``name``, or skip the calling test with why it cannot run."""
    system = system_named(name)
    try:
        system.check_available()
    except UnavailableError as exc:
        pytest.skip(str(exc))
    return system
