"""The schedules page's actions through httpx's ASGI transport on a real store: run a
schedule now, pause it (shown paused), resume it, each with a notice; unknown keys change
nothing; read-only mode refuses them."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

from golemq_pg import PostgresStore, Queue
from tests.support.web_client import Dashboard


def _notice(location: str) -> str:
    return parse_qs(urlsplit(location).query)["notice"][0]


def _paused(store: PostgresStore, key: str) -> bool:
    (found,) = [s for s in store.schedule_list() if s.key == key]
    return found.paused


def test_schedules_run_now_pause_and_resume_from_the_page(
    make_dashboard: Callable[..., Dashboard], pg_store: PostgresStore, web_queue: Queue
) -> None:
    dashboard = make_dashboard()
    web_queue.schedule("nightly/report", "report.build", {}, cron="0 3 * * *")
    page = dashboard.get("/schedules").text
    assert 'action="/schedules/nightly%2Freport/pause"' in page
    assert 'action="/schedules/nightly%2Freport/run-now"' in page
    ran = dashboard.post("/schedules/nightly%2Freport/run-now")
    assert ran.status_code == 303
    assert _notice(ran.headers["location"]) == "Schedule nightly/report enqueued to run now."
    assert web_queue.find(types=["report.build"])
    paused = dashboard.post("/schedules/nightly%2Freport/pause")
    assert _notice(paused.headers["location"]) == "Schedule nightly/report paused."
    assert _paused(pg_store, "nightly/report")
    page = dashboard.get(paused.headers["location"]).text
    assert '<span class="badge paused">paused</span>' in page
    assert "Schedule nightly/report paused." in page
    assert 'action="/schedules/nightly%2Freport/resume"' in page
    resumed = dashboard.post("/schedules/nightly%2Freport/resume")
    assert _notice(resumed.headers["location"]) == "Schedule nightly/report resumed."
    assert not _paused(pg_store, "nightly/report")
    missing = dashboard.post("/schedules/nope/pause")
    assert _notice(missing.headers["location"]) == "Schedule nope not found or already paused."
    assert dashboard.post("/schedules/x/explode").status_code == 400
    read_only = make_dashboard(read_only=True)
    assert read_only.post("/schedules/nightly%2Freport/pause").status_code == 403
    assert 'action="/schedules/' not in read_only.get("/schedules").text
    assert not _paused(pg_store, "nightly/report")
