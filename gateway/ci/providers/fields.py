"""Reading one `issuers:` item of a check map, fail closed.

`Fields` wraps the item: each getter returns the value, or reports a
problem at the key's line and returns None, so a typo never silently drops
a restriction.  The shapes below are, character for character, the
`pattern`s of checkmap.schema.json (a test holds them equal), matched whole
(`fullmatch`): what an editor's schema check accepts, the gateway accepts.
No `\\s` or `\\S`: Python and JavaScript disagree on which characters those
are, so "visible" is spelled out: no control character, no kind of space.
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from gateway.knowledge.settings import SLUG

if TYPE_CHECKING:
    from gateway.ci.providers.base import Binding

Path = tuple[Any, ...]  # keys and list indexes from the top of the file

INVISIBLE = r"\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200b\u2028\u2029\u202f\u205f\u3000\ufeff"
VISIBLE_CHAR = f"[^{INVISIBLE}]"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_PORT = r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"  # 1 to 65535
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
NUMERIC_ID = re.compile(r"^[0-9]{1,20}$")
NO_SPACE = re.compile(f"^{VISIBLE_CHAR}{{1,512}}$")
VISIBLE = re.compile(VISIBLE_CHAR)  # searched: a subject holds at least one visible character
# The exact `iss`: https, or http to a loopback address (a test issuer); a
# host, a port, a path with no trailing slash; no user, query or fragment.
ISSUER_URL = re.compile(
    r"^(?:https://(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])"
    rf"|http://(?:127\.{_OCTET}\.{_OCTET}\.{_OCTET}|localhost|\[::1\]))(?::{_PORT})?"
    rf"(?:/[^?#{INVISIBLE}]*[^/?#{INVISIBLE}])?$")
MAX_ISSUER = 512
MAX_LABEL = 512


class Report(Protocol):
    def add(self, path: Path, message: str) -> None: ...

    def written(self, path: Path) -> str | None:
        """The scalar at `path` as the file writes it (`0123456`, where YAML reads another number)."""


class Fields:
    """One `issuers:` item being read, its problems reported at their lines."""

    def __init__(self, item: dict[str, Any], path: Path, report: Report, project: str) -> None:
        self.item = item
        self.path = path
        self.report = report
        self.project = project  # the file's project

    def problem(self, key: str | None, message: str, *index: int) -> None:
        self.report.add(self.path + ((key,) if key is not None else ()) + index, message)

    # -- shapes any provider may use -------------------------------------------------------

    def strings(self, key: str) -> tuple[str, ...] | None:
        return strings(self.item, key, self.path, self.report)

    def numeric_id(self, key: str, *, required: bool) -> str | None:
        if key not in self.item:
            if required:
                self.problem(None, f"{key} is required: bindings name immutable ids, because names can be renamed or "
                             "re-registered")
            return None
        value = self.item[key]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # Tokens carry ids as strings, and an unquoted number is open to how
            # YAML reads it: 0123 is 83 to the gateway's YAML 1.1 reader and 123
            # to an editor's YAML 1.2 one, and 1_000 is 1000 to one and text to
            # the other.  So the message quotes the text as written, never the
            # number a reader made of it.
            written = self.report.written(self.path + (key,)) or "the id as your CI shows it"
            self.problem(key, f"{key} must be quoted, as the tokens carry it: {key}: \"{written}\" "
                         "(unquoted, YAML readers can take it for another number)")
            return None
        if not isinstance(value, str) or not NUMERIC_ID.fullmatch(value):
            self.problem(key, f"{key} must be the numeric id, quoted, e.g. \"123456\"")
            return None
        return value

    def env_name(self, key: str, *, required: bool) -> str | None:
        if key not in self.item:
            if required:
                self.problem(None, f"{key} is required: the name of the environment variable holding the secret")
            return None
        value = self.item[key]
        if not isinstance(value, str) or not ENV_NAME.fullmatch(value):
            self.problem(key, f"{key} must be an environment variable name such as ACME_CANARY_SECRET")
            return None
        if value.upper().startswith("RELAYROOM_"):
            # RELAYROOM_GITHUB_WEBHOOK_SECRET named here would hand the hub-wide
            # secret to a binding that never opted in with github_app: true.
            self.problem(key, f"{key}: {value} is one of the gateway's own settings; name a variable that holds this "
                         "binding's secret alone")
            return None
        return value

    def label(self, key: str) -> str | None:
        """A name for people (the binding itself is an id)."""
        if key not in self.item:
            return None
        value = self.item[key]
        if not isinstance(value, str) or len(value) > MAX_LABEL:
            self.problem(key, f"{key} is a name for people, a string of at most {MAX_LABEL} characters")
            return None
        return value

    def flag(self, key: str) -> bool:
        """A YAML boolean only: `"yes"` or `1` is a typo to report, not a quiet opt-in."""
        value = self.item.get(key, False)
        if not isinstance(value, bool):
            self.problem(key, f"{key} must be true or false")
            return False
        return value

    # -- what every CI binding has -------------------------------------------------------------

    def issuer(self, default: str | None) -> str | None:
        if "issuer" not in self.item:
            if default is None:
                self.problem(None, "issuer is required: the exact `iss` of this CI system's tokens, e.g. "
                             "https://ci.example.com")
            return default
        problem = issuer_problem(self.item["issuer"])
        if problem:
            self.problem("issuer", problem)
            return None
        value: str = self.item["issuer"]
        return value

    def refs(self, provider: type[Binding]) -> tuple[str, ...] | None:
        if "refs" not in self.item:
            if provider.REFS_REQUIRED:
                self.problem(None, "refs is required: list the refs whose runs may vote (e.g. [refs/heads/main]), or "
                             "[\"*\"] for any ref; without it anyone who can push a branch and run CI there could vote")
            return None
        refs = self.strings("refs")
        if refs is None:
            return None
        if "*" in refs and len(refs) > 1:
            self.problem("refs", "\"*\" already allows every ref; write it alone")
        for index, ref in enumerate(refs):
            problem = provider.check_ref(ref) if ref != "*" else None
            if problem:
                self.problem("refs", problem, index)
        return refs

    def workflows(self, provider: type[Binding]) -> tuple[str, ...] | None:
        workflows = self.strings("workflows")
        for index, workflow in enumerate(workflows or ()):
            problem = provider.check_workflow(workflow)
            if problem:
                self.problem("workflows", problem, index)
        return workflows

    def shared_with(self) -> tuple[str, ...]:
        """The other projects whose maps may bind this binding's repository too
        (each of them must name this project back: the conflicts check it)."""
        projects = self.strings("shared_with") or ()
        for index, slug in enumerate(projects):
            if not SLUG.fullmatch(slug):
                self.problem("shared_with", f"shared_with: {slug} is not a project slug (^[a-z0-9][a-z0-9-]{{0,62}}$)",
                             index)
            elif slug == self.project:
                self.problem("shared_with", f"shared_with names {slug}, this file's own project; name the other "
                             "projects whose maps bind this repository", index)
        return projects


def strings(item: dict[str, Any], key: str, path: Path, report: Report) -> tuple[str, ...] | None:
    """A non-empty list of strings without spaces (duplicates dropped); None when absent."""
    if key not in item:
        return None
    value = item[key]
    if not isinstance(value, list) or not value:
        report.add(path + (key,), f"{key} must be a non-empty list of strings")
        return None
    for index, element in enumerate(value):
        if not isinstance(element, str) or not NO_SPACE.fullmatch(element):
            report.add(path + (key, index), f"each item of {key} is a string without spaces")
            return None
    return tuple(dict.fromkeys(value))


def issuer_problem(value: Any) -> str | None:
    """None when `value` is an issuer a map may name (ISSUER_URL decides);
    otherwise the likeliest reason it is not."""
    if not isinstance(value, str) or len(value) > MAX_ISSUER:
        return "issuer must be a URL such as https://gitlab.example.com"
    if ISSUER_URL.fullmatch(value):
        return None
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError:
        return "issuer has a port that is not a number from 1 to 65535"
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return "issuer must be an https:// URL, written exactly as the tokens carry it in iss"
    if parts.username or parts.password or parts.query or parts.fragment:
        return "issuer must not carry a user, a query or a fragment"
    if value.endswith("/"):
        return "issuer must not end with /: write it exactly as the tokens carry it in iss"
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        return "issuer must be https:// (plain http is only for a loopback test issuer)"
    return ("issuer must be https://HOST[:PORT][/PATH] (or http:// to 127.x.x.x, localhost or [::1]), "
            "written exactly as the tokens carry it in iss")


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
