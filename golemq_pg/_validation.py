"""Input validation done before any SQL: payloads, names, durations, timestamps.

Errors name the job type and the failure category; they never echo the payload.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from golemq_pg._types import JobStatus, JobType, Scope
from golemq_pg.errors import QueuePayloadError

MAX_NAME_LENGTH = 255
#: The longest job id: a positive bigint in decimal (``add()`` returns ids as strings).
MAX_JOB_ID_DIGITS = 19
#: The largest job id: ids are bigints.
MAX_JOB_ID = 2**63 - 1
#: The largest ``max_attempts``: the column is an integer.
MAX_ATTEMPTS = 2**31 - 1
#: The shortest ``every`` of a schedule, in seconds.
MIN_EVERY_SECONDS = 1.0
#: The timestamps a job may carry: what reads back as a Python datetime in any time zone
#: (a day inside ``datetime``'s years 1-9999 in UTC; PostgreSQL stores far wider, and a
#: ``run_at`` of 0001-01-01 05:00+14:00, stored as a year-0 instant, made every read of it
#: fail).
MIN_TIMESTAMP = datetime(1, 1, 2, tzinfo=UTC)
MAX_TIMESTAMP = datetime(9999, 12, 30, tzinfo=UTC)
#: The longest pause reason accepted (the ``paused_types.reason`` column's bound).
MAX_PAUSE_REASON = 1000
MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_DEPTH = 200
#: Durations beyond this (about 100 years) are rejected as a mistake, and keep intervals in range.
MAX_DURATION_SECONDS = 100 * 365 * 86400.0
_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: Tags: at most this many per job, each 1-64 characters of ``[A-Za-z0-9_.:-]``.
MAX_TAGS = 16
MAX_TAG_LENGTH = 64
_TAG_RE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_ALLOWED_STATUSES = ", ".join(s.value for s in JobStatus)


def check_schema(schema: object) -> str:
    """Validate a schema name as a plain lower-case identifier."""
    if not isinstance(schema, str) or not _SCHEMA_RE.match(schema):
        raise ValueError(
            "schema must match ^[a-z_][a-z0-9_]{0,62}$ (a plain lower-case identifier)"
        )
    return schema


def check_dsn(value: object, what: str) -> str:
    """A libpq connection string or URI (``ValueError`` naming ``what``, never the value: a
    DSN may carry a password)."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty connection string or postgresql:// URI")
    # Imported here: the CLI's --help reaches this module and must not load the driver.
    import psycopg  # noqa: PLC0415

    try:
        psycopg.conninfo.conninfo_to_dict(value)
    except psycopg.ProgrammingError:
        raise ValueError(
            f"{what} is not a valid connection string or postgresql:// URI"
        ) from None
    return value


def check_name(value: object, what: str) -> str:
    """A job type, dedupe key, scope part or schedule key: a non-empty string of <= 255 chars."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {type(value).__name__}")
    if not value or not value.strip():
        raise ValueError(f"{what} must be a non-empty string")
    if len(value) > MAX_NAME_LENGTH:
        raise ValueError(f"{what} must be at most {MAX_NAME_LENGTH} characters")
    return check_text(value, what)


def check_text(value: str, what: str) -> str:
    """Text the database can store and give back: no NUL character (PostgreSQL's text
    cannot hold one) and no lone surrogate (not Unicode: it cannot be encoded to UTF-8)."""
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL characters")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                f"{what} must be valid Unicode text (it holds a lone surrogate)"
            ) from None
    return value


def check_scope(scope: object) -> Scope | None:
    """Normalise a 2-tuple or :class:`Scope` into a Scope, validating both parts."""
    if scope is None:
        return None
    if not isinstance(scope, tuple) or len(scope) != 2:
        raise ValueError("scope must be a Scope(type, id) or a (type, id) tuple")
    return Scope(check_name(scope[0], "scope type"), check_name(scope[1], "scope id"))


def check_required_scope(scope: object) -> Scope:
    """A scope that must be given (cancel and find by scope), validated as by
    :func:`check_scope`."""
    scope_v = check_scope(scope)
    if scope_v is None:
        raise ValueError("a scope is required")
    return scope_v


def check_job_type(job_type: object) -> str:
    """A job type's name, given as a string or a :class:`JobType`, validated."""
    if isinstance(job_type, JobType):
        return check_name(job_type.name, "job type")
    return check_name(job_type, "job type")


