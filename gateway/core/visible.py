"""Text a person reviews and agents are served holds only what a person sees.

An agent could write a harmless sentence followed by Unicode tag characters
(invisible in every browser, read as text by language models), or turn part of
a sentence around with a bidirectional override: the owner would confirm one
text while agents are served another.  So every door that writes such text
refuses these characters (`first_invisible`), and text stored before the rule
is shown and served with each of them as a visible marker (`marked`).

Refused: category Cc other than tab, line feed and carriage return; category
Cf (tag characters, bidirectional embeddings, overrides and isolates,
zero-width spaces and joiners, the byte order mark, the soft hyphen); and the
66 non-characters.
"""

from __future__ import annotations

import re
import unicodedata

_ALLOWED_CONTROLS = frozenset("\t\n\r")
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def invisible(char: str) -> bool:
    """Whether one character is one a person cannot see for what it is."""
    code = ord(char)
    if 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE:
        return True  # a non-character
    category = unicodedata.category(char)
    return category == "Cf" or (category == "Cc" and char not in _ALLOWED_CONTROLS)


def first_invisible(text: str) -> tuple[int, str] | None:
    """The first invisible character of `text` and its position (counted
    from 1, as a person counts), or None when every character is visible."""
    if text.isascii():
        found = _ASCII_CONTROL.search(text)
        return (found.start() + 1, found.group()) if found else None
    for index, char in enumerate(text):
        if invisible(char):
            return index + 1, char
    return None


def describe(position: int, char: str) -> str:
    """`U+E0053 at character 37`: what a refusal names."""
    return f"U+{ord(char):04X} at character {position}"


def marker(char: str) -> str:
    """The visible stand-in for one invisible character."""
    return f"[U+{ord(char):04X}]"


def marked(text: str) -> str:
    """`text` with every invisible character replaced by its marker: how text
    stored before the rule is drawn and served, never as it is."""
    if first_invisible(text) is None:
        return text
    return "".join(marker(c) if invisible(c) else c for c in text)
