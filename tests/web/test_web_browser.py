"""The dashboard in a real headless Chromium (Debian's package, driven by Playwright through
``executable_path``) against ``golemq-pg web`` running as a process, with a real worker
process: load the overview, filter jobs by type, open a dead letter and retry it, pause a
type and see the worker stop claiming it, resume it. Screenshots go to tests/artifacts/."""

from __future__ import annotations

from typing import Any

import pytest

from golemq_pg import JobStatus, PostgresStore, Queue
from golemq_pg.store.port import FailItem
from tests.support.browser import ARTIFACTS
from tests.support.store_port import add, claim, slots
from tests.support.waiting import wait_until
from tests.support.web_server import web_process
from tests.support.workers import kill_leftovers, spawn, stop_gracefully, worker_config

pytest.importorskip("playwright.sync_api")



def _status(store: PostgresStore, job_id: str) -> JobStatus | None:
    job = store.job_get(job_id)
    return None if job is None else job.status


def test_operating_the_queue_from_a_real_browser(
    browser_page: Any, pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    page = browser_page
    queue = Queue(pg_store)
    dead = add(pg_store, "report.build", {"report": 7})
    (job,) = claim(pg_store, slots("report.build", limit=1))
    pg_store.job_fail_many("w1", [FailItem(dead, job.lease_token, "KeyError: 'column'")])
    queue.add("work", {}, delay=3600)  # keeps "work" on the overview while the worker idles
    worker = spawn(worker_config(
        pg_dsn, schema, "browser-worker", mode="run", store={"max_size": 4},
        worker={"poll_interval": 0.1},
        handlers=[{"type": "work", "options": {"concurrency": 2}}],
    ))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        first = queue.add("work", {})
        wait_until(lambda: _status(pg_store, first) is JobStatus.SUCCEEDED, timeout=30,
                   what="the worker runs a job")
        with web_process(pg_dsn, schema) as url:
            # The overview: counts by type, the worker alive.
            page.goto(url + "/")
            assert page.locator('#types tr[data-type="report.build"]').count() == 1
            wait_until(lambda: page.reload() or page.inner_text("#workers-alive") == "1",
                       timeout=15, interval=0.5, what="the worker shows as alive")
            page.screenshot(path=str(ARTIFACTS / "overview.png"), full_page=True)

            # Jobs filtered by type.
            page.goto(url + "/jobs")
            page.fill('input[name="type"]', "report.build")
            page.click('form.filters button[type="submit"]')
            page.wait_for_url("**/jobs?type=report.build*")
            types = page.locator("#jobs tbody tr td:nth-child(2)").all_inner_texts()
            assert types == ["report.build"]
            page.screenshot(path=str(ARTIFACTS / "jobs-filtered.png"), full_page=True)

            # A dead letter, retried: its status changes on the page.
            page.goto(url + "/failed")
            page.click("#dead-letters a.newest")
            page.wait_for_url(f"**/jobs/{dead}")
            assert page.inner_text("#job-status") == "failed"
            page.screenshot(path=str(ARTIFACTS / "dead-letter.png"), full_page=True)
            page.click("#retry")
            page.wait_for_url(f"**/jobs/{dead}?notice=retried")
            assert page.inner_text("#job-status") == "pending"
            assert _status(pg_store, dead) is JobStatus.PENDING
            page.screenshot(path=str(ARTIFACTS / "job-retried.png"), full_page=True)

            # Pause "work": the running worker stops claiming it; resume: it claims again.
            page.goto(url + "/")
            page.fill('tr[data-type="work"] input[name="reason"]', "browser test")
            page.click('tr[data-type="work"] button.pause')
            page.wait_for_url("**/?notice=paused")
            assert page.locator('tr[data-type="work"] .badge.paused').count() == 1
            assert "work" in pg_store.type_paused()
            held = [queue.add("work", {}) for _ in range(3)]
            page.wait_for_timeout(1500)  # fifteen poll intervals of the worker
            assert [_status(pg_store, i) for i in held] == [JobStatus.PENDING] * 3
            page.screenshot(path=str(ARTIFACTS / "paused.png"), full_page=True)
            page.click('tr[data-type="work"] button.resume')
            page.wait_for_url("**/?notice=resumed")
            wait_until(
                lambda: all(_status(pg_store, i) is JobStatus.SUCCEEDED for i in held),
                timeout=30, what="the worker claims the resumed type",
            )
        stop_gracefully([worker])
    finally:
        kill_leftovers([worker])
