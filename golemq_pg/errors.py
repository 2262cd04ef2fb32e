"""The public exceptions: what handlers raise, what bad input and bad configuration get,
and what a handler sees when its job is aborted. Exported from ``golemq_pg``."""

from __future__ import annotations


class QueuePayloadError(ValueError):
    """A payload cannot be stored.

    The message names the job type and the failure category, never the payload.
    """

    def __init__(self, job_type: str, category: str) -> None:
        self.job_type = job_type
        self.category = category
        super().__init__(f"invalid payload for job type {job_type!r}: {category}")


class QueueConfigError(ValueError):
    """A Worker, handler or resource is configured with a value out of range or inconsistent."""


class PreparedStatementsUnsupported(QueueConfigError):  # noqa: N818 - reads as a condition
    """Prepared statements met a pooler that cannot hold them (PgBouncer < 1.21 in
    transaction mode); the message names the fix, ``PostgresStore.connect(...,
    prepare=False)``."""


class TerminalJobError(Exception):
    """Raised by a handler: the job fails now, without further attempts."""


class RetryableJobError(Exception):
    """Raised by a handler: retry the job.

    ``retry_after`` (seconds) is a floor on the backoff; ``consumes_attempt=False`` retries
    without spending an attempt.
    """

    def __init__(
        self,
        message: str = "",
        retry_after: float | None = None,
        consumes_attempt: bool = True,
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.consumes_attempt = consumes_attempt


class JobAborted(Exception):  # noqa: N818 - reads as an outcome, like TimeoutError
    """Raised by ``CancelSignal.raise_if_cancelled`` inside a handler whose job was aborted."""


class MigrationLockTimeout(RuntimeError):  # noqa: N818 - reads as a condition
    """A migration step was refused a lock within its ``lock_timeout`` on every try
    (``store.migrate(lock_timeout=, lock_retries=)``, ``golemq-pg migrate --lock-timeout``):
    a long transaction holds a lock the step needs, or waits for one. The message names the
    migration and says what of it is applied; ``migration`` is its name (``NNNN_name``)."""

    def __init__(self, message: str, *, migration: str) -> None:
        super().__init__(message)
        self.migration = migration


class SchemaNotMigrated(RuntimeError):  # noqa: N818 - reads as a condition
    """The store's schema does not exist or lacks tables: ``Worker.start()`` (and
    ``golemq-pg worker``) refuse to run until ``golemq-pg migrate`` (or ``store.migrate()``)
    has created it. ``schema`` is the schema's name (None when the store does not say)."""

    def __init__(self, schema: str | None) -> None:
        name = repr(schema) if schema else "of the store"
        super().__init__(
            f"schema {name} is not migrated: run `golemq-pg migrate` (or store.migrate())"
        )
        self.schema = schema
