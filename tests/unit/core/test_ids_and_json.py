"""Identifiers, the JSON helpers and RFC 3339 times: small, but every entry and answer goes through them."""

from __future__ import annotations

import base64
from unittest import mock
import json
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core import ids
from gateway.core import jsonio
from gateway.core.clock import to_rfc3339

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _reference_b32(value: int, length: int) -> str:
    digits = []
    for _ in range(length):
        digits.append(CROCKFORD[value % 32])
        value //= 32
    return "".join(reversed(digits))


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=(1 << 80) - 1))
def test_b32_is_fixed_width_crockford(value: int) -> None:
    assert ids._b32(value, 16) == _reference_b32(value, 16)
    assert ids._b32(value & ((1 << 48) - 1), 10) == _reference_b32(value & ((1 << 48) - 1), 10)


def test_ids_sort_by_time_and_do_not_repeat() -> None:
    first = ids.new_id("en")
    time.sleep(0.002)
    later = [ids.new_id("en") for _ in range(1000)]
    assert all(first < other for other in later)
    assert len(set(later)) == 1000
    assert all(len(i) == 3 + 26 and set(i[3:]) <= set(CROCKFORD) for i in later)


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(), lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                    max_leaves=20))
def test_dumps_writes_what_json_reads_back(value: object) -> None:
    assert json.loads(jsonio.dumps(value)) == value
    assert json.loads(jsonio.dumps_text(value, sort_keys=True)) == value


def test_dumps_falls_back_for_what_orjson_refuses() -> None:
    assert json.loads(jsonio.dumps({"n": 1 << 70})) == {"n": 1 << 70}
    assert json.loads(jsonio.dumps({1: "non-string key"})) == {"1": "non-string key"}


def test_loads_refuses_what_json_does_not_allow() -> None:
    for text in (b'{"a": NaN}', b'{"a": "\\ud800"}', b"\xef\xbb\xbf{}", b"[" * 2000 + b"]" * 2000, b'{"a": 1,}'):
        try:
            jsonio.loads(text)
        except ValueError:
            continue
        raise AssertionError(f"accepted {text[:20]!r}")


@settings(max_examples=500, deadline=None)
@given(st.integers(min_value=0, max_value=4_000_000_000), st.integers(min_value=0, max_value=999_999))
def test_rfc3339_is_utc_with_z_and_a_fraction_only_when_there_is_one(seconds: int, micros: int) -> None:
    from datetime import datetime, timezone

    moment = seconds + micros / 1_000_000
    dt = datetime.fromtimestamp(moment, tz=timezone.utc)
    expected = dt.strftime("%Y-%m-%dT%H:%M:%S") + (f".{dt.microsecond:06d}" if dt.microsecond else "") + "Z"
    assert to_rfc3339(moment) == expected
    whole = datetime.fromtimestamp(seconds, tz=timezone.utc)
    assert to_rfc3339(float(seconds)) == whole.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert to_rfc3339(None) is None


@given(st.binary(min_size=10, max_size=10))
def test_random_part_is_b32_of_the_bytes(raw: bytes) -> None:
    # new_id spells out its random bits pair by pair; they must be _b32 of the
    # bytes, which is RFC 4648 base32 mapped letter for letter onto Crockford's alphabet.
    with mock.patch.object(ids.os, "urandom", return_value=raw):
        made = ids.new_id("at")
    assert made[len("at_") + 10:] == ids._b32(int.from_bytes(raw, "big"), 16)
    rfc4648 = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", ids._ALPHABET.encode())
    assert made[len("at_") + 10:] == base64.b32encode(raw).translate(rfc4648).decode()
