"""Creating a document: its row and its summarize job commit together or not at all."""

from psycopg import AsyncConnection

from documents.db import INSERT_DOCUMENT
from documents.jobs import DocumentSummarize
from golemq_pg import AsyncQueue


async def create_document(
    conn: AsyncConnection, queue: AsyncQueue, title: str, body: str
) -> tuple[int, str]:
    """Insert a document and enqueue its summary on ``conn``; returns (document id, job id).

    Both statements run in the caller's transaction on ``conn``: if it rolls back, neither
    the row nor the job exists, and a worker never runs a job whose document is not
    committed yet.
    """
    cursor = await conn.execute(INSERT_DOCUMENT, (title, body))
    row = await cursor.fetchone()
    if row is None:  # INSERT ... RETURNING always returns the row
        raise RuntimeError("the document was not inserted")
    document_id = int(row[0])
    job_id = await queue.add(
        DocumentSummarize,
        {"document_id": document_id},
        scope=("Document", str(document_id)),
        connection=conn,
    )
    if job_id is None:  # only an add with a dedupe_key can be rejected; this one has none
        raise RuntimeError("the summarize job was rejected as a duplicate")
    return document_id, job_id
