"""What a worker's start checks: a schema that ``migrate`` has not created is refused with
one clear error (``SchemaNotMigrated``) before any thread starts, instead of every service
logging ``schema does not exist`` in a loop."""

from __future__ import annotations

import threading

import pytest

from golemq_pg import PostgresStore, Worker
from golemq_pg.errors import SchemaNotMigrated


def test_start_on_an_unmigrated_schema_raises_a_clear_error(pg_dsn: str, schema: str) -> None:
    store = PostgresStore.connect(pg_dsn, schema=schema, min_size=1, max_size=2)
    try:
        worker = Worker(store, poll_interval=0.1)

        @worker.handler("startup.noop")
        def noop(job: object) -> None:
            del job

        before = {thread.name for thread in threading.enumerate()}
        with pytest.raises(SchemaNotMigrated, match=rf"schema '{schema}' is not migrated: "
                                                    r"run `golemq-pg migrate`"):
            worker.start()
        assert not worker.running
        started = {thread.name for thread in threading.enumerate()} - before
        assert not [name for name in started if name in ("golemq-claim", "golemq-completer")]
        # Once migrated, the same worker starts.
        store.migrate()
        worker.start()
        assert worker.running
        worker.stop()
    finally:
        store.close()
