"""Contract: the dashboard's verbs (overview counts and caps, throughput, keyset pages of
jobs, dead letters grouped by type and error and their bulk retry, resource-pool state)."""

from __future__ import annotations

from datetime import timedelta

from golemq_pg._types import JobStatus, Resource
from golemq_pg._validation import encode_payload
from golemq_pg.store.dashboard import JobQuery
from golemq_pg.store.port import EnqueueParams, FailItem, JobStore
from tests.support.store_port import add, claim, refs, slots


def _fail(store: JobStore, job_type: str, error: str, n: int = 1) -> list[str]:
    """Add ``n`` jobs of ``job_type`` and dead-letter them with ``error``."""
    made = [add(store, job_type) for _ in range(n)]
    jobs = claim(store, slots(job_type, limit=n), owner="w1")
    assert sorted(j.id for j in jobs) == sorted(made)
    store.job_fail_many("w1", [FailItem(j.id, j.lease_token, error) for j in jobs])
    return made


def test_overview_counts_each_type_by_bucket_and_caps_them(store: JobStore) -> None:
    for _ in range(3):
        add(store, "mail")
    add(store, "mail", delay=3600)
    add(store, "report")
    (running,) = claim(store, slots("report", limit=1))
    _fail(store, "crash", "Boom: no", n=2)
    add(store, "done")
    store.job_complete_many("w1", refs(claim(store, slots("done", limit=1))))
    overview = store.dashboard_overview(cap=2)
    by_type = {t.type: t for t in overview.types}
    assert set(by_type) == {"mail", "report", "crash"}  # "done" has nothing live or failed
    mail = by_type["mail"]
    assert (mail.due, mail.scheduled, mail.running, mail.failed) == (2, 1, 0, 0)  # 3 due, capped
    assert mail.oldest_due_age is not None
    assert mail.oldest_due_age >= 0
    assert (by_type["report"].running, by_type["report"].due) == (1, 0)
    assert by_type["report"].oldest_due_age is None
    assert by_type["crash"].failed == 2
    assert overview.cap == 2
    assert overview.by_status[JobStatus.SUCCEEDED] == 1
    assert overview.by_status[JobStatus.RUNNING] == 1
    assert overview.by_status[JobStatus.FAILED] == 2
    assert overview.by_status[JobStatus.PENDING] == 3
    assert running.type == "report"


def test_throughput_counts_finished_jobs_in_the_current_minute(store: JobStore) -> None:
    add(store, "a")
    add(store, "a")
    jobs = claim(store, slots("a", limit=2))
    store.job_complete_many("w1", refs(jobs[:1]))
    store.job_fail_many("w1", [FailItem(jobs[1].id, jobs[1].lease_token, "E: x")])
    minutes = store.dashboard_throughput(60)
    assert len(minutes) == 60
    assert [m.at for m in minutes] == sorted(m.at for m in minutes)
    assert minutes[-1].at - minutes[0].at == timedelta(minutes=59)
    assert sum(m.succeeded for m in minutes) == 1
    assert sum(m.failed for m in minutes) == 1
    now = store.now()
    assert minutes[-1].at <= now < minutes[-1].at + timedelta(minutes=1, seconds=1)


def test_type_finishes_rank_types_by_jobs_finished_today(store: JobStore) -> None:
    for _ in range(3):
        add(store, "busy")
    store.job_complete_many("w1", refs(claim(store, slots("busy", limit=3))))
    _fail(store, "busy", "E: x")
    add(store, "quiet")
    store.job_complete_many("w1", refs(claim(store, slots("quiet", limit=1))))
    add(store, "waiting")  # nothing finished: not listed
    ranked = store.dashboard_type_finishes(10)
    assert [(t.type, t.succeeded, t.failed) for t in ranked] == [
        ("busy", 3, 1), ("quiet", 1, 0)
    ]
    assert [t.type for t in store.dashboard_type_finishes(1)] == ["busy"]


