"""Diagnosis of guarded types that keep getting nothing.

A store may say, with each claim, why a guarded type that had due work got none
(:class:`golemq_pg.store.port.ClaimBlock`: a ``not_while_running`` / ``waits_for`` type, a
busy scope, a resource pool). One blocked poll is normal; many in a row usually mean a
misconfiguration or a stuck job, so after :data:`STREAK` consecutive blocked polls the
worker logs one warning naming what blocks the type, once per streak.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import structlog

from golemq_pg.store.port import ClaimBlock, TypeSlots

log = structlog.get_logger("golemq_pg.worker.blocked")

#: Consecutive blocked polls before a warning.
STREAK = 20


class BlockedReporter:
    """Counts consecutive blocked polls per type and warns once per streak."""

    def __init__(self, owner: str, *, streak: int = STREAK) -> None:
        self.owner = owner
        self.streak = streak
        self._counts: dict[str, int] = {}

    def observe(
        self,
        slots: Sequence[TypeSlots],
        counts: Mapping[str, int],
        blocked: Mapping[str, ClaimBlock],
    ) -> None:
        """Account one claim: ``counts`` claimed per type, ``blocked`` per the store."""
        if not blocked and not self._counts:
            return
        for slot in slots:
            name = slot.type
            block = blocked.get(name)
            if block is None or counts.get(name, 0):
                self._counts.pop(name, None)
                continue
            seen = self._counts.get(name, 0) + 1
            self._counts[name] = seen
            if seen == self.streak:
                log.warning(
                    "type_blocked", worker_id=self.owner, type=name,
                    blocked_by=str(block), kind=block.kind, name=block.name, polls=seen,
                )

    def streaks(self) -> dict[str, int]:
        """Current consecutive blocked polls per type (for tests and introspection)."""
        return dict(self._counts)


__all__ = ["STREAK", "BlockedReporter"]
