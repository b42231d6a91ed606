"""Text a person reviews and agents are served holds only what a person sees.

An agent could write a harmless sentence followed by Unicode tag characters
(invisible in every browser, read as text by language models), or turn part of
a sentence around with a bidirectional override: the owner would confirm one
text while agents are served another.  So every door that writes such text
refuses these characters (`first_invisible`), and text stored before the rule
is shown and served with each of them as a visible marker (`marked`).

Refused: category Cc other than tab, line feed and carriage return; category
Cf (tag characters, bidirectional embeddings, overrides and isolates,
zero-width spaces and joiners, the byte order mark, the soft hyphen); the
66 non-characters; and lone surrogates (category Cs), which no page can draw.
"""

from __future__ import annotations

import unicodedata
from typing import Any

_ALLOWED_CONTROLS = frozenset("\t\n\r")


def invisible(char: str) -> bool:
    """Whether one character is one a person cannot see for what it is."""
    code = ord(char)
    if 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE:
        return True  # a non-character
    category = unicodedata.category(char)
    return category in ("Cf", "Cs") or (category == "Cc" and char not in _ALLOWED_CONTROLS)


def _invisible_in(text: str) -> frozenset[str]:
    # str.isprintable is False for every character of categories C* (Cc, Cf,
    # Cs, and the unassigned code points, non-characters among them) and Z*
    # but the space: when it holds once tab, line feed and carriage return
    # are left out, nothing here is invisible, found at C speed.  Otherwise
    # each distinct character is asked once.
    if text.isprintable() or text.replace("\n", "").replace("\t", "").replace("\r", "").isprintable():
        return frozenset()
    return frozenset(c for c in set(text) if invisible(c))


def first_invisible(text: str) -> tuple[int, str] | None:
    """The first invisible character of `text` and its position (counted
    from 1, as a person counts), or None when every character is visible."""
    found = _invisible_in(text)
    if not found:
        return None
    for index, char in enumerate(text):
        if char in found:
            return index + 1, char
    return None  # pragma: no cover (found holds characters of text)


def describe(position: int, char: str) -> str:
    """`U+E0053 at character 37`: what a refusal names."""
    return f"U+{ord(char):04X} at character {position}"


def marker(char: str) -> str:
    """The visible stand-in for one invisible character."""
    return f"[U+{ord(char):04X}]"


def marked(text: str) -> str:
    """`text` with every invisible character replaced by its marker: how text
    stored before the rule is drawn and served, never as it is."""
    found = _invisible_in(text)
    if not found:
        return text
    return "".join(marker(c) if c in found else c for c in text)


def first_invisible_in(value: Any, path: str) -> tuple[str, int, str] | None:
    """The first invisible character in any string of a JSON value (keys
    included, depth first): (where, as `path.key[0]`, its position, the
    character), or None."""
    if isinstance(value, str):
        found = first_invisible(value)
        return None if found is None else (path, *found)
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if isinstance(key, str) else path
            hit = (first_invisible_in(key, f"a key of {path}") if isinstance(key, str) else None) or first_invisible_in(item, where)
            if hit is not None:
                return hit
    elif isinstance(value, list):
        for index, item in enumerate(value):
            hit = first_invisible_in(item, f"{path}[{index}]")
            if hit is not None:
                return hit
    return None


def marked_json(value: Any) -> Any:
    """A JSON value with every string (keys included) `marked`; the value
    itself when nothing needed a marker."""
    if isinstance(value, str):
        return marked(value)
    if first_invisible_in(value, "") is None:
        return value
    if isinstance(value, dict):
        return {marked(k) if isinstance(k, str) else k: marked_json(v) for k, v in value.items()}
    return [marked_json(v) for v in value]
