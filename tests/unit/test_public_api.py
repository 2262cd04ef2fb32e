"""The public import surface: every name the public API contract (shared with the team,
outside this repository) documents in its sections that exist today imports from where the
contract says. A move inside the package must leave these lines working; each later feature
adds its names here."""

from __future__ import annotations

import importlib

import pytest

#: Module -> the names the contract documents there.
SURFACE: dict[str, tuple[str, ...]] = {
    "golemq_pg": (
        # Imports
        "PostgresStore", "InMemoryStore", "JobStore", "Queue", "Worker", "JobType",
        "JobEvent", "BatchEvent", "CancelSignal", "TerminalJobError", "RetryableJobError",
        "QueuePayloadError", "QueueConfigError", "JobStatus", "JobSummary",
        "ScheduleSummary", "Scope", "Resource", "Retention", "RetryContext",
        "LifecycleObserver", "Transition",
        # Async producer; results and history; the registry; deployment options
        "AsyncPostgresStore", "AsyncQueue", "AttemptError", "WorkerSummary", "PausedType",
        "PreparedStatementsUnsupported", "JobAborted",
        # System errors to observers (on_error)
        "WorkerError",
        # Middleware around each attempt (Worker(middleware=...))
        "Middleware",
    ),
    "golemq_pg.web": ("create_app",),
    "golemq_pg.metrics": ("PrometheusObserver", "QueueCollector"),
    "golemq_pg.tracing": ("instrument", "uninstrument"),
    "golemq_pg.testing": ("assert_enqueued", "InMemoryStore", "FakeClock"),
    "golemq_pg.pytest_plugin": ("golemq_store", "golemq_memory_store", "golemq_queue"),
    "golemq_pg.queue": ("Queue", "AsyncQueue"),
}


@pytest.mark.parametrize("module", list(SURFACE))
def test_every_documented_name_imports_from_its_module(module: str) -> None:
    imported = importlib.import_module(module)
    missing = [name for name in SURFACE[module] if not hasattr(imported, name)]
    assert missing == [], f"{module} lacks {missing}"


def test_the_top_level_exports_every_documented_name() -> None:
    import golemq_pg  # noqa: PLC0415 - the module under test

    assert set(SURFACE["golemq_pg"]) <= set(golemq_pg.__all__)
