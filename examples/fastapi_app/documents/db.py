"""The service's own table, and the statements the API and the worker run on it."""

from typing import LiteralString

SCHEMA: LiteralString = """
CREATE TABLE IF NOT EXISTS documents (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    title           text NOT NULL UNIQUE,
    body            text NOT NULL,
    summary         text,
    word_count      integer,
    rendered_sha256 text,
    created_at      timestamptz NOT NULL DEFAULT now()
)
"""

INSERT_DOCUMENT: LiteralString = "INSERT INTO documents (title, body) VALUES (%s, %s) RETURNING id"
SELECT_DOCUMENT: LiteralString = """
SELECT id, title, body, summary, word_count, rendered_sha256 FROM documents WHERE id = %s
"""
SELECT_BODY: LiteralString = "SELECT body FROM documents WHERE id = %s"
SELECT_FOR_RENDER: LiteralString = "SELECT title, body FROM documents WHERE id = %s FOR UPDATE"
UPDATE_SUMMARY: LiteralString = (
    "UPDATE documents SET summary = %s, word_count = %s WHERE id = %s"
)
UPDATE_RENDERED: LiteralString = "UPDATE documents SET rendered_sha256 = %s WHERE id = %s"
