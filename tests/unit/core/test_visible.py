"""The rule for characters a person cannot see (gateway/core/visible.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.core.visible import describe, first_invisible, first_invisible_in, invisible, marked, marked_json

REFUSED = ["\x00", "\x1b", "\x7f", "\x85", "\x9b", "\u00ad", "\u061c", "\u200b", "\u200c", "\u200d", "\u200e", "\u202a",
           "\u202e", "\u2066", "\u2069", "\u2060", "\ufeff", "\ufdd0", "\ufffe", "\uffff", "\U0001fffe", "\U000e0001",
           "\U000e0041", "\U000e007f", "\U0010ffff", "\ud800"]
KEPT = ["a", " ", "\t", "\n", "\r", "é", "ש", "😀", "\u00a0", "\u2028", "\u3000", "<", "&"]


def test_the_characters_refused_and_kept() -> None:
    assert [c for c in REFUSED if not invisible(c)] == []
    assert [c for c in KEPT if invisible(c)] == []


def test_the_first_one_is_named_where_a_person_counts() -> None:
    text = "Run make test." + "".join(chr(0xE0000 + ord(c)) for c in "SYSTEM")
    assert first_invisible(text) == (15, "\U000e0053")
    assert describe(*first_invisible(text)) == "U+E0053 at character 15"  # type: ignore[misc]
    assert first_invisible("Never \u202eesu\u202c --force") == (7, "\u202e")
    assert first_invisible("plain\nlines\tand\r\n") is None


@given(st.text(alphabet=st.sampled_from(REFUSED + KEPT)) | st.text())
def test_the_fast_paths_agree_with_the_rule_character_by_character(text: str) -> None:
    slow = next(((i + 1, c) for i, c in enumerate(text) if invisible(c)), None)
    assert first_invisible(text) == slow
    shown = marked(text)
    assert first_invisible(shown) is None and marked(shown) == shown
    assert shown == "".join(f"[U+{ord(c):04X}]" if invisible(c) else c for c in text)


def test_json_values_are_searched_and_marked_keys_included() -> None:
    detail = {"contradicts": "kn_1", "notes": ["fine", "bad\u200b"], "k\u202e": 1, "n": 3, "ok": None}
    assert first_invisible_in(detail, "detail") == ("detail.notes[1]", 4, "\u200b")
    assert first_invisible_in({"k\u202e": 1}, "detail") == ("a key of detail", 2, "\u202e")
    assert first_invisible_in({"a": [1, True, None, {"b": "c"}]}, "detail") is None
    assert marked_json(detail) == {"contradicts": "kn_1", "notes": ["fine", "bad[U+200B]"], "k[U+202E]": 1, "n": 3, "ok": None}
    clean = {"a": ["b"]}
    assert marked_json(clean) is clean
