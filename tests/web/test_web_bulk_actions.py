"""The jobs page's bulk actions (``POST /jobs/bulk``) through httpx's ASGI transport on a
real store: on selected ids or on every job matching a filter (bounded), confirmation
before anything destructive or filter-wide, the notice after, and refusals."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

from golemq_pg import JobStatus, PostgresStore, Queue
from golemq_pg.store.port import FailItem
from golemq_pg.web._actions import MAX_BULK_IDS
from tests.support.store_port import add, claim, slots
from tests.support.web_client import Dashboard


def _dead_letters(store: PostgresStore, job_type: str, n: int) -> list[str]:
    made = [add(store, job_type) for _ in range(n)]
    jobs = claim(store, slots(job_type, limit=n))
    store.job_fail_many("w1", [FailItem(j.id, j.lease_token, "E: boom") for j in jobs])
    return made


def _status(store: PostgresStore, job_id: str) -> JobStatus | None:
    job = store.job_get(job_id)
    return None if job is None else job.status


def _notice(location: str) -> str:
    return parse_qs(urlsplit(location).query)["notice"][0]


def test_bulk_retry_of_selected_ids_retries_them_and_says_how_many(
    dashboard: Dashboard, pg_store: PostgresStore, web_queue: Queue
) -> None:
    failed = _dead_letters(pg_store, "t", 3)
    live = web_queue.add("t", {})
    assert live is not None
    form = {"action": "retry", "ids": [failed[0], failed[1], live], "type": "t"}
    answer = dashboard.request("POST", "/jobs/bulk", data=form,
                               headers={"origin": "http://localhost"})
    assert answer.status_code == 303
    location = answer.headers["location"]
    assert location.startswith("/jobs?type=t&notice=")
    assert _notice(location).startswith("2 of 3 jobs retried.")
    assert [_status(pg_store, i) for i in failed] == [
        JobStatus.PENDING, JobStatus.PENDING, JobStatus.FAILED]
    assert "2 of 3 jobs retried." in dashboard.get(location).text


def test_bulk_cancel_asks_first_then_cancels(
    dashboard: Dashboard, pg_store: PostgresStore, web_queue: Queue
) -> None:
    jobs = [web_queue.add("c", {}) for _ in range(2)]
    form: dict[str, object] = {"action": "cancel", "ids": jobs, "q": "c"}
    headers = {"origin": "http://localhost"}
    ask = dashboard.request("POST", "/jobs/bulk", data=form, headers=headers)
    assert ask.status_code == 200
    assert '<strong id="confirm-count">2</strong>' in ask.text
    for job_id in jobs:
        assert f'name="ids" value="{job_id}"' in ask.text
        assert _status(pg_store, job_id) is JobStatus.PENDING  # nothing yet
    assert 'name="confirm" value="1"' in ask.text
    assert 'name="q" value="c"' in ask.text
    done = dashboard.request("POST", "/jobs/bulk", data={**form, "confirm": "1"},
                             headers=headers)
    assert done.status_code == 303
    assert _notice(done.headers["location"]) == "2 of 2 jobs cancelled."
    assert all(_status(pg_store, i) is None for i in jobs)


def test_bulk_with_all_acts_on_the_filter_after_confirmation(
    dashboard: Dashboard, pg_store: PostgresStore, web_queue: Queue
) -> None:
    wanted = _dead_letters(pg_store, "a", 3)
    other = _dead_letters(pg_store, "b", 1)
    form = {"action": "retry", "all": "1", "type": "a", "status": "failed"}
    ask = dashboard.post("/jobs/bulk", form)
    assert ask.status_code == 200
    assert '<strong id="confirm-count">3</strong>' in ask.text
    assert all(_status(pg_store, i) is JobStatus.FAILED for i in wanted)
    done = dashboard.post("/jobs/bulk", {**form, "confirm": "1"})
    assert done.status_code == 303
    assert _notice(done.headers["location"]) == "3 of 3 jobs retried."
    assert all(_status(pg_store, i) is JobStatus.PENDING for i in wanted)
    assert _status(pg_store, other[0]) is JobStatus.FAILED
    # run-now on every scheduled job of a search
    later = web_queue.add("mail", {}, delay=3600)
    form = {"action": "run-now", "all": "1", "status": "scheduled", "q": "mai", "confirm": "1"}
    done = dashboard.post("/jobs/bulk", form)
    assert _notice(done.headers["location"]) == "1 of 1 job made due now."
    job = pg_store.job_get(str(later))
    assert job is not None
    assert job.run_at <= pg_store.now()


def test_bulk_refuses_bad_fields_and_changes_nothing(
    make_dashboard: Callable[..., Dashboard], pg_store: PostgresStore
) -> None:
    dashboard = make_dashboard()
    (failed,) = _dead_letters(pg_store, "t", 1)
    bad = [
        {"action": "explode", "ids": failed},
        {"ids": failed},
        {"action": "retry", "ids": "12x"},
        {"action": "retry", "ids": "99999999999999999999"},
        {"action": "retry", "all": "1", "status": "sleeping"},
        {"action": "retry", "all": "1", "tag": "<b>"},
    ]
    for form in bad:
        answer = dashboard.post("/jobs/bulk", form)
        assert answer.status_code == 400, form
    too_many = {"action": "retry", "ids": [str(i) for i in range(1, MAX_BULK_IDS + 2)]}
    answer = dashboard.request("POST", "/jobs/bulk", data=too_many,
                               headers={"origin": "http://localhost"})
    assert answer.status_code == 400
    assert _status(pg_store, failed) is JobStatus.FAILED
    none = dashboard.post("/jobs/bulk", {"action": "retry"})
    assert none.status_code == 303
    assert _notice(none.headers["location"]).startswith("No job selected")
    # Another origin, or read-only mode: 403, nothing changed.
    assert dashboard.post("/jobs/bulk", {"action": "retry", "ids": failed, "confirm": "1"},
                          origin="http://evil.test").status_code == 403
    read_only = make_dashboard(read_only=True)
    assert read_only.post("/jobs/bulk", {"action": "retry", "ids": failed}).status_code == 403
    assert _status(pg_store, failed) is JobStatus.FAILED


def test_bulk_on_a_filter_that_cannot_be_applied_is_refused_never_widened(
    dashboard: Dashboard, pg_store: PostgresStore
) -> None:
    (chosen,) = _dead_letters(pg_store, "chosen", 1)
    others = _dead_letters(pg_store, "other", 3)
    # Each filter value the jobs page cannot use: the action is refused (400, the field
    # named), never run on every job as if the field had not been posted.
    unusable = {"type": "chosen\x00", "tag": "x" * 256, "q": "y" * 201, "scope_id": "1\x00",
                "status": "failed\x00"}
    for field, value in unusable.items():
        for confirm in ({}, {"confirm": "1"}):
            form = {"action": "retry", "all": "1", "type": "chosen", field: value, **confirm}
            answer = dashboard.post("/jobs/bulk", form)
            assert answer.status_code == 400, field
            assert f"{field} must" in answer.text, field
            assert "filter: none" not in answer.text
    assert all(_status(pg_store, i) is JobStatus.FAILED for i in [chosen, *others])
    # The same filter, usable, acts on the chosen type's dead letter alone.
    done = dashboard.post("/jobs/bulk", {"action": "retry", "all": "1", "type": "chosen",
                                         "status": "failed", "confirm": "1"})
    assert done.status_code == 303
    assert _status(pg_store, chosen) is JobStatus.PENDING
    assert all(_status(pg_store, i) is JobStatus.FAILED for i in others)


def test_jobs_page_has_row_checkboxes_select_all_and_bulk_buttons(
    make_dashboard: Callable[..., Dashboard], web_queue: Queue
) -> None:
    job_id = web_queue.add("t", {})
    html = make_dashboard().get("/jobs", params={"type": "t"}).text
    assert f'name="ids" value="{job_id}" form="bulk"' in html
    assert 'id="select-all"' in html
    for action in ("retry", "run-now", "cancel", "delete"):
        assert f'name="action" value="{action}"' in html
    assert '<input type="hidden" name="type" value="t">' in html
    read_only = make_dashboard(read_only=True).get("/jobs").text
    assert 'name="ids"' not in read_only
    assert 'action="/jobs/bulk"' not in read_only


def test_bulk_delete_removes_finished_jobs_after_confirmation(
    dashboard: Dashboard, pg_store: PostgresStore
) -> None:
    failed = _dead_letters(pg_store, "d", 2)
    form: dict[str, object] = {"action": "delete", "ids": failed}
    headers = {"origin": "http://localhost"}
    ask = dashboard.request("POST", "/jobs/bulk", data=form, headers=headers)
    assert ask.status_code == 200
    assert all(_status(pg_store, i) is JobStatus.FAILED for i in failed)
    done = dashboard.request("POST", "/jobs/bulk", data={**form, "confirm": "1"},
                             headers=headers)
    assert _notice(done.headers["location"]) == "2 of 2 jobs deleted."
    assert all(pg_store.job_get(i) is None for i in failed)
