"""The worker: an ``async def`` handler for I/O and a sync, transactional one.

Run it with ``golemq-pg worker documents.worker:build_worker``.
"""

import hashlib

import psycopg

from documents import db
from documents.jobs import DocumentRender, DocumentSummarize, RenderPayload, SummarizePayload
from documents.settings import Settings
from golemq_pg import JobEvent, PostgresStore, TerminalJobError, Worker

SETTINGS = Settings.from_env()


def summarize_text(body: str) -> tuple[str, int]:
    """The first sentence (at most 200 characters) and the word count of ``body``."""
    first = body.strip().split(". ", 1)[0]
    return first[:200], len(body.split())


async def summarize(job: JobEvent[SummarizePayload]) -> dict[str, int]:
    """Summarize a document with an async database client; the word count is the result.

    Runs as a task on the worker's event loop, so many summaries wait on I/O at once. One
    connection per job keeps the example short; a busy handler would share a pool.
    """
    document_id = job.payload["document_id"]
    async with await psycopg.AsyncConnection.connect(SETTINGS.dsn) as conn:
        row = await (await conn.execute(db.SELECT_BODY, (document_id,))).fetchone()
        if row is None:
            raise TerminalJobError("document not found")  # deleted: a retry cannot help
        summary, words = summarize_text(row[0])
        await conn.execute(db.UPDATE_SUMMARY, (summary, words, document_id))
    return {"words": words}


def render(job: JobEvent[RenderPayload]) -> dict[str, str | int]:
    """Render a document (CPU work: a sync handler) and record its checksum.

    Transactional: ``job.connection`` is the claim's transaction, so the checksum written
    here commits together with the job's success, or not at all.
    """
    conn = job.connection
    document_id = job.payload["document_id"]
    row = conn.execute(db.SELECT_FOR_RENDER, (document_id,)).fetchone()
    if row is None:
        raise TerminalJobError("document not found")
    title, body = row
    rendered = f"{title}\n{'=' * len(title)}\n\n{body}\n".encode()
    digest = hashlib.sha256(rendered).hexdigest()
    conn.execute(db.UPDATE_RENDERED, (digest, document_id))
    return {"sha256": digest, "bytes": len(rendered)}


def build_worker() -> Worker:
    """The service's Worker: both handlers on the queue of :class:`Settings`."""
    store = PostgresStore.connect(SETTINGS.dsn, schema=SETTINGS.queue_schema, max_size=4)
    worker = Worker(store)
    worker.handler(DocumentSummarize, concurrency=20, timeout=30)(summarize)
    worker.handler(DocumentRender, concurrency=2, timeout=30, transactional=True)(render)
    return worker
