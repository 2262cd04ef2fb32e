"""Chains 10,000 jobs deep settle in one statement whatever finishes their root (a cancel, a
terminal failure, the reaper's dead letter) with max_stack_depth at its default, and a
reaper pass sets aside a row it cannot settle instead of failing (migration 0020)."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
import structlog
from psycopg import sql

from golemq_pg import PostgresStore, Queue
from golemq_pg.store.port import ClaimRequest, FailItem, TypeSlots
from tests.support.workflow_graphs import AddedChain, add_chain

DEPTH = 10_000


def _statuses(conn: psycopg.Connection[Any], chain: AddedChain) -> dict[str, int]:
    rows = conn.execute(
        "SELECT status, count(*) FROM jobs_all WHERE id = ANY(%s) GROUP BY status",
        ([int(i) for i in chain.ids],)).fetchall()
    return dict(rows)


@pytest.fixture
def conn(pg_dsn: str, pg_store: PostgresStore) -> Any:
    """A connection whose search_path is the test's schema (the store's)."""
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(pg_store.schema)))
        assert c.execute("SHOW max_stack_depth").fetchone() == ("2MB",)
        yield c


def test_cancelling_the_root_of_a_10000_deep_chain_dead_letters_every_dependent(
    pg_store: PostgresStore, conn: psycopg.Connection[Any],
) -> None:
    queue = Queue(pg_store)
    chain = add_chain(queue, DEPTH)
    started = time.monotonic()
    assert queue.cancel(chain.root)
    took = time.monotonic() - started
    assert _statuses(conn, chain) == {"failed": DEPTH - 1}
    assert took < 10, took
    errors = dict(conn.execute(
        "SELECT id, last_error FROM jobs_all WHERE id = ANY(%s)",
        ([int(chain.ids[1]), int(chain.tail)],)).fetchall())
    assert errors[int(chain.ids[1])] == f"parent {chain.root} was cancelled"
    assert errors[int(chain.tail)] == f"parent {chain.ids[-2]} failed"


def test_cancel_policies_down_a_10000_deep_chain_delete_it(
    pg_store: PostgresStore, conn: psycopg.Connection[Any],
) -> None:
    queue = Queue(pg_store)
    chain = add_chain(queue, DEPTH, policy="cancel")
    assert queue.cancel(chain.root)
    assert _statuses(conn, chain) == {}
    assert conn.execute("SELECT count(*) FROM job_nodes WHERE failed_parent IS NOT NULL"
                        ).fetchone() == (DEPTH - 1,)


def test_cancel_workflow_of_a_10000_deep_chain_with_its_root_running(
    pg_store: PostgresStore, conn: psycopg.Connection[Any],
) -> None:
    queue = Queue(pg_store)
    chain = add_chain(queue, DEPTH)
    assert pg_store.job_claim(ClaimRequest(
        owner="w-deep", types=[TypeSlots("chain.root", limit=1, lease_seconds=30)]))
    assert queue.cancel_workflow(chain.run.id) == DEPTH
    assert _statuses(conn, chain) == {}
    summary = queue.workflow(chain.run.id)
    assert summary is not None
    assert summary.status == "cancelled"


def test_a_root_failing_terminally_dead_letters_a_10000_deep_chain(
    pg_store: PostgresStore, conn: psycopg.Connection[Any],
) -> None:
    queue = Queue(pg_store)
    chain = add_chain(queue, DEPTH)
    [root] = pg_store.job_claim(ClaimRequest(
        owner="w-deep", types=[TypeSlots("chain.root", limit=1, lease_seconds=30)]))
    started = time.monotonic()
    written = pg_store.job_fail_many("w-deep", [FailItem(root.id, root.token, "boom")])
    took = time.monotonic() - started
    assert written == {chain.root}
    assert _statuses(conn, chain) == {"failed": DEPTH}
    assert took < 10, took
    assert queue.retry(chain.root)  # the whole chain is re-armed, iteratively too
    assert _statuses(conn, chain) == {"pending": 1, "waiting": DEPTH - 1}


def test_the_reaper_dead_letters_a_10000_deep_chain_and_reclaims_another_expired_job(
    pg_store: PostgresStore, conn: psycopg.Connection[Any],
) -> None:
    queue = Queue(pg_store)
    chain = add_chain(queue, DEPTH, root_options={"max_attempts": 1})
    other = queue.add("other", {}, max_attempts=3)
    assert other is not None
    for job_type, owner in (("chain.root", "w-dead-1"), ("other", "w-dead-2")):
        assert pg_store.job_claim(ClaimRequest(
            owner=owner, types=[TypeSlots(job_type, limit=1, lease_seconds=0.05)]))
    time.sleep(0.1)
    started = time.monotonic()
    recovered = {r.id: r.outcome for r in pg_store.lease_recover_expired()}
    took = time.monotonic() - started
    assert recovered == {chain.root: "failed-terminal", other: "reclaimed"}
    assert took < 10, took
    assert _statuses(conn, chain) == {"failed": DEPTH}
    assert conn.execute("SELECT status FROM jobs WHERE id = %s", (int(other),)
                        ).fetchone() == ("pending",)


def test_a_reaper_pass_sets_aside_a_row_it_cannot_settle_and_reclaims_the_rest(
    pg_store: PostgresStore, conn: psycopg.Connection[Any],
) -> None:
    queue = Queue(pg_store)
    ids = [queue.add("stuck", {"n": n}, max_attempts=3) for n in range(5)]
    assert all(ids)
    poisoned = int(ids[2])  # type: ignore[arg-type]
    # A trigger of the test's own schema refuses to let one row leave RUNNING: the reaper
    # can neither revive nor dead-letter it.
    conn.execute(
        "CREATE FUNCTION refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN IF OLD.id = " + str(poisoned) + " AND OLD.status = 'running' "  # our own int
        "AND (TG_OP = 'DELETE' OR NEW.status <> 'running') THEN "
        "RAISE EXCEPTION 'refused' USING ERRCODE = 'check_violation'; END IF; "
        "RETURN NEW; END $$")
    conn.execute("CREATE TRIGGER refuse_one BEFORE UPDATE OR DELETE ON jobs "
                 "FOR EACH ROW EXECUTE FUNCTION refuse_one()")
    assert len(pg_store.job_claim(ClaimRequest(
        owner="w-gone", types=[TypeSlots("stuck", limit=5, lease_seconds=0.05)]))) == 5
    time.sleep(0.1)
    with structlog.testing.capture_logs() as logs:
        recovered = pg_store.lease_recover_expired()
    warned = f"golemq-pg reaper: job {poisoned} set aside, not settled (SQLSTATE 23514)"
    assert [e["message"] for e in logs if e["event"] == "server_warning"] == [warned]
    assert sorted(int(r.id) for r in recovered) == sorted(
        int(i) for i in ids if int(i) != poisoned)  # type: ignore[arg-type]
    assert {r.outcome for r in recovered} == {"reclaimed"}
    assert conn.execute("SELECT status FROM jobs WHERE id = %s", (poisoned,)
                        ).fetchone() == ("running",)
    # What a later pass says about the row still set aside, to any client: its id and the
    # error's class, no text.
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
    assert conn.execute(
        "SELECT count(*) FROM reclaim_leases(10, NULL, NULL, ARRAY[]::text[], 'e', 'x', 5)"
    ).fetchone() == (0,)
    assert notices == [warned]
