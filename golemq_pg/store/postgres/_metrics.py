"""The metrics verb of both PostgreSQL stores (statement in ``sql/queries/metrics.sql``), a
plan (see ``_plans``).

Read by :class:`golemq_pg.metrics.QueueCollector` at every scrape, so it must stay bounded on
a jobs table of millions of rows: the statement reads the partial indexes by descents and
capped ranges (see its header), never the table.
"""

from __future__ import annotations

from golemq_pg.store.port import LOST_AFTER_BEATS, TypeGauges
from golemq_pg.store.postgres._connections import StoreConnections, sync_verb
from golemq_pg.store.postgres._plans import Plan, PlanContext, Rows


def metrics_type_gauges(ctx: PlanContext, cap: int) -> Plan[list[TypeGauges]]:
    """Per type, by name: capped counts, oldest due age, paused (one statement)."""
    found = yield Rows(
        ctx.queries["metrics_type_gauges"],
        {"cap": int(cap), "lost_after": float(LOST_AFTER_BEATS)},
    )
    return [
        TypeGauges(
            type=str(name), pending=int(pending), scheduled=int(scheduled),
            running=int(running), failed=int(failed),
            oldest_due_age=None if age is None else max(float(age), 0.0),
            paused=bool(paused), waiting=int(waiting),
        )
        for name, pending, scheduled, running, failed, age, paused, waiting in found
    ]


class MetricsVerbs(StoreConnections):
    """``metrics_type_gauges`` on ``PostgresStore``'s connections."""

    metrics_type_gauges = sync_verb(metrics_type_gauges)


__all__ = ["MetricsVerbs", "metrics_type_gauges"]
