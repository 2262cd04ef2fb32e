"""The HTTP API: create documents (row and job in one transaction), wait for job results,
and the queue's dashboard mounted under ``/queue``.

Serve it with ``uvicorn --factory documents.app:build_api``.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import psycopg
from fastapi import Body, FastAPI, HTTPException, Query, Response, status
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from pydantic import BaseModel, Field

from documents import db
from documents.jobs import DocumentRender
from documents.service import create_document
from documents.settings import Settings
from golemq_pg import AsyncPostgresStore, AsyncQueue, JobStatus, JobSummary, PostgresStore
from golemq_pg.web import create_app

#: The longest a client may ask ``GET /jobs/{id}/result`` to wait, in seconds.
MAX_WAIT = 30.0


class NewDocument(BaseModel):
    """A document to create."""

    title: str = Field(min_length=1, max_length=200)
    body: str = Field(min_length=1, max_length=100_000)


class Created(BaseModel):
    """A created document and the job that summarizes it."""

    id: int
    job_id: str


class Document(BaseModel):
    """A document as stored, with what the jobs wrote into it."""

    id: int
    title: str
    body: str
    summary: str | None
    word_count: int | None
    rendered_sha256: str | None


class Enqueued(BaseModel):
    """The id of an enqueued job (``GET /jobs/{job_id}/result`` waits for it)."""

    job_id: str


class JobOutcome(BaseModel):
    """A job's state; ``result`` once it succeeded, ``last_error`` once it failed."""

    id: str
    type: str
    status: JobStatus
    result: Any = None
    last_error: str | None = None

    @classmethod
    def of(cls, job: JobSummary) -> "JobOutcome":
        """The outcome of a job summary (never its payload)."""
        return cls(id=job.id, type=job.type, status=job.status, result=job.result,
                   last_error=job.last_error)


def build_api(settings: Settings | None = None) -> FastAPI:
    """The application; its pools open at startup and close at shutdown (the lifespan)."""
    settings = settings or Settings.from_env()
    # The service's async pool serves its own queries and the AsyncQueue alike: a job
    # enqueued with connection=conn joins that request's transaction.
    pool = AsyncConnectionPool(settings.dsn, min_size=1, max_size=10, open=False)
    store = AsyncPostgresStore(pool, schema=settings.queue_schema)
    queue = AsyncQueue(store)
    # The dashboard is a sync ASGI app (it runs its queries in a thread pool): a small
    # sync pool of its own.
    dashboard_pool = ConnectionPool(settings.dsn, min_size=1, max_size=2, open=False)
    dashboard = create_app(
        PostgresStore(dashboard_pool, schema=settings.queue_schema), title="documents queue"
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with pool:
            await store.migrate()  # the queue's schema: idempotent, versioned
            async with pool.connection() as conn:
                await conn.execute(db.SCHEMA)
            with dashboard_pool:
                yield

    api = FastAPI(title="documents", lifespan=lifespan)
    # Mounted as it is, its actions (retry, cancel, pause) are open to anyone who reaches
    # the API: in production pass basic_auth=... or read_only=True, or guard /queue upstream.
    # It answers the loopback names only; on a domain pass allowed_hosts=["docs.example.com"].
    api.mount("/queue", dashboard)

    @api.post("/documents", status_code=status.HTTP_201_CREATED)
    async def post_document(new: NewDocument) -> Created:
        """Create one document; its summarize job commits with it."""
        async with pool.connection() as conn, conn.transaction():
            document_id, job_id = await create_document(conn, queue, new.title, new.body)
        return Created(id=document_id, job_id=job_id)

    @api.post("/documents/import", status_code=status.HTTP_201_CREATED)
    async def import_documents(
        new: Annotated[list[NewDocument], Body(min_length=1, max_length=100)],
    ) -> list[Created]:
        """Create many documents, all or none: a duplicate title rolls back every document
        of the import and every job enqueued for them (409)."""
        created: list[Created] = []
        try:
            async with pool.connection() as conn, conn.transaction():
                for doc in new:
                    document_id, job_id = await create_document(conn, queue, doc.title, doc.body)
                    created.append(Created(id=document_id, job_id=job_id))
        except psycopg.errors.UniqueViolation:
            raise HTTPException(status.HTTP_409_CONFLICT, "a title already exists") from None
        return created

    @api.get("/documents/{document_id}")
    async def get_document(document_id: int) -> Document:
        """One document; 404 when unknown."""
        async with pool.connection() as conn:
            row = await (await conn.execute(db.SELECT_DOCUMENT, (document_id,))).fetchone()
        if row is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such document")
        fields = ("id", "title", "body", "summary", "word_count", "rendered_sha256")
        return Document(**dict(zip(fields, row, strict=True)))

    @api.post("/documents/{document_id}/render", status_code=status.HTTP_202_ACCEPTED)
    async def render_document(document_id: int) -> Enqueued:
        """Enqueue a render of the document: one pending render per document (a second
        request while one waits gets the same job)."""
        async with pool.connection() as conn, conn.transaction():
            found = await (await conn.execute(db.SELECT_BODY, (document_id,))).fetchone()
            if found is None:
                raise HTTPException(status.HTTP_404_NOT_FOUND, "no such document")
            job_id = await queue.add(
                DocumentRender,
                {"document_id": document_id},
                scope=("Document", str(document_id)),
                dedupe_key=str(document_id),
                on_duplicate="replace",
                connection=conn,
            )
        if job_id is None:  # "replace" always answers with a job id
            raise RuntimeError("the render job was not enqueued")
        return Enqueued(job_id=job_id)

    @api.get("/jobs/{job_id}/result")
    async def job_result(
        job_id: str,
        response: Response,
        timeout: Annotated[float, Query(gt=0, le=MAX_WAIT)] = 10.0,
    ) -> JobOutcome:
        """Wait up to ``timeout`` seconds for the job to finish: 200 with its outcome once
        it has, 202 with its current state when it is still pending or running, 404 when
        there is no such job (or it was cancelled meanwhile)."""
        try:
            return JobOutcome.of(await queue.wait(job_id, timeout=timeout))
        except TimeoutError:
            job = await queue.get(job_id)
            if job is not None:
                response.status_code = status.HTTP_202_ACCEPTED
                return JobOutcome.of(job)
        except (LookupError, ValueError):
            pass
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no such job")

    return api
