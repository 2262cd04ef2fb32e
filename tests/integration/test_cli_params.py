"""The CLI's input parsing, in process (the subprocess tests cover the wiring)."""

from __future__ import annotations

import click
import pytest

from golemq_pg.cli.base import DURATION, SCOPE, parse_duration, parse_payload
from golemq_pg.cli.processes import TargetError, split_target


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0.0), ("90", 90.0), ("1.5", 1.5), ("30s", 30.0), ("15m", 900.0), ("12h", 43200.0),
     ("7d", 604800.0), ("2w", 1209600.0), ("1h30m", 5400.0), (" 2D ", 172800.0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert DURATION.convert(text, None, None) == seconds


@pytest.mark.parametrize("text", ["", "7x", "1h30", "d", "1e3", "nan", "inf", "7 days", "--1",
                                  "-5", "99999999999w"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(click.BadParameter):
        DURATION.convert(text, None, None)


def test_scope_splits_on_the_first_colon() -> None:
    assert SCOPE.convert("Article:a:1", None, None) == ("Article", "a:1")
    for bad in ("Article", ":a1", "Article:", " : "):
        with pytest.raises(click.BadParameter):
            SCOPE.convert(bad, None, None)


def test_payloads() -> None:
    assert parse_payload('{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}
    for bad in ("[]", "1", '"x"', "null", "{", '{"a": NaN}', '{"a": Infinity}', "[" * 100_000):
        with pytest.raises(click.UsageError) as caught:
            parse_payload(bad)
        assert bad[:20] not in caught.value.format_message() or bad in ("[]", "1", "null")


@pytest.mark.parametrize("target", ["app.jobs:worker", "app:make.worker", "a_b.c1:w"])
def test_good_targets(target: str) -> None:
    module, attr = split_target(target)
    assert f"{module}:{attr}" == target


@pytest.mark.parametrize("target", ["app", "app:", ":worker", "app jobs:worker", "app:1x",
                                    "app..jobs:w", "app:w;rm"])
def test_bad_targets(target: str) -> None:
    with pytest.raises(TargetError):
        split_target(target)
