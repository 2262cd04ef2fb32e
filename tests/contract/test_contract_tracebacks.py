"""Contract: each failed attempt keeps the traceback it was written with (RetryItem /
FailItem ``traceback``), bounded to its last 16 KiB, in its own history entry; attempts
written without one (and the reaper's) have none; retry_failed keeps them."""

from __future__ import annotations

from golemq_pg._errortext import TRACEBACK_CUT, TRACEBACK_LIMIT
from golemq_pg._types import JobStatus
from golemq_pg.store.port import FailItem, FindParams, JobStore, RetryItem
from tests.support.store_port import SHORT_LEASE, add, claim, slots
from tests.support.waiting import wait_until

TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/app/handlers.py", line 12, in send_email\n'
    "    raise ValueError('smtp said no')\n"
    "ValueError: smtp said no\n"
)


def test_retry_and_fail_keep_each_attempts_traceback(store: JobStore) -> None:
    job_id = add(store, "a", max_attempts=3)
    (first,) = claim(store, "a", owner="w1")
    retry = RetryItem(job_id, first.lease_token, 0, "ValueError: smtp said no", traceback=TRACE)
    assert store.job_retry_many("w1", [retry]) == {job_id}
    (second,) = claim(store, "a", owner="w1")
    assert store.job_retry_many("w1", [RetryItem(job_id, second.lease_token, 0, "E: no trace")])
    (third,) = claim(store, "a", owner="w1")
    fail = FailItem(job_id, third.lease_token, "KeyError: 'x'", traceback="KeyError: 'x'\n")
    assert store.job_fail_many("w1", [fail]) == {job_id}
    summary = store.job_get(job_id)
    assert summary is not None
    assert summary.status is JobStatus.FAILED
    assert [(e.attempt, e.traceback) for e in summary.errors] == [
        (1, TRACE), (2, None), (3, "KeyError: 'x'\n")
    ]
    assert summary.last_error == "KeyError: 'x'"  # never the traceback
    # a dead letter retried keeps its history, tracebacks included
    assert store.job_retry_failed(FindParams(types=["a"], limit=None)) == 1
    revived = store.job_get(job_id)
    assert revived is not None
    assert [e.traceback for e in revived.errors] == [TRACE, None, "KeyError: 'x'\n"]


def test_a_long_traceback_keeps_its_last_16_kib(store: JobStore) -> None:
    head = "Traceback (most recent call last):\n"
    frames = "".join(f'  File "/app/deep.py", line {n}, in recurse\n    recurse(n)\n'
                     for n in range(2_000))
    tail = "RecursionError: maximum recursion depth exceeded \u00e9\u20ac\n"
    long_trace = head + frames + tail
    assert len(long_trace.encode()) > 4 * TRACEBACK_LIMIT
    retried, failed = add(store, "a"), add(store, "a")
    jobs = {job.id: job for job in claim(store, "a")}
    assert store.job_retry_many(
        "w1", [RetryItem(retried, jobs[retried].lease_token, 0, "E", traceback=long_trace)]
    ) == {retried}
    assert store.job_fail_many(
        "w1", [FailItem(failed, jobs[failed].lease_token, "E", traceback=long_trace)]
    ) == {failed}
    for job_id in (retried, failed):
        summary = store.job_get(job_id)
        assert summary is not None
        (entry,) = summary.errors
        kept = entry.traceback
        assert kept is not None
        assert len(kept.encode()) <= TRACEBACK_LIMIT
        assert len(kept.encode()) > TRACEBACK_LIMIT - 100  # cut, not emptied
        assert kept.startswith(TRACEBACK_CUT)
        assert kept.endswith(tail)  # the end kept: the innermost frames and the error
        assert long_trace.endswith(kept[len(TRACEBACK_CUT):])


def test_a_multibyte_traceback_is_cut_on_a_character(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = claim(store, "a")
    text = "\u20ac" * TRACEBACK_LIMIT  # 3 bytes each
    assert store.job_fail_many("w1", [FailItem(job_id, job.lease_token, "E", traceback=text)])
    summary = store.job_get(job_id)
    assert summary is not None
    kept = summary.errors[0].traceback
    assert kept is not None
    assert kept.startswith(TRACEBACK_CUT)
    assert set(kept[len(TRACEBACK_CUT):]) == {"\u20ac"}
    assert len(kept.encode()) <= TRACEBACK_LIMIT


def test_text_postgresql_refuses_is_kept_escaped(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = claim(store, "a")
    text = "ValueError: nul \x00 and a lone \udc80 surrogate\n"
    assert store.job_fail_many("w1", [FailItem(job_id, job.lease_token, "E", traceback=text)])
    summary = store.job_get(job_id)
    assert summary is not None
    assert summary.errors[0].traceback == "ValueError: nul \\x00 and a lone \\udc80 surrogate\n"


def test_the_reapers_attempts_have_no_traceback(store: JobStore) -> None:
    job_id = add(store, "a", max_attempts=2)
    (job,) = claim(store, "a")
    assert store.job_retry_many(
        "w1", [RetryItem(job_id, job.lease_token, 0, "E", traceback=TRACE)]
    ) == {job_id}
    claim(store, slots("a", lease=SHORT_LEASE), owner="lost")
    (exhausted,) = wait_until(store.lease_recover_expired)
    assert exhausted.outcome == "failed-terminal"
    summary = store.job_get(job_id)
    assert summary is not None
    assert [(e.worker_id, e.traceback) for e in summary.errors] == [("w1", TRACE), (None, None)]


def test_a_fenced_out_failure_writes_no_traceback(store: JobStore) -> None:
    job_id = add(store, "a")
    (job,) = claim(store, "a")
    stale = FailItem(job_id, job.lease_token + 1, "E", traceback=TRACE)
    assert store.job_fail_many("w1", [stale]) == set()
    summary = store.job_get(job_id)
    assert summary is not None
    assert (summary.status, summary.errors) == (JobStatus.RUNNING, ())
