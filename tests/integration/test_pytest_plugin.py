"""``golemq_pg.pytest_plugin`` and ``golemq_pg.testing.assert_enqueued`` as an application
uses them: a user's test file run by ``pytester``, on the suite's PostgreSQL server."""

from __future__ import annotations

import psycopg
import pytest

from golemq_pg import InMemoryStore, JobStatus, Queue, Scope
from golemq_pg.testing import assert_enqueued

USER_TESTS = """
from pathlib import Path

from golemq_pg import Worker
from golemq_pg.testing import assert_enqueued

pytest_plugins = ["golemq_pg.pytest_plugin"]


def place_order(queue, order_id):
    queue.add("email.send", {"to": "a@example.com", "order": order_id},
              scope=("Order", order_id), priority=5)


def test_the_order_sends_an_email(golemq_queue, golemq_store):
    Path("schema.txt").write_text(golemq_store.schema)
    place_order(golemq_queue, "o1")
    job = assert_enqueued(golemq_store, "email.send", {"to": "a@example.com", "order": "o1"},
                          scope=("Order", "o1"), status="pending")
    assert job.priority == 5
    worker = Worker(golemq_store)
    sent = []
    worker.handler("email.send")(lambda job: sent.append(job.payload["order"]))
    worker.run_until_empty(timeout=30)
    assert sent == ["o1"]
    assert_enqueued(golemq_store, "email.send", status="succeeded")


def test_the_memory_store_needs_no_database(golemq_memory_store):
    from golemq_pg import Queue
    Queue(golemq_memory_store).add("t", {"n": 1})
    assert_enqueued(golemq_memory_store, "t", {"n": 1})


def test_a_missing_job_fails_with_what_differs(golemq_queue, golemq_store):
    place_order(golemq_queue, "o2")
    assert_enqueued(golemq_store, "email.send", {"to": "b@example.com", "order": "o2"},
                    priority=1)
"""


def test_a_users_tests_get_a_fresh_migrated_schema_dropped_afterwards(
    pytester: pytest.Pytester, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOLEMQ_TEST_DSN", pg_dsn)
    # A user's project without Django: not this suite's settings, which pytest-django put in
    # the environment (they name this checkout's tests package).
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE", raising=False)
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    # The failure says what was expected and how the closest job differs, never a value of
    # the payload (the keys that differ are named).
    result.stdout.fnmatch_lines(
        [
            "*no 'email.send' job matches priority=1, payload=<given>: 1 job(s) of that type*",
            "*job * (pending) differs in priority: 5 != 1; payload: other values for 'to'*",
        ]
    )
    # (The traceback quotes the test's own source line; the message is the "E" lines.)
    message = [line for line in result.stdout.lines if line.startswith("E ")]
    assert message
    assert not [line for line in message if "example.com" in line or "o1" in line]
    schema = (pytester.path / "schema.txt").read_text()
    assert schema.startswith("golemq_test_")
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (schema,)
        ).fetchone()
    assert row == (0,)


def test_assert_enqueued_returns_the_newest_match_and_checks_its_arguments() -> None:
    store = InMemoryStore()
    queue = Queue(store)
    first = queue.add("t", {"n": 1}, tags=["eu"])
    newest = queue.add("t", {"n": 1}, scope=Scope("A", "1"))
    assert assert_enqueued(store, "t", {"n": 1}).id == newest
    assert assert_enqueued(store, "t", tags=["eu"]).id == first
    assert assert_enqueued(store, "t", status=JobStatus.PENDING, scope=("A", "1")).id == newest
    with pytest.raises(AssertionError, match="no 't' job matches payload=<given>: 2 job"):
        assert_enqueued(store, "t", {"n": 2})
    with pytest.raises(AssertionError, match="0 job"):
        assert_enqueued(store, "other")
    with pytest.raises(TypeError, match="no field colour"):
        assert_enqueued(store, "t", colour="red")