def check_job_id(job_id: object) -> str:
    """A job id as ``add()`` returns it (digits; an int is accepted): the rule of every
    by-id method, the CLI's ID arguments and the dashboard's job URLs."""
    if isinstance(job_id, bool) or not isinstance(job_id, str | int):
        raise ValueError("job_id must be a string")
    text = str(job_id)
    # isascii: str.isdigit() also accepts "²" and other scripts' digits, which no id holds.
    if not (text.isascii() and text.isdigit()) or len(text) > MAX_JOB_ID_DIGITS:
        raise ValueError("job_id must be a job id as returned by add()")
    if int(text) > MAX_JOB_ID:
        raise ValueError("job_id must be a job id as returned by add() (it is past bigint)")
    return text


def check_pause_reason(reason: object) -> str | None:
    """A pause reason: None, or a string of at most :data:`MAX_PAUSE_REASON` characters."""
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise ValueError(f"reason must be a string, got {type(reason).__name__}")
    if len(reason) > MAX_PAUSE_REASON:
        raise ValueError(f"reason must be at most {MAX_PAUSE_REASON} characters")
    return check_text(reason, "reason")


def check_positive_int(value: object, what: str) -> int:
    """A strictly positive int (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{what} must be a positive integer")
    return value


def check_max_attempts(value: object, what: str = "max_attempts") -> int:
    """A positive int that fits the ``max_attempts`` column (at most 2**31-1)."""
    attempts = check_positive_int(value, what)
    if attempts > MAX_ATTEMPTS:
        raise ValueError(f"{what} must be at most {MAX_ATTEMPTS} (2**31-1)")
    return attempts


def check_every(value: object) -> float:
    """A schedule's ``every``: a duration of at least one second."""
    seconds = to_seconds(value, "every", allow_zero=False)
    if seconds < MIN_EVERY_SECONDS:
        raise ValueError("every must be at least one second")
    return seconds


def check_int(value: object, what: str) -> int:
    """Any int in the PostgreSQL integer range (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer")
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"{what} is out of range")
    return value


def to_seconds(value: object, what: str, *, allow_zero: bool = True) -> float:
    """Convert a duration (seconds or timedelta) to finite float seconds, validated."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} must be a number of seconds or a timedelta")
    else:
        seconds = float(value)
    if not math.isfinite(seconds):
        raise ValueError(f"{what} must be finite")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError(f"{what} must be {'>= 0' if allow_zero else '> 0'}")
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"{what} is too large")
    return seconds


def check_aware(value: object, what: str) -> datetime:
    """A timezone-aware datetime."""
    if not isinstance(value, datetime):
        raise ValueError(f"{what} must be a datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware")
    return value


def check_timestamp(value: object, what: str) -> datetime:
    """A timezone-aware datetime a job may carry: one that reads back (between
    :data:`MIN_TIMESTAMP` and :data:`MAX_TIMESTAMP` in UTC)."""
    aware = check_aware(value, what)
    try:
        utc = aware.astimezone(UTC)
    except OverflowError:  # its UTC instant is outside datetime's years 1-9999
        utc = None
    if utc is None or not MIN_TIMESTAMP <= utc <= MAX_TIMESTAMP:
        raise ValueError(
            f"{what} must be between 0001-01-02 and 9999-12-30 UTC (a time that reads back)"
        )
    return aware


