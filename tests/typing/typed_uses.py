"""Checked by mypy in test_typing.py, never run or collected by pytest.

Each line that must be rejected ends with ``# expect: <error code>``; every other line
must type-check.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypedDict, assert_type

from golemq_pg import (
    UNLIMITED,
    AsyncQueue,
    BatchEvent,
    InMemoryStore,
    JobEvent,
    JobSummary,
    JobType,
    PostgresStore,
    Queue,
    RetryContext,
    Worker,
)
from golemq_pg.store.port import TransactionalJobStore


class ExtractPayload(TypedDict):
    article_id: str


class DigestPayload(TypedDict):
    user_id: int
    items: list[str]


ArticleExtract = JobType("article.extract", ExtractPayload)
DigestSend = JobType("digest.send", DigestPayload, grouped=True)

store = InMemoryStore()
queue = Queue(store)
worker = Worker(store)

# -- producer: the payload is checked against the JobType's TypedDict -------------------------
queue.add(ArticleExtract, {"article_id": "a1"})
queue.add(ArticleExtract, {"article_id": "a1"}, scope=("Article", "a1"), delay=5)
queue.add(ArticleExtract, {"article": "a1"})  # expect: arg-type
queue.add(ArticleExtract, {"article_id": 1})  # expect: typeddict-item
queue.add(ArticleExtract, {})  # expect: arg-type
queue.add(DigestSend, {"user_id": 7, "items": ["x"]}, scope=("User", "7"))
queue.add(DigestSend, {"user_id": "7", "items": []}, scope=("User", "7"))  # expect: typeddict-item
queue.add_many(ArticleExtract, [{"article_id": "a1"}, {"article_id": "a2"}])
queue.add_many(ArticleExtract, [{"article_id": 2}])  # expect: typeddict-item
name: str = ArticleExtract.name
extract_payload: ExtractPayload = {"article_id": "a2"}
digest_payload: DigestPayload = {"user_id": 1, "items": []}
queue.add(ArticleExtract, extract_payload)
queue.add(ArticleExtract, digest_payload)  # expect: arg-type

# -- plain strings keep working, untyped ------------------------------------------------------
queue.add("article.extract", {"article_id": 1, "anything": [1, 2]})
queue.add_many("email.send", [{"to": "a@example.com"}])


@worker.handler("plain.type")
def plain(job: JobEvent[Any]) -> None:
    job.payload["whatever"]


# -- consumer: handlers get JobEvent[Payload] ------------------------------------------------
@worker.handler(ArticleExtract, timeout=30)
def extract(job: JobEvent[ExtractPayload]) -> None:
    text: str = job.payload["article_id"]
    job.progress(0.5)
    del text


@worker.handler(ArticleExtract)
def extract_reads_a_missing_key(job: JobEvent[ExtractPayload]) -> None:
    job.payload["missing"]  # expect: typeddict-item


@worker.handler(ArticleExtract)
def extract_wrong_value_type(job: JobEvent[ExtractPayload]) -> None:
    count: int = job.payload["article_id"]  # expect: assignment
    del count


@worker.handler(ArticleExtract)  # expect: arg-type
def extract_wrong_payload(job: JobEvent[DigestPayload]) -> None:
    del job


@worker.handler(ArticleExtract, transactional=True)
def extract_returning_bool(job: JobEvent[ExtractPayload]) -> bool:
    return job.attempt < 3


@worker.handler(DigestSend)
def digest(batch: BatchEvent[DigestPayload]) -> None:
    for job in batch.jobs:
        user: int = job.payload["user_id"]
        del user


@worker.handler(DigestSend)
def digest_wrong_key(batch: BatchEvent[DigestPayload]) -> None:
    batch.jobs[0].payload["article_id"]  # expect: typeddict-item


@worker.handler("loose.type", concurrency=2)
def loose(job: JobEvent[ExtractPayload]) -> None:
    job.payload["article_id"].upper()


@worker.handler(ArticleExtract, delete_on="success")
def extract_with_result(job: JobEvent[ExtractPayload]) -> dict[str, str]:
    return {"url": job.payload["article_id"]}


@worker.handler("loose.kept", delete_on="sometimes")  # expect: call-overload, untyped-decorator
def kept(job: JobEvent[Any]) -> None:
    del job


extract(JobEvent(id="1", type="article.extract", payload={"article_id": "a1"}))
extract(
    JobEvent(id="1", type="article.extract",
             payload={"nope": "a1"})  # expect: typeddict-item, typeddict-unknown-key
)


# -- the optional transactional verbs of the store port ------------------------------------
def needs_transactional(store: TransactionalJobStore) -> None:
    del store


def check_stores(pg: PostgresStore, memory: InMemoryStore) -> None:
    needs_transactional(pg)
    needs_transactional(memory)  # expect: arg-type


# -- the Worker's options: names and types checked (WorkerOptions) -------------------------
Worker(store, poll_interval=0.1, lease_grace=timedelta(seconds=5), delete_on="success")
Worker(store, poll_intervall=0.1)  # expect: call-arg
Worker(store, delete_on="sometimes")  # expect: arg-type
Worker(store, notify="yes")  # expect: arg-type
Worker(store, max_concurrency=8)
Worker(store, max_concurrency="8")  # expect: arg-type
worker.set_concurrency("email.send", 4)
worker.remove_handler("email.send", wait=False, timeout=timedelta(seconds=5))


# -- job and schedule control: bool on a Queue, a coroutine of it on an AsyncQueue ---------------
assert_type(queue.delete("1"), bool)
assert_type(queue.run_schedule_now("nightly"), bool)
assert_type(queue.pause_schedule("nightly"), bool)
assert_type(queue.resume_schedule("nightly"), bool)
queue.delete(1)  # expect: arg-type


async def check_async_queue(aqueue: AsyncQueue) -> None:
    assert_type(await aqueue.delete("1"), bool)
    assert_type(await aqueue.run_schedule_now("nightly"), bool)
    assert_type(await aqueue.pause_schedule("nightly"), bool)
    assert_type(await aqueue.resume_schedule("nightly"), bool)


# -- attempt budgets: an int or UNLIMITED (None: the default); read back as int | None -----------
Forever: JobType[dict[str, Any]] = JobType("sync.forever", max_attempts=UNLIMITED)
queue.add("sync.forever", {}, max_attempts=UNLIMITED)
queue.add(ArticleExtract, {"article_id": "a1"}, max_attempts=5)
queue.add("sync.forever", {}, max_attempts="unlimited")  # expect: call-overload
queue.add_many("sync.forever", [{}], max_attempts=UNLIMITED)
queue.schedule("k", Forever, {}, every=60, max_attempts=UNLIMITED)
Queue(store, default_max_attempts=UNLIMITED)
AsyncQueue(store, default_max_attempts=UNLIMITED)
Worker(store, default_max_attempts=UNLIMITED)
Worker(store, default_max_attempts=None)  # expect: arg-type
JobType("t", max_attempts=2.5)  # expect: arg-type


def check_budgets(job: JobSummary, event: JobEvent[Any], ctx: RetryContext) -> None:
    assert_type(job.max_attempts, int | None)
    assert_type(event.max_attempts, int | None)
    assert_type(ctx.max_attempts, int | None)
