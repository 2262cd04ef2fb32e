"""The service's settings, from the environment."""

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    """Where the service's database and queue are."""

    #: One PostgreSQL database for the service's tables and its queue.
    dsn: str
    #: The schema of the queue's tables (the service's own tables stay in ``public``).
    queue_schema: str = "golemq"

    @classmethod
    def from_env(cls) -> "Settings":
        """``$GOLEMQ_DSN`` (the variable the ``golemq-pg`` CLI reads too) and
        ``$GOLEMQ_SCHEMA``."""
        return cls(
            dsn=os.environ.get("GOLEMQ_DSN", "postgresql://postgres@127.0.0.1:5432/documents"),
            queue_schema=os.environ.get("GOLEMQ_SCHEMA", "golemq"),
        )
