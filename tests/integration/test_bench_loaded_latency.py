"""The benchmark harness's loaded-latency scenario (``python -m benchmarks --only loaded``)
runs against a real PostgreSQL: it measures a drain rate, offers half of it with a paced
producer while the consumers run, and reports every job's pickup latency.

Small sizes (a smoke test of the scenario, as ``--quick`` runs it); no timing is asserted.
"""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.scenarios import LOAD_FRACTION, QUICK, scenario_named
from benchmarks.systems.base import LoadPlan
from tests.support.bench_peers import installed_system

SIZES = dataclasses.replace(QUICK, loaded_drain=500, steady_seconds=0.5)


@pytest.mark.parametrize("system_name", ["golemq-pg", "raw-sql", "pgqueuer"])
def test_loaded_scenario_reports_pickup_latency_of_every_job_at_half_the_drain_rate(
    pg_dsn: str, system_name: str,
) -> None:
    system = installed_system(system_name)
    scenario = scenario_named("loaded")
    (variant,) = system.variants("loaded", quick=True)
    figures = scenario.run(system, variant, pg_dsn, SIZES)

    assert figures["drain_per_s"] > 0
    assert figures["target_rate"] == pytest.approx(LOAD_FRACTION * figures["drain_per_s"])
    # The producer sent exactly its plan's jobs, and every one reached its handler.
    plan = LoadPlan(figures["target_rate"], SIZES.steady_seconds, SIZES.loaded_tick)
    assert figures["jobs"] == plan.total > 0
    assert figures["missed"] == 0
    assert 0 < figures["p50_ms"] <= figures["p95_ms"] <= figures["p99_ms"] <= figures["max_ms"]
    assert figures["processed_per_s"] > 0
    assert figures["offered_per_s"] > 0