def test_jobs_pages_are_newest_first_and_follow_the_cursor(store: JobStore) -> None:
    made = [add(store, "page") for _ in range(5)]
    add(store, "other")
    first = store.dashboard_jobs(JobQuery(type="page", limit=2))
    assert [j.id for j in first.jobs] == [made[4], made[3]]
    assert first.next_after == made[3]
    second = store.dashboard_jobs(JobQuery(type="page", limit=2, after=first.next_after))
    assert [j.id for j in second.jobs] == [made[2], made[1]]
    third = store.dashboard_jobs(JobQuery(type="page", limit=2, after=second.next_after))
    assert [j.id for j in third.jobs] == [made[0]]
    assert third.next_after is None


def test_jobs_page_scans_a_bounded_window_and_hands_on_a_cursor(store: JobStore) -> None:
    wanted = add(store, "rare")
    for _ in range(6):
        add(store, "common")
    page = store.dashboard_jobs(JobQuery(type="rare", limit=2, window=3))
    assert page.jobs == ()
    assert page.next_after is not None  # older ids exist below the window
    found = []
    cursor: str | None = page.next_after
    while cursor is not None:
        page = store.dashboard_jobs(JobQuery(type="rare", limit=2, window=3, after=cursor))
        found += [j.id for j in page.jobs]
        cursor = page.next_after
    assert found == [wanted]


def test_jobs_filters_by_status_scope_tag_and_id(store: JobStore) -> None:
    tagged = store.job_enqueue(
        EnqueueParams(type="t", payload=encode_payload("t", {}), tags=("blue", "x"))
    ).id
    scoped = add(store, "t", scope=("Article", "7"))
    failed = _fail(store, "f", "E: y")[0]
    assert tagged is not None
    assert [j.id for j in store.dashboard_jobs(JobQuery(tag="blue")).jobs] == [tagged]
    got = store.dashboard_jobs(JobQuery(scope_type="Article", scope_id="7")).jobs
    assert [j.id for j in got] == [scoped]
    got = store.dashboard_jobs(JobQuery(status=JobStatus.FAILED)).jobs
    assert [j.id for j in got] == [failed]
    assert [j.id for j in store.dashboard_jobs(JobQuery(job_id=scoped)).jobs] == [scoped]
    assert store.dashboard_jobs(JobQuery(job_id=scoped, type="other")).jobs == ()
    assert store.dashboard_jobs(JobQuery(job_id="not-a-number")).jobs == ()
    assert store.dashboard_jobs(JobQuery(after="garbage", tag="blue")).jobs[0].id == tagged


def test_jobs_search_matches_a_type_substring_error_text_or_an_exact_id(
    store: JobStore,
) -> None:
    mail = add(store, "Mail.Send")
    broken = _fail(store, "report", "TimeoutError: upstream SLOW")[0]
    other = add(store, "thumbnail")
    assert [j.id for j in store.dashboard_jobs(JobQuery(search="mail.s")).jobs] == [mail]
    assert [j.id for j in store.dashboard_jobs(JobQuery(search="slow")).jobs] == [broken]
    # The search is the filters' AND: failed jobs whose type or error holds "e".
    got = store.dashboard_jobs(JobQuery(search="e", status=JobStatus.FAILED)).jobs
    assert [j.id for j in got] == [broken]
    by_id = store.dashboard_jobs(JobQuery(search=other)).jobs
    assert other in [j.id for j in by_id]
    assert by_id[0].id == other  # the exact id first
    assert store.dashboard_jobs(JobQuery(search="no such text")).jobs == ()
    page = store.dashboard_jobs(JobQuery(search="mail"))
    assert page.scanned is not None
    assert int(page.scanned[0]) <= int(mail) <= int(page.scanned[1])
    # A search that names an id outside the scanned window still finds that job.
    far = store.dashboard_jobs(JobQuery(search=mail, window=1)).jobs
    assert [j.id for j in far][:1] == [mail]


def test_jobs_scheduled_filter_keeps_pending_jobs_due_later(store: JobStore) -> None:
    add(store, "s")
    later = add(store, "s", delay=3600)
    got = store.dashboard_jobs(JobQuery(status=JobStatus.PENDING, scheduled=True)).jobs
    assert [j.id for j in got] == [later]