def check_tags(tags: object, what: str = "tags") -> tuple[str, ...] | None:
    """Validate job tags: None or an iterable of at most 16 tags, each 1-64 characters of
    ``[A-Za-z0-9_.:-]`` (case kept). Duplicates collapse (first occurrence kept, order
    otherwise kept); an empty iterable means no tags (None). A single string is refused
    (it would be read as one tag per character)."""
    if tags is None:
        return None
    if isinstance(tags, str | bytes) or not isinstance(tags, Iterable):
        raise ValueError(f"{what} must be a list or tuple of strings, not a single value")
    out: dict[str, None] = {}
    for tag in tags:
        if not isinstance(tag, str):
            raise ValueError(f"{what}: every tag must be a string, got {type(tag).__name__}")
        if not _TAG_RE.fullmatch(tag):
            raise ValueError(
                f"{what}: a tag must be 1-{MAX_TAG_LENGTH} characters of [A-Za-z0-9_.:-]"
            )
        out[tag] = None
        if len(out) > MAX_TAGS:
            raise ValueError(f"{what}: at most {MAX_TAGS} tags")
    return tuple(out) or None


def check_status(status: object) -> JobStatus:
    """A job status given as a :class:`JobStatus` or its name in any case ("FAILED")."""
    if isinstance(status, JobStatus):
        return status
    if isinstance(status, str):
        try:
            return JobStatus(status.strip().lower())
        except ValueError:
            pass
    shown = repr(status) if isinstance(status, str) and len(status) <= 40 else "value"
    raise ValueError(f"unknown job status {shown}: use one of {_ALLOWED_STATUSES}")


def check_statuses(statuses: object) -> list[JobStatus]:
    """A status or a sequence of them (see :func:`check_status`), duplicates collapsed."""
    if isinstance(statuses, str):
        statuses = [statuses]
    if not isinstance(statuses, Sequence | set | frozenset | tuple):
        raise ValueError(f"statuses must be a list of job statuses ({_ALLOWED_STATUSES})")
    return list(dict.fromkeys(check_status(s) for s in statuses))


def encode_payload(job_type: str, payload: object) -> bytes:
    """Validate ``payload`` as a JSON-safe mapping and return its JSON encoding."""
    # The exact-dict test first spares the common case the slower ABC isinstance check.
    if type(payload) is not dict and not isinstance(payload, Mapping):
        raise QueuePayloadError(job_type, "payload must be a mapping")
    _check_mapping(job_type, payload, 0, {id(payload)})
    try:
        encoded = orjson.dumps(payload if isinstance(payload, dict) else dict(payload))
    except (TypeError, orjson.JSONEncodeError) as exc:
        # Chain nothing: an encoder message could quote part of the payload.
        raise QueuePayloadError(job_type, _encoding_failure(exc)) from None
    if len(encoded) > MAX_PAYLOAD_BYTES:
        raise QueuePayloadError(job_type, f"payload larger than {MAX_PAYLOAD_BYTES} bytes")
    return encoded


def _encoding_failure(exc: Exception) -> str:
    """The category of an encoding the walk let through. The walk accepts only JSON types
    and does not look into strings (that would cost every payload a scan): a lone surrogate
    ("\\udc80", not Unicode) is found by the encoder, whose message quotes nothing."""
    if "surrogates not allowed" in str(exc):
        return "lone surrogate in a string (not valid Unicode)"
    return "not JSON-serialisable"


def encode_payloads(job_type: str, payloads: Iterable[object]) -> list[bytes]:
    """:func:`encode_payload` for many payloads; the first bad one raises.

    Each encoding is copied into a right-sized ``bytes`` and orjson's own result dropped at
    once: orjson returns a buffer it allocated larger and then shrank, and keeping 100k of
    those alive made the C allocator the slowest step of ``add_many`` (about 1.6 us a payload
    in glibc's malloc, against under 0.1 us for the copy).
    """
    return [bytes(memoryview(encode_payload(job_type, payload))) for payload in payloads]


