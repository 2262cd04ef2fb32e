"""Take the README's dashboard screenshots from the real app on real data.

    python docs/screenshots.py [DSN]        # default $GOLEMQ_DSN, else the local test server

Runs the demo workload (``golemq-pg demo``: no-ops, flaky jobs that retry, slow jobs with
progress, a type that always dead-letters) in schema ``golemq_screens``, leaves a worker
running with some work parked for later and one type paused, serves ``golemq_pg.web`` with
uvicorn on a free loopback port and photographs the overview, the jobs list, a
retried-then-dead job, the dead letters and a workflow part-way through (a fan-out, some
jobs done, some running, one held by a paused type, the fan-in waiting), each in the light
and the dark theme (``prefers-color-scheme``), with headless Chromium (Debian's
``/usr/bin/chromium`` through Playwright). Writes ``docs/screenshots/<page>-<light|dark>.png``
(pages: overview, jobs, job, failed, workflow), and the light overview and job again as
``docs/dashboard-overview.png`` and ``docs/dashboard-job.png``.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path

import uvicorn
from playwright.sync_api import sync_playwright

from golemq_pg import JobStatus, PostgresStore, Queue, Worker, Workflow
from golemq_pg.cli.demo import FLAKY, NOOP, SLOW, _register, _Tally, run_demo
from golemq_pg.web import create_app

SCHEMA = "golemq_screens"
DOCS = Path(__file__).resolve().parent
SHOTS = DOCS / "screenshots"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _workflow(queue: Queue) -> str:
    """A workflow part-way through: its first job done, a fan-out of extracts (half done,
    half running for minutes), a check held by the paused FLAKY type, the fan-in waiting."""
    wf = Workflow("nightly ingest 2026-05-01")
    fetch = wf.add(NOOP, {"n": 1})
    extracts = [wf.add(SLOW, {"steps": 10 if i % 2 else 9000}, after=[fetch])
                for i in range(8)]
    check = wf.add(FLAKY, {"fail_times": 0}, after=[fetch])
    wf.add(NOOP, {"n": 2}, after=[*extracts, check])
    run = queue.add_workflow(wf)
    time.sleep(3)  # the fetch and the short extracts finish, the long ones run
    return run.id


def main(dsn: str) -> None:
    """Fill the schema, serve the dashboard, take both screenshots."""
    run_demo(dsn, schema=SCHEMA, jobs=3000, quiet=True)
    store = PostgresStore.connect(dsn, schema=SCHEMA, max_size=8)
    queue = Queue(store)
    worker = Worker(store, poll_interval=0.2)
    _register(worker, _Tally())
    worker.start()
    queue.add_many(NOOP, [{"n": i} for i in range(400)], delay=3600)
    queue.add_many(SLOW, [{"steps": 5} for _ in range(12)], delay=900)
    queue.schedule("nightly-report", NOOP, {"n": 0}, cron="0 3 * * *")
    queue.pause(FLAKY, "investigating upstream timeouts")
    queue.add_many(FLAKY, [{"fail_times": 0} for _ in range(25)])
    dead = queue.find(types=[FLAKY], statuses=[JobStatus.FAILED], limit=1)
    workflow_id = _workflow(queue)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(store), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=os.environ.get("GOLEMQ_CHROMIUM", "/usr/bin/chromium"),
                args=["--no-sandbox"],
            )
            pages = {"overview": "/", "jobs": "/jobs", "failed": "/failed"}
            if dead:
                pages["job"] = f"/jobs/{dead[0].id}"
            pages["workflow"] = f"/workflows/{workflow_id}"
            SHOTS.mkdir(exist_ok=True)
            for scheme in ("light", "dark"):
                page = browser.new_page(viewport={"width": 1280, "height": 900},
                                        color_scheme=scheme)
                for name, path in pages.items():
                    page.goto(f"http://127.0.0.1:{port}{path}")
                    page.wait_for_timeout(300)  # app.js has turned times relative
                    shot = SHOTS / f"{name}-{scheme}.png"
                    page.screenshot(path=str(shot), full_page=True)
                    if scheme == "light" and name in ("overview", "job"):
                        page.screenshot(path=str(DOCS / f"dashboard-{name}.png"),
                                        full_page=True)
                page.close()
            browser.close()
    finally:
        server.should_exit = True
        thread.join(10)
        queue.resume(FLAKY)
        worker.stop(timeout=10)
        store.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else
         os.environ.get("GOLEMQ_DSN", "postgresql://postgres@127.0.0.1:5432/test"))
