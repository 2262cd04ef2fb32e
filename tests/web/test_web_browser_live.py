"""The dashboard's live behaviour in a real headless Chromium (Debian's package, through
Playwright) against ``golemq-pg web`` running as a process, with a real worker: a running
job's page turns to succeeded without a reload, a failed job's page shows each attempt's
traceback (collapsed, opened by a click), times read relative with the UTC time on hover.
Screenshots go to tests/artifacts/browser/."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from golemq_pg import JobStatus, PostgresStore, Queue, Worker
from tests.support.browser import ARTIFACTS
from tests.support.waiting import wait_until
from tests.support.web_server import web_process

pytest.importorskip("playwright.sync_api")



def _status(store: PostgresStore, job_id: str) -> JobStatus | None:
    job = store.job_get(job_id)
    return None if job is None else job.status


def _explode_report(rows: int) -> None:
    raise ValueError(f"column {rows} is missing")


def test_a_running_jobs_page_turns_succeeded_and_a_failed_one_shows_its_traceback(
    browser_page: Any, pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    page = browser_page
    queue = Queue(pg_store)
    gate = threading.Event()
    worker = Worker(pg_store, poll_interval=0.1)

    @worker.handler("slow.report")
    def slow(job: Any) -> dict[str, int]:
        gate.wait(60)
        return {"rows": 3}

    @worker.handler("bad.report")
    def bad(job: Any) -> None:
        _explode_report(7)

    worker.start()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        slow_id = queue.add("slow.report", {})
        wait_until(lambda: _status(pg_store, slow_id) is JobStatus.RUNNING, timeout=30,
                   what="the worker starts the slow job")
        with web_process(pg_dsn, schema) as url:
            page.goto(f"{url}/jobs/{slow_id}")
            assert page.inner_text("#job-status") == "running"
            assert page.locator("#job-live[data-live]").count() == 1
            page.evaluate("window.loadedOnce = true")
            created = page.locator("#history time").first
            assert created.get_attribute("title").endswith(" UTC")  # absolute on hover
            assert created.inner_text() == "just now" or "ago" in created.inner_text()
            page.screenshot(path=str(ARTIFACTS / "job-running.png"), full_page=True)

            gate.set()
            # (a locator wait: the page's CSP forbids the eval wait_for_function needs)
            page.locator("#job-status", has_text="succeeded").wait_for(timeout=15_000)
            assert page.evaluate("window.loadedOnce") is True  # no reload happened
            assert '"rows": 3' in page.inner_text("#job-result")
            assert page.locator("#job-live[data-live]").count() == 0  # polling stopped
            assert page.locator("#history li.tl-succeeded").count() == 1
            page.screenshot(path=str(ARTIFACTS / "job-succeeded.png"), full_page=True)

            bad_id = queue.add("bad.report", {}, max_attempts=1)
            wait_until(lambda: _status(pg_store, bad_id) is JobStatus.FAILED, timeout=30,
                       what="the failing job is dead-lettered")
            page.goto(f"{url}/jobs/{bad_id}")
            assert page.inner_text("#job-status") == "failed"
            trace = page.locator("#history details.traceback pre")
            assert not trace.is_visible()  # collapsed until asked for
            page.click("#history details.traceback summary")
            assert trace.is_visible()
            text = trace.inner_text()
            assert "Traceback (most recent call last)" in text
            assert "in _explode_report" in text
            assert "ValueError: column 7 is missing" in text
            page.screenshot(path=str(ARTIFACTS / "job-traceback.png"), full_page=True)
    finally:
        gate.set()
        worker.stop(timeout=10)
