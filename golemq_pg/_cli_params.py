"""Parsing of ``golemq-pg`` inputs (durations, scopes and JSON payloads), and
:class:`CliError`, the runtime failure every command module raises.

Each failure is a one-line click error that names what is wrong, never the input payload.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any, NoReturn

import click

from golemq_pg._errortext import error_text
from golemq_pg._validation import MAX_DURATION_SECONDS

#: The exit code of a runtime failure (bad input exits 2, as click's usage errors do).
EXIT_RUNTIME = 1


class CliError(click.ClickException):
    """A runtime failure: one line on stderr, exit code 1."""

    exit_code = EXIT_RUNTIME


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")


def parse_duration(text: str) -> float:
    """``"90"``, ``"30s"``, ``"15m"``, ``"12h"``, ``"7d"``, ``"2w"`` or ``"1h30m"`` -> seconds."""
    cleaned = text.strip().lower()
    pos, total = 0, 0.0
    if not cleaned:
        raise ValueError("empty duration")
    while pos < len(cleaned):
        match = _DURATION_RE.match(cleaned, pos)
        # A bare number is only allowed alone ("90"), not in the middle ("1h30").
        if match is None or (not match.group(2) and (pos or match.end() != len(cleaned))):
            raise ValueError(
                f"{text!r} is not a duration (use seconds or 30s, 15m, 12h, 7d, 2w)"
            )
        total += float(match.group(1)) * _UNITS[match.group(2) or "s"]
        pos = match.end()
    if not math.isfinite(total) or total > MAX_DURATION_SECONDS:
        raise ValueError(f"{text!r} is too large")
    return total


class DurationType(click.ParamType[float]):
    """A non-negative duration given in seconds or with a unit suffix."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        """Parse ``value`` into seconds, rejecting negatives and garbage."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            seconds = float(value)
        else:
            text = str(value).strip()
            if text.startswith("-"):
                self.fail(f"{text!r} is negative: durations must be >= 0", param, ctx)
            try:
                seconds = parse_duration(text)
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        if not math.isfinite(seconds) or seconds < 0:
            self.fail("durations must be finite and >= 0", param, ctx)
        return seconds


class ScopeType(click.ParamType[tuple[str, str]]):
    """``TYPE:ID``: the scope a job is about (split on the first colon)."""

    name = "T:ID"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, str]:
        """Split ``value`` into a (type, id) pair with two non-empty parts."""
        if isinstance(value, tuple):
            return (str(value[0]), str(value[1]))  # already converted
        kind, sep, ident = str(value).partition(":")
        if not sep or not kind.strip() or not ident.strip():
            self.fail("expected TYPE:ID with both parts non-empty, e.g. Article:a1", param, ctx)
        return kind, ident


DURATION = DurationType()
SCOPE = ScopeType()


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON here")


def parse_payload(text: str) -> dict[str, Any]:
    """A JSON object from the command line (``-``: read stdin); NaN/Infinity rejected."""
    if text == "-":
        text = sys.stdin.read()
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        # The decoder's message names a position, never the input itself.
        raise click.UsageError(f"JSON payload is not valid JSON: {exc.msg} at "
                               f"line {exc.lineno} column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:
        raise click.UsageError(f"JSON payload is not valid: {error_text(exc)}") from None
    if not isinstance(value, dict):
        raise click.UsageError(
            f"JSON payload must be an object ({{...}}), got {type(value).__name__}"
        )
    return value
