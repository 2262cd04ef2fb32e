"""The service's job types: shared by the API (which enqueues) and the worker (which runs)."""

from typing import TypedDict

from golemq_pg import JobType


class SummarizePayload(TypedDict):
    """``document.summarize``: which document (the text stays in the database)."""

    document_id: int


class RenderPayload(TypedDict):
    """``document.render``: which document to render."""

    document_id: int


#: Run by an ``async def`` handler (I/O: an async database client).
DocumentSummarize = JobType("document.summarize", SummarizePayload)
#: Run by a sync, transactional handler (its writes commit with the job's completion).
DocumentRender = JobType("document.render", RenderPayload)
