"""The jobs page's search and bulk actions in a real headless Chromium (Debian's package,
driven by Playwright) against ``golemq-pg web`` running as a process: a search, a bulk retry
of ticked rows, and a cancel's confirmation page and notice. Screenshots go to
tests/artifacts/browser/."""

from __future__ import annotations

from typing import Any

import pytest

from golemq_pg import JobStatus, PostgresStore, Queue
from golemq_pg.store.port import FailItem
from tests.support.browser import ARTIFACTS
from tests.support.store_port import add, claim, slots
from tests.support.web_server import web_process

pytest.importorskip("playwright.sync_api")


def _dead_letters(store: PostgresStore, job_type: str, error: str, n: int) -> list[str]:
    made = [add(store, job_type) for _ in range(n)]
    jobs = claim(store, slots(job_type, limit=n))
    store.job_fail_many("w1", [FailItem(j.id, j.lease_token, error) for j in jobs])
    return sorted(made, key=int)


def _status(store: PostgresStore, job_id: str) -> JobStatus | None:
    job = store.job_get(job_id)
    return None if job is None else job.status


def _row_ids(page: Any) -> list[str]:
    ids: list[str] = page.eval_on_selector_all(
        "#jobs tbody tr[data-id]", "rows => rows.map(r => r.dataset.id)")
    return ids


def test_search_finds_jobs_by_error_text_type_and_id(
    browser_page: Any, pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    page = browser_page
    (broken,) = _dead_letters(pg_store, "report.build", "KeyError: 'Column Seven'", 1)
    mail = Queue(pg_store).add("mail.send", {})
    assert mail is not None
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with web_process(pg_dsn, schema) as url:
        page.goto(url + "/jobs")
        page.fill("#q", "column seven")
        page.press("#q", "Enter")
        page.wait_for_url("**/jobs?*q=column+seven*")
        assert _row_ids(page) == [broken]
        assert "Searched the" in page.inner_text("#searched")
        page.screenshot(path=str(ARTIFACTS / "jobs-search.png"), full_page=True)
        page.fill("#q", "MAIL.")
        page.press("#q", "Enter")
        page.wait_for_url("**/jobs?*q=MAIL.*")
        assert _row_ids(page) == [mail]
        page.fill("#q", broken)
        page.press("#q", "Enter")
        page.wait_for_url(f"**/jobs?*q={broken}*")
        assert _row_ids(page)[0] == broken


def test_bulk_retry_of_ticked_rows_and_select_all(
    browser_page: Any, pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    page = browser_page
    failed = _dead_letters(pg_store, "report.build", "E: boom", 3)
    with web_process(pg_dsn, schema) as url:
        page.goto(url + "/jobs?status=failed")
        assert _row_ids(page) == list(reversed(failed))
        page.check(f'#jobs tr[data-id="{failed[0]}"] input.select')
        page.check(f'#jobs tr[data-id="{failed[2]}"] input.select')
        page.click("#bulk-retry")
        page.wait_for_url("**/jobs?status=failed&notice=*")
        assert "2 of 2 jobs retried." in page.inner_text(".notice")
        assert [_status(pg_store, i) for i in failed] == [
            JobStatus.PENDING, JobStatus.FAILED, JobStatus.PENDING]
        assert _row_ids(page) == [failed[1]]
        page.screenshot(path=str(ARTIFACTS / "jobs-bulk-retried.png"), full_page=True)
        # The header checkbox ticks every row of the page.
        page.goto(url + "/jobs?type=report.build")
        page.check("#select-all")
        ticked = page.eval_on_selector_all(
            "#jobs input.select", "boxes => boxes.filter(b => b.checked).length")
        assert ticked == 3


def test_cancel_asks_for_confirmation_then_shows_a_notice(
    browser_page: Any, pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    page = browser_page
    queue = Queue(pg_store)
    later = queue.add("mail.send", {}, delay=3600)
    assert later is not None
    with web_process(pg_dsn, schema) as url:
        page.goto(f"{url}/jobs/{later}")
        page.click("#cancel")
        page.wait_for_url(f"**/jobs/{later}/cancel")
        assert page.inner_text("#confirm-count") == later
        assert _status(pg_store, later) is JobStatus.PENDING  # asked, nothing changed yet
        page.screenshot(path=str(ARTIFACTS / "cancel-confirm.png"), full_page=True)
        page.click("#confirm")
        page.wait_for_url("**/jobs?notice=*")
        assert f"Job {later} cancelled." in page.inner_text(".notice")
        assert pg_store.job_get(later) is None
        # A bulk cancel asks too; "Go back" leaves every job alone.
        jobs = [queue.add("mail.send", {}) for _ in range(2)]
        page.goto(url + "/jobs?type=mail.send")
        page.check("#select-all")
        page.click("#bulk-cancel")
        page.wait_for_url("**/jobs/bulk")
        assert page.inner_text("#confirm-count") == "2"
        page.click("#confirm-back")
        page.wait_for_url("**/jobs?type=mail.send")
        assert all(_status(pg_store, str(i)) is JobStatus.PENDING for i in jobs)
