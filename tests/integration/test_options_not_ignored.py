"""No option is accepted and ignored: an option that has no effect in the combination given is
refused with an error that names it, and nothing is written (the Queue on both stores, the
CLI as a subprocess). The semantics page (docs/semantics.md, "What each option governs")
lists what each option governs."""

from __future__ import annotations

from typing import Any

import pytest

from golemq_pg import PostgresStore, Queue, QueueConfigError, Worker, Workflow
from tests.support.cli import assert_clean_failure, run_cli
from tests.support.store_port import count_rows


def test_replace_without_a_dedupe_key_is_refused(store: Any) -> None:
    queue = Queue(store)
    with pytest.raises(ValueError, match="on_duplicate='replace' needs a dedupe_key"):
        queue.add("t", {"n": 1}, on_duplicate="replace")
    assert count_rows(store) == 0
    # With a key it replaces; "reject" (the default) without a key is a plain add.
    first = queue.add("t", {"n": 1}, dedupe_key="k", on_duplicate="replace")
    assert queue.add("t", {"n": 2}, dedupe_key="k", on_duplicate="replace") == first
    assert queue.add("t", {"n": 3}) is not None


def test_a_parent_failure_policy_without_parents_is_refused(store: Any) -> None:
    queue = Queue(store)
    with pytest.raises(ValueError, match="'cancel' needs parents: give depends_on"):
        queue.add("t", {"n": 1}, on_parent_failure="cancel")
    with pytest.raises(ValueError, match="on_parent_failure='run' needs parents: give depends_on"):
        queue.add_many("t", [{"n": 1}], on_parent_failure="run")
    wf = Workflow("w")
    with pytest.raises(ValueError, match="on_parent_failure='run' needs parents: give after"):
        wf.add("t", {"n": 1}, on_parent_failure="run")
    assert count_rows(store) == 0
    # With parents each policy is taken; "fail" (the default) without parents is a plain add.
    parent = queue.add("t", {"n": 2})
    assert parent is not None
    assert queue.add("t", {"n": 3}, depends_on=[parent], on_parent_failure="cancel") is not None
    node = wf.add("t", {"n": 4})
    wf.add("t", {"n": 5}, after=[node], on_parent_failure="run")
    assert queue.add("t", {"n": 6}, on_parent_failure="fail") is not None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"every": 60, "timezone": "Europe/Paris"}, "timezone applies to cron= schedules only"),
        ({"cron": "0 6 * * *", "repeat_from": "run_at"},
         "repeat_from applies to every= schedules only"),
    ],
)
def test_a_schedule_option_its_kind_does_not_read_is_refused(
    store: Any, kwargs: dict[str, Any], match: str
) -> None:
    queue = Queue(store)
    with pytest.raises(ValueError, match=match):
        queue.schedule("s", "t", {}, **kwargs)
    assert queue.schedules() == []


def test_the_options_each_schedule_kind_reads_are_accepted(store: Any) -> None:
    queue = Queue(store)
    queue.schedule("cron", "t", {}, cron="0 6 * * *", timezone="Europe/Paris")
    queue.schedule("every", "t", {}, every=60, repeat_from="run_at", timezone="UTC")
    by_key = {s.key: s for s in queue.schedules()}
    assert by_key["cron"].timezone == "Europe/Paris"
    assert by_key["every"].repeat_from == "run_at"


def test_listen_dsn_is_refused_on_a_store_without_a_database(
    mem_store: Any, pg_store: PostgresStore, pg_dsn: str
) -> None:
    with pytest.raises(QueueConfigError, match="drop listen_dsn"):
        Worker(mem_store, listen_dsn=pg_dsn)
    assert Worker(pg_store, listen_dsn=pg_dsn).config.listen_dsn == pg_dsn


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["worker", "golemq_pg.cli.demo:build_worker", "--metrics-host", "0.0.0.0"],  # noqa: S104
         "--metrics-host needs --metrics-port"),
        (["stats", "--interval", "5"], "--interval needs --watch"),
    ],
)
def test_a_cli_option_without_the_option_it_qualifies_is_refused(
    args: list[str], says: str
) -> None:
    # Refused before anything connects: a DSN that leads nowhere proves it.
    result = run_cli(*args, dsn="host=/nowhere dbname=x")
    assert_clean_failure(result, 2)
    assert says in result.stderr


def test_enqueue_replace_without_a_dedupe_key_is_refused(
    pg_dsn: str, pg_store: Any, schema: str
) -> None:
    result = run_cli("--schema", schema, "enqueue", "t", "{}", "--on-duplicate", "replace",
                     dsn=pg_dsn)
    assert_clean_failure(result, 2)
    assert "on_duplicate='replace' needs a dedupe_key" in result.stderr
    assert count_rows(pg_store) == 0
