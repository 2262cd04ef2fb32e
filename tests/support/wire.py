"""What a connection sent to the server, read from libpq's own protocol trace: the round
trips a block of code made (each ends with the server's ReadyForQuery)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import pq


class Trips:
    """Filled when the block of :func:`round_trips` ends: ``count`` and each round trip's
    first client message (``Query "BEGIN"``, ``Parse ... "SELECT ..."``) in ``sent``."""

    def __init__(self) -> None:
        self.count = 0
        self.sent: list[str] = []


@contextlib.contextmanager
def round_trips(conn: psycopg.Connection[Any]) -> Iterator[Trips]:
    """Count the round trips ``conn`` makes inside the block, from libpq's trace of the
    protocol messages (a statement sent as Parse/Bind/Execute/Sync or as one Query is one)."""
    trips = Trips()
    with tempfile.TemporaryFile("w+b") as log:
        conn.pgconn.trace(log.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield trips
        finally:
            conn.pgconn.untrace()
        log.seek(0)
        first: str | None = None
        for line in log.read().decode("utf-8", "replace").splitlines():
            fields = line.split("\t")
            if len(fields) < 3:
                continue
            if fields[0] == "F" and first is None:
                first = " ".join(fields[2:])[:120]
            elif fields[0] == "B" and fields[2].startswith("ReadyForQuery"):
                trips.count += 1
                trips.sent.append(first or "")
                first = None
