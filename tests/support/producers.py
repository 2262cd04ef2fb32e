"""Producer threads that add jobs through faults and record which adds were acknowledged.

:class:`Producer`: a thread with a store of its own that adds jobs (one ``add`` or an
``add_many``) until stopped. Every job carries a ``key`` (``"<producer>-<n>"``, never reused)
in its payload, so the jobs table can be compared with what the producer was told: an add
that returned is *acknowledged* (each of its jobs must exist afterwards); an add that raised
a database error is *unacknowledged* (its jobs may exist or not: the insert may have
committed before the connection broke). A failed add is not retried with the same keys.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from golemq_pg import PostgresStore, Queue


@dataclass(frozen=True)
class AddPlan:
    """One add: its payloads (without keys), the jobs' attempt budget and a label (``kind``,
    also written into each payload) the scenario checks the outcome by."""

    kind: str
    payloads: list[dict[str, Any]]
    max_attempts: int


class Producer:
    """Adds ``job_type`` jobs planned by ``plan`` (seeded ``random.Random``) every
    ``pause`` seconds (a uniform range) from :meth:`start` until :meth:`stop`. Read its
    records after :meth:`stop` (only its thread writes them)."""

    def __init__(
        self,
        dsn: str,
        schema: str,
        name: str,
        *,
        application_name: str,
        job_type: str,
        plan: Callable[[random.Random], AddPlan],
        seed: int,
        pause: tuple[float, float],
    ) -> None:
        self.name = name
        self.job_type = job_type
        self.store = PostgresStore.connect(dsn, schema=schema, min_size=1, max_size=2,
                                           application_name=application_name)
        self.queue = Queue(self.store)
        self._plan = plan
        self._rng = random.Random(seed)
        self._pause = pause
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{name}", daemon=True)
        #: key -> kind of every job whose add returned.
        self.acknowledged: dict[str, str] = {}
        #: key -> kind of every job whose add raised a database error.
        self.unacknowledged: dict[str, str] = {}
        #: How many adds raised, by exception class.
        self.failures: Counter[str] = Counter()
        #: Anything else an add raised (a bug, not a fault): the thread stops.
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 60.0) -> None:
        """Stop adding, wait for the add in flight, close the store."""
        self._stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"producer {self.name} still adding after {timeout}s"
        self.store.close()

    def _run(self) -> None:
        serial = 0
        while not self._stop.is_set():
            plan = self._plan(self._rng)
            keys = [f"{self.name}-{serial + n}" for n in range(len(plan.payloads))]
            serial += len(keys)
            payloads = [{**p, "key": k, "kind": plan.kind}
                        for p, k in zip(plan.payloads, keys, strict=True)]
            try:
                if len(payloads) == 1:
                    self.queue.add(self.job_type, payloads[0], max_attempts=plan.max_attempts)
                else:
                    self.queue.add_many(self.job_type, payloads,
                                        max_attempts=plan.max_attempts)
            except psycopg.Error as exc:  # PoolTimeout is one too
                self.unacknowledged.update(dict.fromkeys(keys, plan.kind))
                self.failures[type(exc).__name__] += 1
                self._stop.wait(0.1)
                continue
            except BaseException as exc:
                self.error = exc
                return
            self.acknowledged.update(dict.fromkeys(keys, plan.kind))
            self._stop.wait(self._rng.uniform(*self._pause))