def test_jobs_pages_go_back_with_the_before_cursor(store: JobStore) -> None:
    made = [add(store, "p") for _ in range(5)]
    first = store.dashboard_jobs(JobQuery(type="p", limit=2))
    assert first.prev_before is None  # the newest page has nothing newer
    second = store.dashboard_jobs(JobQuery(type="p", limit=2, after=first.next_after))
    assert [j.id for j in second.jobs] == [made[2], made[1]]
    assert second.prev_before is not None
    back = store.dashboard_jobs(JobQuery(type="p", limit=2, before=second.prev_before))
    assert [j.id for j in back.jobs] == [made[4], made[3]]  # newest first, as the first page
    assert back.next_after is not None
    again = store.dashboard_jobs(JobQuery(type="p", limit=2, after=back.next_after))
    assert [j.id for j in again.jobs] == [made[2], made[1]]
    above = store.dashboard_jobs(JobQuery(type="p", limit=2, before=made[0]))
    assert [j.id for j in above.jobs] == [made[2], made[1]]
    assert above.prev_before == made[2]
    top = store.dashboard_jobs(JobQuery(type="p", limit=2, before=str(2**63 - 1)))
    assert top.jobs == ()


def test_job_ids_of_a_filter_are_newest_first_and_capped(store: JobStore) -> None:
    failed = _fail(store, "f", "E: one", n=3)
    add(store, "f")
    got = store.dashboard_job_ids(JobQuery(status=JobStatus.FAILED), cap=2)
    assert got == sorted(failed, key=int, reverse=True)[:2]
    assert store.dashboard_job_ids(JobQuery(search="e: ONE")) == sorted(
        failed, key=int, reverse=True)
    assert store.dashboard_job_ids(JobQuery(type="none")) == []


def test_dead_letters_group_by_type_and_error_largest_first(store: JobStore) -> None:
    _fail(store, "a", "Boom: one", n=3)
    _fail(store, "a", "Boom: two")
    newest = _fail(store, "b", "Boom: one", n=2)
    letters = store.dashboard_dead_letters()
    groups = [(g.type, g.error, g.count) for g in letters.groups]
    assert groups == [("a", "Boom: one", 3), ("b", "Boom: one", 2), ("a", "Boom: two", 1)]
    assert letters.groups[1].newest_id == max(newest, key=int)
    assert letters.groups[0].last_failed_at is not None
    assert not letters.capped
    capped = store.dashboard_dead_letters(cap=2)
    assert capped.capped
    assert sum(g.count for g in capped.groups if g.type == "a") == 2


def test_retry_dead_letters_revives_only_the_matching_group(store: JobStore) -> None:
    ones = _fail(store, "a", "Boom: one", n=2)
    two = _fail(store, "a", "Boom: two")
    other = _fail(store, "b", "Boom: one")
    assert store.dashboard_retry_dead_letters("a", "Boom: one") == 2
    for job_id in ones:
        job = store.job_get(job_id)
        assert job is not None
        assert (job.status, job.attempts, job.last_error) == (JobStatus.PENDING, 0, None)
    for job_id in two + other:
        job = store.job_get(job_id)
        assert job is not None
        assert job.status is JobStatus.FAILED
    assert store.dashboard_retry_dead_letters("a", "Boom: one") == 0
    assert store.dashboard_retry_dead_letters("nope", None) == 0


def test_pools_show_window_spend_and_in_use_cost(store: JobStore) -> None:
    pool = Resource(concurrency=5, rate_per_minute=100, types=("api",), costs={"api": 2},
                    rate_costs={"api": 3})
    add(store, "api")
    add(store, "api")
    jobs = claim(store, slots("api", limit=2), resources={"ext": pool})
    assert len(jobs) == 2
    (state,) = store.dashboard_pools({"ext": pool})
    assert (state.name, state.spent, state.in_use, state.concurrency) == ("ext", 6, 4, 5)
    assert state.window_start is not None
    # Without the membership the database still knows the budget, not the use.
    (bare,) = store.dashboard_pools({})
    assert (bare.name, bare.spent, bare.in_use) == ("ext", 6, None)
    store.job_complete_many("w1", refs(jobs))
    assert store.dashboard_pools({"ext": pool})[0].in_use == 0
    assert [p.name for p in store.dashboard_pools({"idle": Resource(concurrency=1)})] == [
        "ext", "idle"
    ]
