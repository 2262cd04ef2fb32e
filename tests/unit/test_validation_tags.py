"""Tags and statuses as inputs: the rules checked before any SQL."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from golemq_pg import InMemoryStore, JobStatus, QueueConfigError, Retention, Worker
from golemq_pg._validation import (
    MAX_TAG_LENGTH,
    MAX_TAGS,
    check_status,
    check_statuses,
    check_tags,
)

TAG_RULE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
TAG_ALPHABET = "abcXYZ019_.:-"
good_tags = st.text(alphabet=TAG_ALPHABET, min_size=1, max_size=MAX_TAG_LENGTH)


@given(st.lists(good_tags, max_size=MAX_TAGS))
def test_valid_tags_are_kept_in_order_with_duplicates_collapsed(tags: list[str]) -> None:
    checked = check_tags(tags)
    expected = tuple(dict.fromkeys(tags))
    assert checked == (expected or None)


@given(st.lists(st.text(max_size=80), min_size=1, max_size=20))
def test_tags_pass_exactly_when_every_tag_matches_the_rule(tags: list[str]) -> None:
    valid = all(TAG_RULE.fullmatch(t) for t in tags) and len(set(tags)) <= MAX_TAGS
    if valid:
        assert check_tags(tags) == tuple(dict.fromkeys(tags))
    else:
        with pytest.raises(ValueError, match="tags"):
            check_tags(tags)


@pytest.mark.parametrize("bad", [
    "", "a b", "é", "a/b", "x" * (MAX_TAG_LENGTH + 1), "tab\t", "new\nline", "a,b", '"q"',
])
def test_a_bad_tag_is_refused_without_quoting_it(bad: str) -> None:
    with pytest.raises(ValueError, match=r"1-64 characters of \[A-Za-z0-9_\.:-\]") as info:
        check_tags(["ok", bad])
    if bad:
        assert bad not in str(info.value)


def test_at_most_sixteen_distinct_tags() -> None:
    assert check_tags([f"t{i}" for i in range(MAX_TAGS)]) is not None
    assert check_tags(["same"] * 40) == ("same",)
    with pytest.raises(ValueError, match="at most 16 tags"):
        check_tags([f"t{i}" for i in range(MAX_TAGS + 1)])


@pytest.mark.parametrize("bad", ["billing", b"billing", 7, [1], [None], ("ok", b"eu")])
def test_tags_must_be_an_iterable_of_strings(bad: object) -> None:
    with pytest.raises(ValueError, match="tags"):
        check_tags(bad)


def test_no_tags_is_none() -> None:
    assert check_tags(None) is None
    assert check_tags([]) is None
    assert check_tags(()) is None


@pytest.mark.parametrize("given_status", ["FAILED", "failed", "Failed", " failed ",
                                          JobStatus.FAILED])
def test_statuses_are_accepted_in_any_case(given_status: object) -> None:
    assert check_status(given_status) is JobStatus.FAILED


def test_an_unknown_status_names_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="pending, running, succeeded, failed"):
        check_status("done")
    with pytest.raises(ValueError, match="unknown job status"):
        check_status(3)
    with pytest.raises(ValueError, match="unknown job status"):
        check_statuses(["failed", "DONE"])


def test_a_list_of_statuses_collapses_duplicates() -> None:
    assert check_statuses(["FAILED", "failed", JobStatus.SUCCEEDED]) == [
        JobStatus.FAILED, JobStatus.SUCCEEDED]
    assert check_statuses("Pending") == [JobStatus.PENDING]


def test_retention_statuses_are_case_insensitive() -> None:
    worker = Worker(InMemoryStore(), retention=Retention(older_than=60,
                                                         statuses=("FAILED", "Succeeded")))
    assert worker.config.retention is not None
    assert worker.config.retention.statuses == (JobStatus.FAILED, JobStatus.SUCCEEDED)
    with pytest.raises(QueueConfigError, match="pending, running, succeeded, failed"):
        Worker(InMemoryStore(), retention=Retention(older_than=60, statuses=("done",)))
