"""Extraction: the durable statements a thread message states outright.

A pure function over the message text.  It looks for lines (and, for
decisions, sentences) written the way people record knowledge in a thread,
and nothing else: no guessing, no language model.  What it finds becomes a
*candidate* (see `gateway.knowledge.threads`); an owner or CI decides what is true.

What is extracted, one statement per line, case-insensitive:

| the line starts with                                   | kind       | the statement is           |
|--------------------------------------------------------|------------|----------------------------|
| `Pitfall:`, `Gotcha:`, `Trap:`                         | pitfall    | the text after the colon   |
| `Convention:`, `Rule:`                                 | convention | the text after the colon   |
| `Decision:`, `Decided:`                                | decision   | the text after the colon   |
| `Fact:`                                                | fact       | the text after the colon   |
| `Note:`, `Remember:`, `Important:` then always / never | convention | the text after the colon   |

and, anywhere in a line, a sentence of the form "we decided / chose / agreed
/ settled on ... because ..." becomes a `decision` (the sentence from "We"
on): a decision is a choice *and* its reason, so one without "because" is not
taken.

A list marker (`-`, `*`, `+`, `1.`) before the label and bold or italic
marks around it (`**Pitfall:**`) are ignored.  Skipped: lines inside fenced
code blocks, quoted lines (`> ...`, so that a pasted recall answer is not
learned again as new knowledge), questions (ending in `?`), statements of
fewer than 3 words or 12 characters, statements over 2000 characters, and
repeats within the message.  At most 20 statements come from one message.

Cost: linear in the message, whatever its shape (a message is hostile input).
No pattern may backtrack over more than a bounded span: a line is split into
sentences first, a sentence over `MAX_SENTENCE_CHARS` is not considered (its
statement would be over the entry limit anyway, or it is not a sentence), and
the decision test is two linear scans (the first "we decided" head, the last
"because") instead of one `.*?` that retried from every head.  At most
`MAX_SENTENCES` sentences are looked at per message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gateway.knowledge.trust import normalise_statement

MAX_STATEMENTS = 20
MAX_STATEMENT_CHARS = 2000
MIN_STATEMENT_CHARS = 12
MIN_STATEMENT_WORDS = 3
MAX_SENTENCE_CHARS = 4000
MAX_SENTENCES = 5000
MAX_LABEL_CHARS = 20

LABELS: dict[str, str] = {
    "pitfall": "pitfall",
    "gotcha": "pitfall",
    "trap": "pitfall",
    "convention": "convention",
    "rule": "convention",
    "decision": "decision",
    "decided": "decision",
    "fact": "fact",
}
# Labels that mark a convention only when the text is a standing instruction.
REMINDER_LABELS = ("note", "remember", "important")

_EMPHASIS = r"(?:\*\*|__|\*|_)?"
_LABEL_LINE = re.compile(
    r"^(?:[-*+]\s+|\d{1,3}[.)]\s+)?" + _EMPHASIS
    + r"(?P<label>[A-Za-z]{1,%d})" % MAX_LABEL_CHARS + _EMPHASIS + r"\s*:\s*" + _EMPHASIS + r"\s*(?P<rest>.+)$"
)
_STANDING = re.compile(r"^(?:always|never)\b", re.IGNORECASE)
# The head of a decision and its reason, matched separately: each is a
# bounded pattern, tried once per position, so a sentence costs O(length).
_DECIDED_HEAD = re.compile(r"\bwe (?:have )?(?:decided|chose|agreed|settled on)\b", re.IGNORECASE)
_BECAUSE = re.compile(r"\bbecause\b(?=.)", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!])\s+(?=[A-Z])")
_FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True)
class Extracted:
    kind: str
    statement: str
    line: int  # 1-based line of the message it came from


def extract(text: str) -> list[Extracted]:
    """Every durable statement in `text`, in the order they appear."""
    found: list[Extracted] = []
    seen: set[str] = set()
    in_fence = False
    budget = [MAX_SENTENCES]  # sentences left to look at in this message
    for number, raw in enumerate(text.splitlines(), start=1):
        if budget[0] <= 0:
            break
        if _FENCE.match(raw):
            in_fence = not in_fence
            continue
        line = raw.strip()
        if in_fence or not line or line.startswith(">"):
            continue
        for kind, statement in _statements_in(line, budget):
            key = normalise_statement(statement)  # the duplicate test learn applies
            if key in seen or not _worth_keeping(statement):
                continue
            seen.add(key)
            found.append(Extracted(kind=kind, statement=statement, line=number))
            if len(found) >= MAX_STATEMENTS:
                return found
    return found


def _statements_in(line: str, budget: list[int]) -> list[tuple[str, str]]:
    budget[0] -= 1
    labelled = _labelled(line)
    if labelled is not None:
        return [labelled]
    if _BECAUSE.search(line) is None:  # the common case: no decision, one scan
        return []
    out = []
    for sentence in _SENTENCE_END.split(line):
        budget[0] -= 1
        if budget[0] < 0:
            break
        decision = _decision(sentence)
        if decision is not None:
            out.append(("decision", _clean(decision)))
    return out


def _decision(sentence: str) -> str | None:
    """The sentence from its first "we decided" on, when "because" and a
    reason follow it: what `we decided .*? because .+` matched, found by two
    forward scans instead of a lazy gap retried from every head."""
    if len(sentence) > MAX_SENTENCE_CHARS:
        return None
    sentence = " ".join(sentence.split())  # single spaces, so the head pattern needs no unbounded run
    head = _DECIDED_HEAD.search(sentence)
    if head is None or _BECAUSE.search(sentence, head.end()) is None:
        return None
    return sentence[head.start():]


def _labelled(line: str) -> tuple[str, str] | None:
    match = _LABEL_LINE.match(line)
    if match is None:
        return None
    label = match.group("label").casefold()
    rest = _clean(match.group("rest"))
    if label in LABELS:
        return LABELS[label], rest
    if label in REMINDER_LABELS and _STANDING.match(rest):
        return "convention", rest
    return None


def _clean(text: str) -> str:
    text = " ".join(text.split()).strip()
    text = text.strip("*_ ").strip()
    if text[:1].islower():
        text = text[0].upper() + text[1:]
    return text


def _worth_keeping(statement: str) -> bool:
    if statement.endswith("?"):
        return False
    if len(statement) < MIN_STATEMENT_CHARS or len(statement) > MAX_STATEMENT_CHARS:
        return False
    return len(statement.split()) >= MIN_STATEMENT_WORDS
