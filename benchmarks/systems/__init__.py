"""The measured systems: the raw-SQL ceiling, PGQueuer, Procrastinate, Chancy and golemq-pg."""

from __future__ import annotations

from benchmarks.systems.base import System, UnavailableError, UnsupportedError, Variant
from benchmarks.systems.chancy_sys import ChancySystem
from benchmarks.systems.golemq_sys import GolemqSystem
from benchmarks.systems.pgqueuer_sys import PgQueuerSystem
from benchmarks.systems.procrastinate_sys import ProcrastinateSystem
from benchmarks.systems.raw_sql import RawSql


def all_systems() -> list[System]:
    """Every system, in the order the report lists them."""
    return [RawSql(), PgQueuerSystem(), ProcrastinateSystem(), ChancySystem(),
            GolemqSystem()]


def system_named(name: str) -> System:
    """The system called ``name`` (as in ``--only``)."""
    for system in all_systems():
        if system.name == name:
            return system
    raise KeyError(name)


__all__ = ["System", "UnavailableError", "UnsupportedError", "Variant", "all_systems",
           "system_named"]
