"""The overview and job pages' presentation through httpx's ASGI transport on a real store:
status colours, times as ``<time>`` elements, the charts' axes and finishes per type, the
flag on types no live worker handles, and the job page's live fragment (refreshed while the
job is live, told to stop once it finished)."""

from __future__ import annotations

import re

from golemq_pg import PostgresStore, Queue
from golemq_pg.store.port import FailItem, WorkerBeat
from tests.support.store_port import add, claim, refs, slots
from tests.support.web_client import Dashboard


def test_overview_flags_due_types_no_live_worker_handles(
    dashboard: Dashboard, pg_store: PostgresStore, web_queue: Queue
) -> None:
    web_queue.add("mail.send", {})
    web_queue.add("orphan.type", {})
    web_queue.add("later.only", {}, delay=3600)  # nothing due: not flagged
    pg_store.worker_heartbeat(WorkerBeat("w-1", "host-a", 42, {"mail.send": 4}, 5.0))
    html = dashboard.get("/").text
    alert = html.split('id="unattended"')[1].split("</div>")[0]
    assert "orphan.type" in alert
    assert "mail.send" not in alert
    assert "later.only" not in alert
    row = html.split('data-type="orphan.type"')[1].split("</tr>")[0]
    assert "no worker" in row
    web_queue.pause("orphan.type", "on purpose")
    assert 'id="unattended"' not in dashboard.get("/?fragment=live").text


def test_overview_draws_axes_a_legend_and_finishes_per_type(
    dashboard: Dashboard, pg_store: PostgresStore
) -> None:
    for _ in range(3):
        add(pg_store, "busy")
    pg_store.job_complete_many("w1", refs(claim(pg_store, slots("busy", limit=3))))
    add(pg_store, "crash")
    (job,) = claim(pg_store, slots("crash", limit=1))
    pg_store.job_fail_many("w1", [FailItem(job.id, job.lease_token, "E: x")])
    html = dashboard.get("/?fragment=live").text
    chart = html.split("<svg viewBox=")[1].split("</svg>")[0]
    assert re.findall(r'<text class="tick"[^>]*>([^<]+)</text>', chart)[:2] == ["0", "1"]
    assert re.search(r'text-anchor="middle">\d\d:\d0</text>', chart)  # x axis: HH:M0
    assert 'class="swatch swatch-succeeded"' in html
    assert 'class="swatch swatch-failed"' in html
    finishes = html.split('id="type-finishes"')[1].split("</table>")[0]
    assert finishes.index("busy") < finishes.index("crash")  # most finished first
    assert 'aria-label="3 succeeded, 0 failed"' in finishes
    assert 'class="card card-failed"' in html


def test_workers_and_paused_times_are_time_elements_with_utc_text(
    dashboard: Dashboard, pg_store: PostgresStore, web_queue: Queue
) -> None:
    pg_store.worker_heartbeat(WorkerBeat("w-1", "host-a", 42, {"mail.send": 4}, 5.0))
    web_queue.pause("mail.send", "deploying")
    for path in ("/", "/workers"):
        html = dashboard.get(path).text
        assert re.search(
            r'<time datetime="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z">'
            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time>", html), path
        assert 'class="status status-running"' in html, path


def test_a_live_jobs_page_refreshes_from_its_fragment_until_the_job_finishes(
    dashboard: Dashboard, pg_store: PostgresStore
) -> None:
    job_id = add(pg_store, "work", {"secret": "hunter2"})
    page = dashboard.get(f"/jobs/{job_id}").text
    assert f'data-live="/jobs/{job_id}/live"' in page
    (job,) = claim(pg_store, slots("work", limit=1))
    running = dashboard.get(f"/jobs/{job_id}/live")
    assert running.status_code == 200
    assert "<html" not in running.text
    assert 'id="job-status">running<' in running.text
    assert 'class="status status-running"' in running.text
    assert "data-live-stop" not in running.text
    assert "running for" in running.text
    pg_store.job_complete_many("w1", refs([job]))
    done = dashboard.get(f"/jobs/{job_id}/live").text
    assert 'id="job-status">succeeded<' in done
    assert "data-live-stop" in done  # the page's script stops polling
    assert 'data-attempt="1"' in done
    assert "hunter2" not in done
    assert "data-live=" not in dashboard.get(f"/jobs/{job_id}").text


def test_a_job_due_later_shows_as_scheduled_and_its_next_attempt(
    dashboard: Dashboard, web_queue: Queue
) -> None:
    job_id = web_queue.add("mail.send", {}, delay=3600)
    html = dashboard.get(f"/jobs/{job_id}").text
    assert 'id="job-status">scheduled<' in html
    assert "first attempt" in html
    assert 'id="run-now"' in html


def test_the_job_fragment_answers_404_for_unknown_or_bad_ids(dashboard: Dashboard) -> None:
    for path in ("/jobs/999999/live", "/jobs/abc/live", "/jobs/99999999999999999999/live"):
        assert dashboard.get(path).status_code == 404, path
