"""Tags on the port (EnqueueParams/EnqueueManyParams.tags, FindParams.tags) and the
payload read (job_payload), on both stores."""

from __future__ import annotations

import pytest

from golemq_pg.store.port import EnqueueManyParams, EnqueueParams, FindParams, JobStore

# The contract of the producer verbs holds on the async path too (AsyncPostgresStore).
pytestmark = pytest.mark.async_store_too

def enqueue(store: JobStore, tags: tuple[str, ...] | None, **fields: object) -> str:
    """One job of type ``t`` with ``tags``; returns its id."""
    result = store.job_enqueue(EnqueueParams(type="t", payload=b'{"n": 1}', tags=tags,
                                             **fields))  # type: ignore[arg-type]
    assert result.id is not None
    return result.id


def found(store: JobStore, tags: list[str] | None, **filters: object) -> list[str]:
    """Ids ``job_find`` returns for ``tags`` (and other filters), newest first."""
    params = FindParams(tags=tags, limit=None, **filters)  # type: ignore[arg-type]
    return [job.id for job in store.job_find(params)]


def test_tags_round_trip_and_untagged_jobs_have_none(store: JobStore) -> None:
    tagged = enqueue(store, ("billing", "eu", "NULL", "a.b:c-d_e"))
    plain = enqueue(store, None)
    job = store.job_get(tagged)
    assert job is not None
    assert job.tags == ("billing", "eu", "NULL", "a.b:c-d_e")
    other = store.job_get(plain)
    assert other is not None
    assert other.tags == ()


def test_find_by_tags_is_containment_of_every_listed_tag(store: JobStore) -> None:
    both = enqueue(store, ("billing", "eu"))
    billing = enqueue(store, ("billing",))
    eu_us = enqueue(store, ("eu", "us"))
    enqueue(store, None)
    assert found(store, ["billing"]) == [billing, both]
    assert found(store, ["eu"]) == [eu_us, both]
    assert found(store, ["billing", "eu"]) == [both]
    assert found(store, ["eu", "billing"]) == [both]
    assert found(store, ["nope"]) == []
    assert found(store, ["Billing"]) == []  # tags are case-sensitive
    assert len(found(store, None)) == 4
    assert len(found(store, [])) == 4  # an empty list filters nothing


def test_find_by_tags_combines_with_the_other_filters(store: JobStore) -> None:
    first = enqueue(store, ("x",))
    store.job_enqueue(EnqueueParams(type="other", payload=b"{}", tags=("x",)))
    assert found(store, ["x"], types=["t"]) == [first]
    assert len(found(store, ["x"])) == 2
    assert found(store, ["x"], types=["t"], skip=1) == []


def test_add_many_puts_the_tags_on_every_job(store: JobStore) -> None:
    payloads = [b'{"i": %d}' % i for i in range(5)]
    assert store.job_enqueue_many(EnqueueManyParams(type="t", payloads=payloads,
                                                    tags=("batch", "NULL"))) == 5
    assert store.job_enqueue_many(EnqueueManyParams(type="t", payloads=payloads[:2],
                                                    delay=30.0, tags=("later",))) == 2
    assert store.job_enqueue_many(EnqueueManyParams(type="t", payloads=payloads[:1])) == 1
    assert len(found(store, ["batch", "NULL"])) == 5
    assert len(found(store, ["later"])) == 2
    tags = sorted(job.tags for job in store.job_find(FindParams(limit=None)))
    assert tags == [()] + [("batch", "NULL")] * 5 + [("later",)] * 2


def test_a_replacing_add_replaces_the_tags_with_the_payload(store: JobStore) -> None:
    first = enqueue(store, ("old",), dedupe_key="k", on_duplicate="replace")
    again = enqueue(store, ("new", "eu"), dedupe_key="k", on_duplicate="replace")
    assert again == first
    job = store.job_get(first)
    assert job is not None
    assert job.tags == ("new", "eu")
    enqueue(store, None, dedupe_key="k", on_duplicate="replace")
    job = store.job_get(first)
    assert job is not None
    assert job.tags == ()
    assert found(store, ["new"]) == []


def test_a_rejecting_keyed_add_stores_its_tags(store: JobStore) -> None:
    job_id = enqueue(store, ("keyed",), dedupe_key="k2")
    assert found(store, ["keyed"]) == [job_id]


def test_job_payload_returns_the_encoded_payload(store: JobStore) -> None:
    job_id = enqueue(store, None)
    payload = store.job_payload(job_id)
    assert payload is not None
    assert payload.replace(b" ", b"") == b'{"n":1}'
    assert store.job_payload("999999999") is None
    assert store.job_payload("not-an-id") is None
