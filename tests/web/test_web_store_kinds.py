"""The dashboard over each kind of store ``create_app`` takes: the in-memory store serves
every page and action, and over an ``AsyncPostgresStore`` no store call leaves the event
loop for a worker thread (the route tests run on both PostgreSQL stores: see
``tests/plugins/web.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from golemq_pg import AsyncPostgresStore, InMemoryStore, PostgresStore, Queue
from golemq_pg.web import _pages, create_app
from tests.support.async_bridge import LoopThread
from tests.support.web_client import Dashboard

PAGES = ("/", "/?fragment=live", "/jobs", "/failed", "/schedules", "/workers", "/healthz",
         "/metrics")


def test_every_page_and_action_works_over_the_in_memory_store() -> None:
    store = InMemoryStore()
    queue = Queue(store)
    job_id = queue.add("mail.send", {"to": "a@b.c"}, delay=3600)
    dashboard = Dashboard(create_app(store))
    for path in (*PAGES, f"/jobs/{job_id}", f"/jobs/{job_id}/live"):
        assert dashboard.get(path).status_code == 200, path
    answer = dashboard.post(f"/jobs/{job_id}/run-now")
    assert answer.status_code == 303
    assert "notice=run-now" in answer.headers["location"]
    job = queue.get(job_id)
    assert job is not None
    assert job.run_at <= store.now()


def test_search_filters_and_bulk_actions_work_over_the_in_memory_store() -> None:
    store = InMemoryStore()
    queue = Queue(store)
    mail = queue.add("Mail.Send", {}, delay=3600)
    other = queue.add("thumbnail", {})
    dashboard = Dashboard(create_app(store))
    found = dashboard.get("/jobs", params={"q": "mail.s"})
    assert f'data-id="{mail}"' in found.text
    assert f'data-id="{other}"' not in found.text
    scheduled = dashboard.get("/jobs", params={"status": "scheduled"}).text
    assert f'data-id="{mail}"' in scheduled
    assert f'data-id="{other}"' not in scheduled
    assert dashboard.get("/jobs", params={"status": "waiting"}).status_code == 200
    assert dashboard.get("/jobs", params={"before": "0"}).status_code == 200
    form = {"action": "run-now", "all": "1", "q": "mail", "confirm": "1"}
    done = dashboard.post("/jobs/bulk", form)
    assert done.status_code == 303
    assert "notice=1+of+1+job+made+due+now." in done.headers["location"]
    job = queue.get(str(mail))
    assert job is not None
    assert job.run_at <= store.now()


def _counting_thread_hops(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    hops: list[Any] = []
    original = _pages.run_in_threadpool

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(fn)
        return await original(fn, *args, **kwargs)

    monkeypatch.setattr(_pages, "run_in_threadpool", counted)
    return hops


def test_an_async_store_dashboard_reads_without_a_thread_hop(
    monkeypatch: pytest.MonkeyPatch,
    loop_thread: LoopThread,
    async_pg_store: AsyncPostgresStore,
    pg_store: PostgresStore,
) -> None:
    job_id = Queue(pg_store).add("mail.send", {"to": "a@b.c"})
    hops = _counting_thread_hops(monkeypatch)
    dashboard = Dashboard(create_app(async_pg_store), loop=loop_thread)
    for path in (*PAGES, f"/jobs/{job_id}", f"/jobs/{job_id}/live"):
        assert dashboard.get(path).status_code == 200, path
    assert hops == []
    # The same pages over the synchronous store do hop: the count above can fail.
    sync_dashboard = Dashboard(create_app(pg_store))
    assert sync_dashboard.get(f"/jobs/{job_id}").status_code == 200
    assert len(hops) >= 2