def _check_mapping(job_type: str, mapping: Mapping[Any, Any], depth: int, stack: set[int]) -> None:
    """Check one mapping already on ``stack``. Scalars are checked inline (the common flat
    payload then costs no call per value); anything else goes through :func:`_check_value`,
    in the same order and with the same errors."""
    for key, item in mapping.items():
        if type(key) is not str:
            raise QueuePayloadError(job_type, "mapping key that is not a string")
        if "\x00" in key:
            raise QueuePayloadError(job_type, "NUL character in a string")
        kind = type(item)
        if kind is str:
            if "\x00" in item:
                # jsonb cannot store U+0000, and the database's error would quote the payload.
                raise QueuePayloadError(job_type, "NUL character in a string")
        elif kind is int:
            if not -(2**63) <= item < 2**64:
                raise QueuePayloadError(job_type, "integer out of the 64-bit range")
        elif kind is float:
            if not math.isfinite(item):
                raise QueuePayloadError(job_type, "non-finite float (NaN or infinity)")
        elif kind is bool or item is None:
            pass
        else:
            _check_value(job_type, item, depth + 1, stack)


def _check_value(job_type: str, value: Any, depth: int, stack: set[int]) -> None:
    kind = type(value)
    if kind is str:
        if "\x00" in value:
            raise QueuePayloadError(job_type, "NUL character in a string")
        return
    if kind is float:
        if not math.isfinite(value):
            raise QueuePayloadError(job_type, "non-finite float (NaN or infinity)")
        return
    if kind is int:
        if not -(2**63) <= value < 2**64:
            raise QueuePayloadError(job_type, "integer out of the 64-bit range")
        return
    if kind is bool or value is None:
        return
    if depth > MAX_DEPTH:
        raise QueuePayloadError(job_type, "nested too deeply")
    # A plain dict first: the Mapping ABC's isinstance costs more than checking a small dict.
    if kind is dict or isinstance(value, Mapping):
        if id(value) in stack:
            raise QueuePayloadError(job_type, "circular reference")
        stack.add(id(value))
        _check_mapping(job_type, value, depth, stack)
        stack.discard(id(value))
        return
    if kind is list or kind is tuple:
        if id(value) in stack:
            raise QueuePayloadError(job_type, "circular reference")
        stack.add(id(value))
        for item in value:
            _check_value(job_type, item, depth + 1, stack)
        stack.discard(id(value))
        return
    if isinstance(value, bytes | bytearray | memoryview):
        raise QueuePayloadError(job_type, "bytes are not JSON-safe")
    if isinstance(value, set | frozenset):
        raise QueuePayloadError(job_type, "sets are not JSON-safe")
    if callable(value):
        raise QueuePayloadError(job_type, "functions are not JSON-safe")
    raise QueuePayloadError(job_type, f"values of type {type(value).__name__} are not JSON-safe")


#: The values of ``delete_on`` (Worker and handler option): when a finished job's row goes.
DELETE_ON = ("never", "success", "always")
_MIB = 1024 * 1024


def check_delete_on(value: object, what: str) -> str:
    """``delete_on``: "never" (rows kept until pruned), "success" or "always"."""
    if not isinstance(value, str) or value not in DELETE_ON:
        raise ValueError(f"{what} must be one of 'never', 'success', 'always'")
    return value


def encode_result(value: object) -> bytes:
    """Validate a handler's return value as a JSON-safe result (the payload rules, any JSON
    value at the top) of at most 1 MiB encoded, and return its JSON encoding.

    Raises ``ValueError`` naming the problem ("result is not JSON-safe: ..." or "result is
    1.2 MiB, over the 1 MiB limit"), never the value.
    """
    try:
        _check_value("result", value, 0, set())
    except QueuePayloadError as exc:
        raise ValueError(f"result is not JSON-safe: {exc.category}") from None
    try:
        encoded = orjson.dumps(value, default=_mapping_as_dict)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise ValueError(f"result is not JSON-safe: {_encoding_failure(exc)}") from None
    if len(encoded) > MAX_PAYLOAD_BYTES:
        size = len(encoded)
        raise ValueError(
            f"result is {size / _MIB:.1f} MiB ({size} bytes), over the 1 MiB limit"
        )
    return encoded


def _mapping_as_dict(value: object) -> dict[Any, Any]:
    # orjson encodes dicts natively; the walk has already accepted any other Mapping.
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError("not JSON-serialisable")
