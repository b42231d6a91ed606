"""YAML in, plain data plus a line for every path out.

Values come from PyYAML's safe loader (never a loader that builds objects;
libyaml's `CSafeLoader` when present), constructed from the node tree the
text is composed into once; walking that same tree gives the line numbers,
so a problem can be reported as `FILE:LINE: message`.
The walk also refuses what `safe_load` would silently accept: a key written
twice in one mapping (the second `refs:` would win unseen in review) and
aliases (a reviewer reads `*name` without seeing what it expands to).
"""

from __future__ import annotations

from typing import Any

import yaml

from gateway.ci.checkmaps.model import Problem

Path = tuple[Any, ...]

# A check map is a few levels deep.  Far deeper nesting is refused as a
# problem before anything recurses into it (PyYAML and this walk both recurse).
MAX_DEPTH = 32
# libyaml's safe loader when PyYAML was built with it (the wheels are): the
# same safe constructors, about ten times faster on a big map.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class Locator:
    """Maps a path in the loaded data (keys and list indexes) to its line,
    and a scalar's path to its text as written (`0123` where YAML read 83)."""

    def __init__(self) -> None:
        self._lines: dict[Path, int] = {(): 1}
        self._texts: dict[Path, str] = {}

    def add(self, path: Path, line: int, text: str | None = None) -> None:
        self._lines.setdefault(path, line)
        if text is not None:
            self._texts.setdefault(path, text)

    def written(self, path: Path) -> str | None:
        return self._texts.get(path)

    def line(self, path: Path) -> int:
        """The line of `path`, or of its nearest ancestor that has one."""
        while path not in self._lines:
            path = path[:-1]
        return self._lines[path]


def load(text: str, file: str) -> tuple[Any, Locator, list[Problem]]:
    locator = Locator()
    deep = _too_deep(text)
    if deep is not None:
        return None, locator, [Problem(file, deep, f"nested more than {MAX_DEPTH} levels deep; a check map is a flat list")]
    try:
        # Composed once: the data is built from the very node tree the walk
        # reads for lines (what `yaml.load` does, less a second parse).
        loader = _SAFE_LOADER(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except RecursionError:
        return None, locator, [Problem(file, 1, "nested too deeply to read; a check map is a flat list")]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or "the file is not valid YAML"
        return None, locator, [Problem(file, line, f"not valid YAML: {problem}")]
    problems: list[Problem] = []
    if node is not None:
        _walk(node, (), locator, problems, file, set())
    return data, locator, problems


def _too_deep(text: str) -> int | None:
    """The line where flow brackets or block indentation first go deeper
    than MAX_DEPTH, found without parsing (a cheap pre-check: it may refuse
    a bracket inside a quoted string that deep, which no check map has)."""
    depth = 0
    line = 1
    for char in text:
        if char == "\n":
            line += 1
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return line
        elif char in "]}":
            depth = max(0, depth - 1)
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.lstrip(" -")
        if stripped and len(raw) - len(stripped) > MAX_DEPTH * 4:
            return number
    return None


def _scalar_key(node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return node.value
    return repr(node)


def _walk(node: yaml.Node, path: Path, locator: Locator, problems: list[Problem], file: str, seen: set[int]) -> None:
    if len(path) > MAX_DEPTH:
        problems.append(Problem(file, node.start_mark.line + 1, f"nested more than {MAX_DEPTH} levels deep"))
        return
    if id(node) in seen:
        problems.append(Problem(file, node.start_mark.line + 1, "anchors and aliases (&name, *name) are not allowed in a check map; write the value out"))
        return
    seen.add(id(node))
    locator.add(path, node.start_mark.line + 1, node.value if isinstance(node, yaml.ScalarNode) else None)
    if isinstance(node, yaml.MappingNode):
        keys_here: set[Any] = set()
        for key_node, value_node in node.value:
            key = _scalar_key(key_node)
            line = key_node.start_mark.line + 1
            if key in keys_here:
                problems.append(Problem(file, line, f"{key!s} is written twice in the same mapping; keep one"))
                continue
            keys_here.add(key)
            locator.add(path + (key,), line)
            _walk(value_node, path + (key,), locator, problems, file, seen)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            locator.add(path + (index,), item.start_mark.line + 1)
            _walk(item, path + (index,), locator, problems, file, seen)

