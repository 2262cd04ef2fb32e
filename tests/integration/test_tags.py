"""Tags through the Queue (add, add_many, find(tags=)) on both stores, bad tags changing
nothing, and on PostgreSQL: the GIN index serving find(tags=) on 100k rows."""

from __future__ import annotations

from typing import Any

import pytest
from psycopg import sql

from golemq_pg import PostgresStore, Queue
from golemq_pg.store.postgres._sql import queries_for
from tests.support.store_port import count_rows


def test_add_and_add_many_tags_round_trip_and_find_by_containment(store: Any) -> None:
    queue = Queue(store)
    both = queue.add("invoice", {"n": 1}, tags=("billing", "eu"))
    dup = queue.add("invoice", {"n": 2}, tags=["billing", "billing"])
    assert queue.add_many("invoice", [{"n": i} for i in range(3)], tags=("eu", "bulk")) == 3
    queue.add("invoice", {"n": 9})
    assert both is not None
    assert dup is not None
    job = queue.get(both)
    assert job is not None
    assert job.tags == ("billing", "eu")
    dup_job = queue.get(dup)
    assert dup_job is not None
    assert dup_job.tags == ("billing",)
    assert [j.id for j in queue.find(tags=["billing"])] == [dup, both]
    assert [j.id for j in queue.find(tags=("billing", "eu"))] == [both]
    assert len(queue.find(tags=["eu"])) == 4
    assert len(queue.find(tags=["bulk", "eu"], limit=2)) == 2
    assert len(queue.find(tags=[])) == 6  # no tags: no tag filter
    assert queue.find(tags=["missing"]) == []


@pytest.mark.parametrize(("tags", "match"), [
    ("billing", "not a single value"),
    (["a b"], "1-64 characters"),
    ([""], "1-64 characters"),
    (["x" * 65], "1-64 characters"),
    ([f"t{i}" for i in range(17)], "at most 16"),
    ([3], "must be a string"),
])
def test_bad_tags_raise_value_error_and_write_nothing(store: Any, tags: Any, match: str) -> None:
    queue = Queue(store)
    with pytest.raises(ValueError, match=match):
        queue.add("t", {"a": 1}, tags=tags)
    with pytest.raises(ValueError, match=match):
        queue.add_many("t", [{"a": 1}], tags=tags)
    with pytest.raises(ValueError, match=match):
        queue.find(tags=tags)
    assert count_rows(store) == 0


def test_statuses_are_case_insensitive_in_find_and_prune(store: Any) -> None:
    queue = Queue(store)
    queue.add("t", {})
    for spelling in ("PENDING", "pending", "Pending"):
        assert len(queue.find(statuses=[spelling])) == 1
    assert len(queue.find(statuses="PENDING")) == 1
    assert queue.find(statuses=["FAILED", "Succeeded"]) == []
    with pytest.raises(ValueError, match="pending, running, succeeded, failed"):
        queue.find(statuses=["done"])
    assert queue.prune(older_than=0, statuses=["SUCCEEDED", "Failed"]) == 0
    with pytest.raises(ValueError, match="unknown job status"):
        queue.prune(older_than=0, statuses=["gone"])


def test_find_by_tag_uses_the_gin_index_on_100k_rows(pg_store: PostgresStore) -> None:
    queue = Queue(pg_store)
    queue.add_many("bulk", [{"i": i} for i in range(100_000)])
    queue.add_many("bulk", [{"i": i} for i in range(50)], tags=("rare", "eu"))
    raw = queries_for(pg_store.schema).raw("job_find_tagged")
    args = raw.args({"tags": ["rare"], "types": None, "statuses": None,
                     "running_started": None, "scope_type": None,
                     "scope_id": None, "limit": 100, "skip": 0})
    explain = sql.SQL("EXPLAIN EXECUTE tagged({})").format(
        sql.SQL(", ").join(sql.Literal(value) for value in args))
    with pg_store.pool.connection() as conn, conn.transaction():
        conn.execute(sql.SQL("ANALYZE {}.jobs").format(sql.Identifier(pg_store.schema)))
        conn.execute(b"PREPARE tagged AS " + raw.text)
        plan = "\n".join(row[0] for row in conn.execute(explain).fetchall())
        # The generic plan too: what a prepared statement may switch to after five runs.
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        generic = "\n".join(row[0] for row in conn.execute(explain).fetchall())
        conn.execute("DEALLOCATE tagged")
    assert "jobs_tags_idx" in plan, plan
    assert "jobs_tags_idx" in generic, generic
    assert len(queue.find(tags=["rare", "eu"])) == 50
