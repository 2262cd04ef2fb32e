"""``job_wait`` of the in-memory store: a condition variable on the store's lock.

Private to :mod:`golemq_pg.store.memory`. The jobs table calls its ``on_done`` hook whenever
a row finishes or is deleted (completion, failure, the reaper, cancel, prune, any other
deletion); the store points that hook at this condition's ``notify_all``, so a waiter wakes
on exactly the changes that can end its wait, looks at its row again and sleeps on.
"""

from __future__ import annotations

import threading
import time

from golemq_pg._types import JobSummary
from golemq_pg.store.memory._rows import JobTable
from golemq_pg.store.port import TERMINAL_STATUSES, wait_missing, wait_timed_out


def wait_for_job(
    table: JobTable, done: threading.Condition, job_id: str, timeout: float | None
) -> JobSummary:
    """Block on ``done`` (built on the store's lock) until ``job_id``'s row is terminal.

    Raises ``LookupError`` when the row does not exist or disappears, ``TimeoutError`` when
    ``timeout`` seconds (real time, whatever the store's clock) pass first.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    with done:
        row = table.get(job_id)
        if row is None:
            raise wait_missing(job_id)
        while row.status not in TERMINAL_STATUSES:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise wait_timed_out(job_id, timeout or 0.0)
            done.wait(remaining)
            # The same id is never reused, so a different object cannot appear under it.
            row = table.get(job_id)
            if row is None:
                raise wait_missing(job_id)
        return row.summary()
