"""The workflow page in a real headless Chromium (Debian's package, through Playwright)
against ``golemq-pg web`` running as a process, while a real worker runs the workflow: the
graph is drawn with each job's status colour, turns to the next colours without a reload,
stops refreshing once the workflow finished, and a node's link opens the job's page, which
links back to the workflow and to the job's parents and children. Screenshots go to
tests/artifacts/browser/."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from golemq_pg import JobStatus, PostgresStore, Queue, Worker, Workflow
from tests.support.browser import ARTIFACTS
from tests.support.waiting import wait_until
from tests.support.web_server import web_process

pytest.importorskip("playwright.sync_api")

#: The light theme's status colours (app.css), as the browser computes them.
SUCCEEDED = "rgb(21, 128, 61)"
RUNNING = "rgb(29, 78, 216)"
WAITING = "rgb(15, 118, 110)"


def _status(store: PostgresStore, job_id: str) -> JobStatus | None:
    job = store.job_get(job_id)
    return None if job is None else job.status


def _stroke(page: Any, job_id: str) -> str:
    value: str = page.locator(f'#workflow-graph [data-job="{job_id}"] rect').evaluate(
        "el => getComputedStyle(el).stroke")
    return value


def test_a_running_workflow_page_draws_the_graph_updates_colours_and_links_to_jobs(
    browser_page: Any, pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    page = browser_page
    queue = Queue(pg_store)
    gate = threading.Event()
    worker = Worker(pg_store, poll_interval=0.1)

    @worker.handler("doc.fetch")
    def fetch_doc(job: Any) -> dict[str, int]:
        gate.wait(60)
        return {"pages": 3}

    @worker.handler("doc.extract")
    def extract(job: Any) -> None:
        return None

    @worker.handler("doc.index")
    def index_doc(job: Any) -> None:
        return None

    wf = Workflow("ingest doc42")
    fetch_node = wf.add("doc.fetch", {})
    pages = [wf.add("doc.extract", {"page": i}, after=[fetch_node]) for i in range(3)]
    index_node = wf.add("doc.index", {}, after=pages)
    run = queue.add_workflow(wf)
    fetch, index = run.job_ids[fetch_node], run.job_ids[index_node]
    extract_ids = [run.job_ids[n] for n in pages]
    worker.start()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        wait_until(lambda: _status(pg_store, fetch) is JobStatus.RUNNING, timeout=30,
                   what="the worker starts the first job")
        with web_process(pg_dsn, schema) as url:
            page.goto(f"{url}/workflows/{run.id}")
            assert page.inner_text("#workflow-status") == "running"
            assert page.inner_text("#workflow-name") == "ingest doc42"
            assert page.locator("#workflow-live[data-live]").count() == 1
            graph = page.locator("#workflow-graph")
            assert graph.is_visible()
            assert page.locator("#workflow-graph a.wf-node").count() == 5
            assert page.locator("#workflow-graph path.wf-edge").count() == 6
            assert _stroke(page, fetch) == RUNNING
            assert _stroke(page, index) == WAITING
            box = graph.bounding_box()
            assert box is not None
            assert box["width"] <= 1280  # no horizontal scrolling
            page.evaluate("window.loadedOnce = true")
            page.screenshot(path=str(ARTIFACTS / "workflow-running.png"), full_page=True)

            gate.set()
            # (a locator wait: the page's CSP forbids the eval wait_for_function needs)
            page.locator("#workflow-status", has_text="succeeded").wait_for(timeout=20_000)
            assert page.evaluate("window.loadedOnce") is True  # no reload happened
            for job_id in (fetch, *extract_ids, index):
                assert _stroke(page, job_id) == SUCCEEDED, job_id
            assert page.locator("#workflow-live[data-live]").count() == 0  # polling stopped
            page.screenshot(path=str(ARTIFACTS / "workflow-succeeded.png"), full_page=True)

            page.locator(f'#workflow-graph a[data-job="{extract_ids[1]}"]').click()
            page.wait_for_url(f"{url}/jobs/{extract_ids[1]}")
            assert page.inner_text("#job-status") == "succeeded"
            assert page.locator(f'#job-parents a[data-job="{fetch}"]').count() == 1
            assert page.locator(f'#job-children a[data-job="{index}"]').count() == 1
            page.locator("#job-workflow").click()
            page.wait_for_url(f"{url}/workflows/{run.id}")
            assert page.locator("#workflow-graph").is_visible()
    finally:
        gate.set()
        worker.stop(timeout=10)
