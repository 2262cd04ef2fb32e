"""Stores: the JobStore port and its PostgreSQL and in-memory implementations."""

from golemq_pg.store.memory import InMemoryStore
from golemq_pg.store.port import JobStore
from golemq_pg.store.postgres import PostgresStore

__all__ = ["InMemoryStore", "JobStore", "PostgresStore"]
