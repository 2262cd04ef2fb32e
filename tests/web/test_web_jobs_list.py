"""The dashboard's jobs list through httpx's ASGI transport on a real store: search,
status filters (scheduled, waiting), both-way paging, the live fragment, the duration
column and the flag on types whose due jobs no live worker handles."""

from __future__ import annotations

import re

from golemq_pg import PostgresStore, Queue
from golemq_pg.store.dashboard import SEARCH_SCAN_WINDOW
from golemq_pg.store.port import FailItem, WorkerBeat
from golemq_pg.web._pages import types_without_workers
from tests.support.store_port import add, claim, refs, slots
from tests.support.web_client import Dashboard


def _ids(html: str) -> list[str]:
    return re.findall(r'<tr data-id="(\d+)"', html)


def test_search_finds_a_job_by_id_type_substring_or_error_text(
    dashboard: Dashboard, pg_store: PostgresStore, web_queue: Queue
) -> None:
    mail = web_queue.add("Mail.Send", {})
    report = add(pg_store, "report.build")
    (job,) = claim(pg_store, slots("report.build", limit=1))
    pg_store.job_fail_many("w1", [FailItem(job.id, job.lease_token, "KeyError: 'Column X'")])
    other = web_queue.add("thumbnail", {})
    assert other is not None
    assert _ids(dashboard.get("/jobs", params={"q": "mail.se"}).text) == [mail]
    found = dashboard.get("/jobs", params={"q": "column x"})
    assert _ids(found.text) == [report]
    assert f"Searched the {SEARCH_SCAN_WINDOW:,} newest ids" in found.text
    assert _ids(dashboard.get("/jobs", params={"q": other}).text)[0] == other
    # Combined with the other filters, and kept by the page's links and live fragment.
    assert _ids(dashboard.get("/jobs", params={"q": "o", "status": "failed"}).text) == [report]
    live = dashboard.get("/jobs", params={"q": "mail", "fragment": "rows"})
    assert live.status_code == 200
    assert "<html" not in live.text
    assert _ids(live.text) == [mail]
    page = dashboard.get("/jobs", params={"q": "mail"}).text
    assert 'data-live="/jobs?q=mail&amp;fragment=rows"' in page
    assert dashboard.get("/jobs", params={"q": "x" * 201}).status_code == 400


def test_status_filter_scheduled_keeps_future_pending_jobs_and_waiting_the_waiting_ones(
    dashboard: Dashboard, web_queue: Queue
) -> None:
    due = web_queue.add("t", {})
    later = web_queue.add("t", {}, delay=3600)
    scheduled = dashboard.get("/jobs", params={"status": "scheduled"})
    assert _ids(scheduled.text) == [later]
    assert 'class="status status-scheduled"' in scheduled.text
    pending = dashboard.get("/jobs", params={"status": "pending"})
    assert _ids(pending.text) == [later, due]
    assert 'class="status status-pending"' in pending.text
    waiting = dashboard.get("/jobs", params={"status": "waiting"})
    assert waiting.status_code == 200
    assert _ids(waiting.text) == []
    held = web_queue.add("t", {}, depends_on=[due])
    waiting = dashboard.get("/jobs", params={"status": "waiting"})
    assert _ids(waiting.text) == [held]
    assert 'class="status status-waiting"' in waiting.text
    assert _ids(dashboard.get("/jobs", params={"status": "pending"}).text) == [later, due]
    assert '<option value="waiting"' in waiting.text
    assert '<option value="scheduled"' in waiting.text


def test_jobs_pages_link_older_and_newer_and_round_trip(
    dashboard: Dashboard, web_queue: Queue
) -> None:
    made = [web_queue.add("p", {}) for _ in range(120)]
    first = dashboard.get("/jobs", params={"type": "p"}).text
    assert _ids(first) == list(reversed(made[70:]))
    assert "← Newer" not in first
    older = re.search(r'class="older" rel="next" href="([^"]+)"', first)
    assert older is not None
    second = dashboard.get(older.group(1).replace("&amp;", "&")).text
    assert _ids(second) == list(reversed(made[20:70]))
    newer = re.search(r'class="newer" rel="prev" href="([^"]+)"', second)
    assert newer is not None
    assert "before=" in newer.group(1)
    back = dashboard.get(newer.group(1).replace("&amp;", "&")).text
    assert _ids(back) == _ids(first)
    assert dashboard.get("/jobs", params={"after": "5", "before": "3"}).status_code == 400
    assert dashboard.get("/jobs", params={"before": "x"}).status_code == 400


def test_jobs_list_shows_durations_and_times_as_time_elements(
    dashboard: Dashboard, pg_store: PostgresStore
) -> None:
    done = add(pg_store, "d")
    pg_store.job_complete_many("w1", refs(claim(pg_store, slots("d", limit=1))))
    running = add(pg_store, "r")
    claim(pg_store, slots("r", limit=1))
    html = dashboard.get("/jobs").text
    row = html.split(f'data-id="{done}"')[1].split("</tr>")[0]
    assert re.search(r'<td class="duration">\d+ ms</td>', row), row
    assert re.search(r'<time datetime="\d{4}-\d\d-\d\dT[0-9:.]+Z">', row), row
    row = html.split(f'data-id="{running}"')[1].split("</tr>")[0]
    assert '<td class="duration">running for ' in row, row


def test_types_with_due_jobs_and_no_live_worker_are_flagged(
    dashboard: Dashboard, pg_store: PostgresStore, web_queue: Queue
) -> None:
    web_queue.add("orphan", {})
    web_queue.add("served", {})
    web_queue.add("later", {}, delay=3600)  # nothing due: not flagged
    pg_store.worker_heartbeat(WorkerBeat("w-1", "host-a", 42, {"served": 1}, 5.0))
    page = dashboard.get("/jobs").text
    flagged = re.findall(r'class="unhandled" data-type="([^"]+)"', page)
    assert flagged == ["orphan"]
    overview = pg_store.dashboard_overview()
    assert types_without_workers(overview.types, pg_store.worker_list()) == ["orphan"]
    assert 'data-type="orphan"' in dashboard.get("/failed").text
