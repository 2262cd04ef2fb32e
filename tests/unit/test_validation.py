"""Validation before any SQL: payloads, names, durations, timestamps, schema names."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from types import MappingProxyType

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from golemq_pg import QueuePayloadError
from golemq_pg._validation import (
    MAX_PAYLOAD_BYTES,
    check_aware,
    check_delete_on,
    check_name,
    check_positive_int,
    check_schema,
    check_scope,
    encode_payload,
    encode_payloads,
    encode_result,
    to_seconds,
)

CANARY = "canary-secret-7f3a9"

# jsonb cannot store U+0000: NUL characters are refused by validation (tested below).
json_chars = st.characters(codec="utf-8", exclude_characters="\x00")
json_text = st.text(alphabet=json_chars)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | json_text
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(alphabet=json_chars, max_size=10), children, max_size=5),
    max_leaves=30,
)


@given(st.dictionaries(st.text(alphabet=json_chars, max_size=20), json_values, max_size=8))
def test_json_safe_payloads_round_trip(payload: dict[str, object]) -> None:
    assert orjson.loads(encode_payload("t", payload)) == payload


@given(
    st.sampled_from(
        [b"bytes", {1, 2}, float("nan"), float("inf"), -math.inf, object(), print, 2**70]
    )
)
def test_unsafe_values_are_rejected_anywhere(bad: object) -> None:
    for payload in ({"v": bad}, {"a": [1, {"b": bad}]}):
        with pytest.raises(QueuePayloadError) as info:
            encode_payload("email.send", {"secret": CANARY, **payload})
        assert "email.send" in str(info.value)
        assert CANARY not in str(info.value)
        assert info.value.__cause__ is None or CANARY not in str(info.value.__cause__)


@pytest.mark.parametrize(
    ("payload", "category"),
    [
        ({1: "x"}, "not a string"),
        ({"a": {"b": b"x"}}, "bytes"),
        ({"s": {1}}, "sets"),
        ({"f": float("nan")}, "non-finite"),
        ({"f": lambda: 1}, "functions"),
        ({"d": datetime.now(UTC)}, "datetime"),
        ([("a", 1)], "mapping"),
        ("text", "mapping"),
    ],
)
def test_payload_errors_name_type_and_category(payload: object, category: str) -> None:
    with pytest.raises(QueuePayloadError) as info:
        encode_payload("article.extract", payload)
    message = str(info.value)
    assert "article.extract" in message
    assert category in message


def test_circular_payload_is_rejected() -> None:
    payload: dict[str, object] = {"secret": CANARY}
    payload["self"] = payload
    with pytest.raises(QueuePayloadError, match="circular"):
        encode_payload("t", payload)
    items: list[object] = []
    items.append(items)
    with pytest.raises(QueuePayloadError, match="circular"):
        encode_payload("t", {"l": items})


def test_repeated_but_not_circular_values_are_fine() -> None:
    shared = {"x": 1}
    assert orjson.loads(encode_payload("t", {"a": shared, "b": shared, "c": [shared, shared]})) == {
        "a": {"x": 1},
        "b": {"x": 1},
        "c": [{"x": 1}, {"x": 1}],
    }


class _Text(str):
    pass


class _Level(IntEnum):
    LOW = 1


class _Ratio(float):
    pass


@given(st.lists(st.dictionaries(st.text(alphabet=json_chars, max_size=10), json_values,
                                max_size=5), max_size=20))
def test_encode_payloads_is_encode_payload_for_each(payloads: list[dict[str, object]]) -> None:
    encoded = encode_payloads("t", payloads)
    assert encoded == [encode_payload("t", p) for p in payloads]
    assert all(type(e) is bytes for e in encoded)


def test_encode_payloads_takes_a_one_shot_iterator_and_stops_at_the_first_bad_one() -> None:
    seen: list[int] = []

    def payloads() -> Iterator[object]:
        for i in range(5):
            seen.append(i)
            yield {"secret": CANARY, "v": {1} if i == 2 else i}

    with pytest.raises(QueuePayloadError, match="sets") as info:
        encode_payloads("bulk.job", payloads())
    assert "bulk.job" in str(info.value)
    assert CANARY not in str(info.value)
    assert seen == [0, 1, 2]
    assert encode_payloads("t", iter([{"a": 1}, MappingProxyType({"b": [True, None]})])) == [
        b'{"a":1}', b'{"b":[true,null]}'
    ]


@pytest.mark.parametrize(
    "bad", [_Text("x"), _Level.LOW, _Ratio(0.5)], ids=["str-subclass", "IntEnum", "float-subclass"]
)
def test_only_exact_json_scalar_types_pass(bad: object) -> None:
    # Subclasses of str/int/float are refused wherever they sit (orjson would encode them,
    # maybe not as their owner expects): the inline scalar checks keep that exact.
    for payload in ({"v": bad}, {"l": [1, bad]}, {"d": {"e": bad}}, {"t": (bad,)}):
        with pytest.raises(QueuePayloadError, match="not JSON-safe"):
            encode_payload("t", payload)
        with pytest.raises(QueuePayloadError, match="not JSON-safe"):
            encode_payloads("t", [{}, payload])


def test_exact_scalars_pass_at_every_level() -> None:
    scalars = ["s", 0, -(2**63), 2**64 - 1, 1.5, True, False, None]
    payload = {"flat": 1, **{str(i): v for i, v in enumerate(scalars)},
               "list": scalars, "nested": {"again": scalars}}
    assert orjson.loads(encode_payload("t", payload)) == payload
    for bad, category in ((2**64, "64-bit"), (-(2**63) - 1, "64-bit"), (math.nan, "non-finite"),
                          ("a\x00b", "NUL")):
        for where in ({"v": bad}, {"l": [bad]}, {"n": {"v": bad}}):
            with pytest.raises(QueuePayloadError, match=category):
                encode_payload("t", where)
    with pytest.raises(QueuePayloadError, match="NUL"):
        encode_payload("t", {"k\x00": 1})


def test_deep_list_nesting_is_rejected_cleanly() -> None:
    items: list[object] = []
    node = items
    for _ in range(500):
        child: list[object] = []
        node.append(child)
        node = child
    with pytest.raises(QueuePayloadError, match="deeply"):
        encode_payloads("t", [{"l": items}])


def test_payload_size_limit() -> None:
    ok = {"blob": "x" * (MAX_PAYLOAD_BYTES - 20)}
    assert len(encode_payload("t", ok)) <= MAX_PAYLOAD_BYTES
    with pytest.raises(QueuePayloadError, match="larger than"):
        encode_payload("t", {"blob": "x" * MAX_PAYLOAD_BYTES, "secret": CANARY})


def test_deep_nesting_is_rejected_cleanly() -> None:
    payload: dict[str, object] = {}
    node = payload
    for _ in range(500):
        child: dict[str, object] = {}
        node["n"] = child
        node = child
    with pytest.raises(QueuePayloadError, match="deeply"):
        encode_payload("t", payload)


@pytest.mark.parametrize(
    "name",
    ["", "   ", "x" * 256, None, 5, b"bytes", "nul\x00byte"],
)
def test_bad_names(name: object) -> None:
    with pytest.raises(ValueError, match="job type"):
        check_name(name, "job type")


@pytest.mark.parametrize("name", ["a", "x" * 255, "quote'\";--", "ünïcødé ✓", "a.b:c/d"])
def test_hostile_but_valid_names_are_accepted(name: str) -> None:
    assert check_name(name, "job type") == name


@pytest.mark.parametrize(
    "schema",
    ["Golemq", "1abc", "a-b", "a;drop", 'a"b', "x" * 64, "", "ü", None],
)
def test_bad_schema_names(schema: object) -> None:
    with pytest.raises(ValueError, match="schema"):
        check_schema(schema)


def test_good_schema_names() -> None:
    for schema in ("golemq", "_x", "a" * 63, "q_1"):
        assert check_schema(schema) == schema


def test_scope_normalisation() -> None:
    assert check_scope(("Article", "a1")) == ("Article", "a1")
    assert check_scope(None) is None
    for bad in [("a",), ("a", "b", "c"), ("", "x"), ("x", ""), "ab", ["a", "b"], ("a", 1)]:
        with pytest.raises(ValueError, match="scope"):
            check_scope(bad)


@pytest.mark.parametrize(
    "value", [-1, float("nan"), float("inf"), -math.inf, "5", True, 10**12, timedelta(days=-1)]
)
def test_bad_durations(value: object) -> None:
    with pytest.raises(ValueError, match="delay"):
        to_seconds(value, "delay")


def test_durations() -> None:
    assert to_seconds(0, "delay") == 0.0
    assert to_seconds(timedelta(minutes=2), "delay") == 120.0
    assert to_seconds(1.5, "delay") == 1.5
    with pytest.raises(ValueError, match="> 0"):
        to_seconds(0, "every", allow_zero=False)


def test_aware_datetimes_only() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        check_aware(datetime(2026, 1, 1), "run_at")
    with pytest.raises(ValueError, match="datetime"):
        check_aware("2026-01-01", "run_at")
    now = datetime.now(UTC)
    assert check_aware(now, "run_at") is now


@pytest.mark.parametrize("value", [0, -3, 1.5, True, "3", None])
def test_positive_ints(value: object) -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        check_positive_int(value, "max_attempts")


# -- results and delete_on ------------------------------------------------------------------
@pytest.mark.parametrize(
    "value", [{"a": [1, 2.5, None, True]}, [1, "x"], "text", 0, -3, 1.5, MappingProxyType({"k": 1})]
)
def test_json_safe_results_encode_as_json(value: object) -> None:
    expected = dict(value) if isinstance(value, MappingProxyType) else value
    assert orjson.loads(encode_result(value)) == expected


@pytest.mark.parametrize(
    ("value", "category"),
    [
        ({CANARY}, "sets are not JSON-safe"),
        ([CANARY, b"raw"], "bytes are not JSON-safe"),
        ({"k": CANARY, 1: 2}, "mapping key that is not a string"),
        ([CANARY, math.inf], "non-finite float (NaN or infinity)"),
        (CANARY + "\x00", "NUL character in a string"),
        (object(), "values of type object are not JSON-safe"),
    ],
)
def test_results_that_are_not_json_safe_name_the_problem_only(
    value: object, category: str
) -> None:
    with pytest.raises(ValueError, match="result is not JSON-safe") as info:
        encode_result(value)
    assert str(info.value) == f"result is not JSON-safe: {category}"
    assert CANARY not in str(info.value)


def test_a_result_over_one_mebibyte_is_refused_with_its_size() -> None:
    assert len(encode_result("x" * (MAX_PAYLOAD_BYTES - 2))) == MAX_PAYLOAD_BYTES
    with pytest.raises(ValueError, match=r"^result is 1\.0 MiB \(1048577 bytes\), over the 1 MiB"):
        encode_result(CANARY[:0] + "x" * (MAX_PAYLOAD_BYTES - 1))


@pytest.mark.parametrize("value", ["never", "success", "always"])
def test_delete_on_values(value: str) -> None:
    assert check_delete_on(value, "delete_on") == value


@pytest.mark.parametrize("value", ["", "Never", "sometimes", None, 1, True])
def test_delete_on_rejects_anything_else(value: object) -> None:
    with pytest.raises(ValueError, match="delete_on must be one of"):
        check_delete_on(value, "delete_on")
