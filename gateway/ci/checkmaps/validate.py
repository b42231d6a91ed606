"""Check map validation: from loaded YAML data to a `CheckMap`, or problems.

Fail closed: an unknown key is a problem (a typo such as `ref:` must not
silently drop the ref restriction), every CI binding pins an immutable id and
lists the refs whose runs may vote, and no secret may be written in the file.
Each problem carries the line it is about.

A file is bounded before it is parsed (MAX_FILE_BYTES, and nesting depth in
`yaml_lines`) and inside: at most MAX_BINDINGS issuers, MAX_CHECKS checks and
MAX_SUPPORTS entry ids per check.  An item past a cap is a problem at its
line, like any other, so the file is not loaded.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from typing import Any
from urllib.parse import urlsplit

from gateway.ci.checkmaps.model import (
    GITHUB_ISSUER,
    GITHUB_VOTING_EVENTS,
    GITLAB_ISSUER,
    PROVIDERS,
    Binding,
    CheckMap,
    CheckRule,
    Problem,
    issuer_system,
)
from gateway.ci.checkmaps.yaml_lines import Locator, Path, load
from gateway.knowledge.settings import SLUG


MAX_FILE_BYTES = 256 * 1024
LINE_BREAKS_IN_DISPUTE = frozenset("\u0085\u2028\u2029")
# The shapes below are, character for character, the `pattern`s of
# checkmap.schema.json (a test holds them equal), and are matched whole
# (`fullmatch`): what an editor's schema check accepts, the gateway accepts.
# No `\s` or `\S`: Python and JavaScript disagree on which characters those
# are, so "visible" is spelled out: no control character, no kind of space.
_INVISIBLE = r"\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200b\u2028\u2029\u202f\u205f\u3000\ufeff"
_VISIBLE = f"[^{_INVISIBLE}]"
_SEGMENT = f"[^/@{_INVISIBLE}]"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_PORT = r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"  # 1 to 65535
SOURCE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
NUMERIC_ID = re.compile(r"^[0-9]{1,20}$")
NO_SPACE = re.compile(f"^{_VISIBLE}{{1,512}}$")
VISIBLE = re.compile(_VISIBLE)  # searched: a subject holds at least one visible character
CHECK_NAME = re.compile(r"^[^\u0000-\u001f\u007f-\u009f]{1,200}$")  # and printable, which a schema cannot say
GITHUB_WORKFLOW = re.compile(
    rf"^(?:{_SEGMENT}+/{_SEGMENT}+/)?\.github/workflows/{_SEGMENT}+\.ya?ml(?:@{_VISIBLE}+)?$")
# The exact `iss`: https, or http to a loopback address (a test issuer); a
# host, a port, a path with no trailing slash; no user, query or fragment.
ISSUER_URL = re.compile(
    r"^(?:https://(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])"
    rf"|http://(?:127\.{_OCTET}\.{_OCTET}\.{_OCTET}|localhost|\[::1\]))(?::{_PORT})?"
    rf"(?:/[^?#{_INVISIBLE}]*[^/?#{_INVISIBLE}])?$")
MAX_ISSUER = 512
MAX_LABEL = 512
MAX_SUBJECT = 1024
MAX_CHECK_NAME = 200
# Caps inside one file, far above what a project needs: each past-the-cap
# item is a FILE:LINE problem, so the file fails and its last good version stays.
MAX_BINDINGS = 50  # issuers: CI systems (or repositories) that may vote for one project
MAX_CHECKS = 2000  # checks: CI check names mapped in one project
MAX_SUPPORTS = 100  # entry ids one check supports

TOP_KEYS = {"project", "issuers", "checks", "description"}
CHECK_KEYS = {"supports", "workflows", "description"}
BINDING_KEYS = {
    "github-actions": {
        "provider", "description", "issuer", "repository", "repository_id", "repository_owner_id",
        "refs", "workflows", "webhook_secret_env", "github_app", "allow_events", "shared_with",
    },
    "gitlab": {
        "provider", "description", "issuer", "project_id", "project_path", "namespace_id",
        "refs", "workflows", "allow_events", "shared_with",
    },
    "oidc": {"provider", "description", "issuer", "subject", "refs", "shared_with"},
    "webhook": {"provider", "description", "source", "secret_env"},
}
SECRET_KEYS = {"secret", "webhook_secret", "password", "token", "client_secret"}


class _Collector:
    def __init__(self, file: str, locator: Locator) -> None:
        self.file = file
        self.locator = locator
        self.problems: list[Problem] = []

    def add(self, path: Path, message: str) -> None:
        self.problems.append(Problem(self.file, self.locator.line(path), message))


def validate_text(text: bytes | str, file: str) -> tuple[CheckMap | None, list[Problem]]:
    """Parse and validate one file.  A map is returned only when there is no problem."""
    raw = text.encode() if isinstance(text, str) else text
    if len(raw) > MAX_FILE_BYTES:
        return None, [Problem(file, 1, f"the file is over {MAX_FILE_BYTES // 1024} KiB; a check map is a short list")]
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, [Problem(file, 1, "the file is not UTF-8 text")]
    for number, line in enumerate(decoded.split("\n"), 1):
        # YAML 1.1 (the gateway's reader) breaks lines at these, YAML 1.2 (an
        # editor's) does not: the same bytes would be two different maps.
        odd = next((c for c in line if c in LINE_BREAKS_IN_DISPUTE), None)
        if odd is not None:
            return None, [Problem(file, number, f"the line holds U+{ord(odd):04X}, which YAML readers disagree on "
                                               "(a line break to some, a character to others); remove it")]
    data, locator, problems = load(decoded, file)
    if problems:
        return None, problems
    out = _Collector(file, locator)
    _scan_for_secrets(data, (), out)
    if not isinstance(data, dict):
        out.add((), "a check map is a mapping with project, issuers and checks")
        return None, sorted(out.problems, key=lambda p: p.line)
    for key in data:
        if key not in TOP_KEYS:
            out.add((key,), f"unknown key {key!s}; a check map has {', '.join(sorted(TOP_KEYS))}")
    _description(data, (), out)
    project = data.get("project")
    if not isinstance(project, str) or not SLUG.fullmatch(project):
        out.add(("project",) if "project" in data else (), "project must be a project slug (^[a-z0-9][a-z0-9-]{0,62}$)")
        project = "?"
    bindings = _bindings(data, project, out)
    _one_voice_each(bindings, out)
    checks = _checks(data, out)
    if out.problems:
        return None, sorted(out.problems, key=lambda p: p.line)
    digest = hashlib.sha256(raw).hexdigest()
    return CheckMap(project=project, file=file, sha256=digest, bindings=tuple(bindings), checks=checks,
                    project_line=out.locator.line(("project",))), []


def _scan_for_secrets(value: Any, path: Path, out: _Collector) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and key.lower() in SECRET_KEYS:
                out.add(path + (key,), f"{key}: a secret must never be written into a check map (it is reviewed and "
                        "stored like code); put it in an environment variable and name that with secret_env")
            _scan_for_secrets(item, path + (key,), out)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _scan_for_secrets(item, path + (index,), out)
    elif isinstance(value, str) and value.startswith("whsec_"):
        out.add(path, "this value looks like a webhook secret; keep secrets in the environment and name them with secret_env")


# -- issuers -----------------------------------------------------------------


def _bindings(data: dict[str, Any], project: str, out: _Collector) -> list[Binding]:
    items = data.get("issuers")
    if not isinstance(items, list) or not items:
        out.add(("issuers",) if "issuers" in data else (), "issuers must be a non-empty list of the CI systems that may vote")
        return []
    if len(items) > MAX_BINDINGS:
        out.add(("issuers", MAX_BINDINGS), f"issuers lists {len(items)} bindings; a check map holds at most "
                f"{MAX_BINDINGS} (this is binding {MAX_BINDINGS + 1})")
        items = items[:MAX_BINDINGS]
    bindings = []
    for index, item in enumerate(items):
        binding = _binding(item, ("issuers", index), project, out)
        if binding is not None:
            bindings.append(binding)
    return bindings


def _binding(item: Any, path: Path, project: str, out: _Collector) -> Binding | None:
    if not isinstance(item, dict):
        out.add(path, "each issuer is a mapping starting with provider:")
        return None
    provider = item.get("provider")
    if provider not in PROVIDERS:
        out.add(path + ("provider",), f"provider must be one of {', '.join(PROVIDERS)}")
        return None
    before = len(out.problems)
    for key in item:
        if key not in BINDING_KEYS[provider] and str(key).lower() not in SECRET_KEYS:
            out.add(path + (key,), f"unknown key {key!s} for provider {provider}; allowed: "
                    f"{', '.join(sorted(BINDING_KEYS[provider]))}")
    _description(item, path, out)
    line = out.locator.line(path)
    fields: dict[str, Any] = {"project": project, "provider": provider, "file": out.file, "line": line}
    if provider == "webhook":
        source = item.get("source")
        if not isinstance(source, str) or not SOURCE.fullmatch(source):
            out.add(path + ("source",), "source must be a name such as nightly-canary (^[a-z0-9][a-z0-9._-]{0,62}$)")
        elif source == "github":
            out.add(path + ("source",), "source github is taken by /v1/webhooks/github; pick another name")
        fields["source"] = source
        fields["secret_env"] = _env_name(item, "secret_env", path, out, required=True)
    else:
        fields["issuer"] = _issuer(item, provider, path, out)
        fields["refs"] = _refs(item, provider, path, out)
        if provider == "github-actions":
            fields["repository"] = _label(item, "repository", path, out)
            fields["repository_id"] = _numeric_id(item, "repository_id", path, out, required=True)
            fields["repository_owner_id"] = _numeric_id(item, "repository_owner_id", path, out, required=False)
            fields["webhook_secret_env"] = _env_name(item, "webhook_secret_env", path, out, required=False)
            fields["github_app"] = _flag(item, "github_app", path, out)
            fields["workflows"] = _workflows(item, path, out, github=True)
        elif provider == "gitlab":
            fields["repository"] = _label(item, "project_path", path, out)
            fields["project_id"] = _numeric_id(item, "project_id", path, out, required=True)
            fields["namespace_id"] = _numeric_id(item, "namespace_id", path, out, required=False)
            fields["workflows"] = _workflows(item, path, out, github=False)
        else:
            subject = item.get("subject")
            if not isinstance(subject, str) or not VISIBLE.search(subject) or len(subject) > MAX_SUBJECT:
                out.add(path + ("subject",), "subject is required: the exact `sub` claim this issuer puts in the "
                        "tokens of the runs that may vote")
            fields["subject"] = subject
        fields["allow_events"] = _allow_events(item, provider, path, out)
        fields["shared_with"] = _shared_with(item, project, path, out)
    if len(out.problems) > before:
        return None
    return Binding(**fields)


# Issuers whose tokens carry immutable ids: bound by those ids, never by `sub`.
# Compared by host: GitHub's per-enterprise issuers (https://token.actions.
# githubusercontent.com/SLUG) carry the same ids as the default one.
ID_ISSUER_HOSTS = (issuer_system(GITHUB_ISSUER), issuer_system(GITLAB_ISSUER))


def _one_voice_each(bindings: list[Binding], out: _Collector) -> None:
    """Inside one file, what `conflicts` enforces across files: one binding
    per secret variable, and no issuer bound by sub that has immutable ids."""
    seen: dict[str, Binding] = {}
    for binding in bindings:
        for name in (binding.secret_env, binding.webhook_secret_env):
            if not name:
                continue
            if name in seen:
                out.problems.append(Problem(out.file, binding.line, f"the secret variable {name} is already named by "
                                            f"the binding at line {seen[name].line}; one secret is one sender, and one "
                                            "sender is one voice: give each binding its own variable"))
            else:
                seen[name] = binding
    by_id = {issuer_system(b.issuer) for b in bindings if b.provider in ("github-actions", "gitlab") and b.issuer}
    for binding in bindings:
        host = issuer_system(binding.issuer) if binding.issuer else None
        if binding.provider == "oidc" and host and (host in ID_ISSUER_HOSTS or host in by_id):
            out.problems.append(Problem(out.file, binding.line, f"{binding.issuer} has immutable ids: bind it with "
                                        "provider: github-actions or gitlab (by repository_id or project_id), never "
                                        "by sub, which names can be made to match"))


def allow_event_notes(checkmap: CheckMap) -> list[Problem]:
    """One note per event a binding lets vote on purpose: the reviewer of
    the map should see each one (they are not problems: the map loads)."""
    notes = []
    for binding in checkmap.bindings:
        for event in binding.allow_events:
            if binding.provider == "github-actions" and event in GITHUB_VOTING_EVENTS:
                text = f"allow_events names {event}, which votes anyway"
            else:
                text = (f"allow_events lifts {event}: runs of this event vote, and they may build code that is not "
                        "on a listed ref")
            notes.append(Problem(checkmap.file, binding.line, f"note: {text}", severity="note"))
    return notes


def _issuer(item: dict[str, Any], provider: str, path: Path, out: _Collector) -> str | None:
    if "issuer" not in item:
        if provider == "github-actions":
            return GITHUB_ISSUER
        if provider == "gitlab":
            return GITLAB_ISSUER
        out.add(path, "issuer is required: the exact `iss` of this CI system's tokens, e.g. https://ci.example.com")
        return None
    value = item["issuer"]
    problem = issuer_problem(value)
    if problem:
        out.add(path + ("issuer",), problem)
        return None
    return value


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


def _refs(item: dict[str, Any], provider: str, path: Path, out: _Collector) -> tuple[str, ...] | None:
    if "refs" not in item:
        if provider == "oidc":
            return None  # a generic issuer is bound by its exact subject, which carries what it scopes
        out.add(path, "refs is required: list the refs whose runs may vote (e.g. [refs/heads/main]), or [\"*\"] for "
                "any ref; without it anyone who can push a branch and run CI there could vote")
        return None
    refs = _string_list(item, "refs", path, out)
    if refs is None:
        return None
    if "*" in refs and len(refs) > 1:
        out.add(path + ("refs",), "\"*\" already allows every ref; write it alone")
    for index, ref in enumerate(refs):
        if ref == "*":
            continue
        if provider == "github-actions" and not ref.startswith("refs/"):
            out.add(path + ("refs", index), f"{ref}: GitHub refs are full names such as refs/heads/{ref} or refs/tags/v1")
        if provider == "gitlab" and ref.startswith("refs/") and not ref.startswith(("refs/heads/", "refs/tags/")):
            out.add(path + ("refs", index), f"{ref}: a GitLab ref is a branch name (main), refs/heads/NAME or refs/tags/NAME")
    return refs


def _workflows(item: dict[str, Any], path: Path, out: _Collector, *, github: bool) -> tuple[str, ...] | None:
    if "workflows" not in item:
        return None
    workflows = _string_list(item, "workflows", path, out)
    if workflows and github:
        for index, workflow in enumerate(workflows):
            if not GITHUB_WORKFLOW.fullmatch(workflow):
                out.add(path + ("workflows", index), f"{workflow}: a GitHub workflow is .github/workflows/NAME.yml, or "
                        "OWNER/REPO/.github/workflows/NAME.yml[@REF] for a reusable workflow of another repository")
    return workflows


def _allow_events(item: dict[str, Any], provider: str, path: Path, out: _Collector) -> tuple[str, ...]:
    """Any event name: each one lifts the refusal of that event for this binding
    (docs/ci-attestations.md, which runs vote), so a reviewer reads exactly which events were let in."""
    if "allow_events" not in item:
        return ()
    return _string_list(item, "allow_events", path, out) or ()


def _shared_with(item: dict[str, Any], project: str, path: Path, out: _Collector) -> tuple[str, ...]:
    """The other projects whose maps may bind this binding's repository too
    (each of them must name this project back, `conflicts` checks)."""
    if "shared_with" not in item:
        return ()
    projects = _string_list(item, "shared_with", path, out) or ()
    for index, slug in enumerate(projects):
        if not SLUG.fullmatch(slug):
            out.add(path + ("shared_with", index), f"shared_with: {slug} is not a project slug "
                    "(^[a-z0-9][a-z0-9-]{0,62}$)")
        elif slug == project:
            out.add(path + ("shared_with", index), f"shared_with names {slug}, this file's own project; name the "
                    "other projects whose maps bind this repository")
    return projects


def _flag(item: dict[str, Any], key: str, path: Path, out: _Collector) -> bool:
    """A YAML boolean only: `github_app: "yes"` or `1` is a typo to report,
    not a quiet opt-in to the hub-wide secret."""
    value = item.get(key, False)
    if not isinstance(value, bool):
        out.add(path + (key,), f"{key} must be true or false")
        return False
    return value


def _string_list(item: dict[str, Any], key: str, path: Path, out: _Collector) -> tuple[str, ...] | None:
    value = item.get(key)
    if not isinstance(value, list) or not value:
        out.add(path + (key,), f"{key} must be a non-empty list of strings")
        return None
    for index, element in enumerate(value):
        if not isinstance(element, str) or not NO_SPACE.fullmatch(element):
            out.add(path + (key, index), f"each item of {key} is a string without spaces")
            return None
    return tuple(dict.fromkeys(value))


def _numeric_id(item: dict[str, Any], key: str, path: Path, out: _Collector, *, required: bool) -> str | None:
    if key not in item:
        if required:
            out.add(path, f"{key} is required: bindings name immutable ids, because names can be renamed or re-registered")
        return None
    value = item[key]
    if isinstance(value, int) and not isinstance(value, bool):
        # Tokens carry ids as strings, and an unquoted number is open to how
        # YAML reads it: 0123 is 83 to the gateway's YAML 1.1 reader and 123
        # to an editor's YAML 1.2 one, and 1_000 is 1000 to one and text to the other.
        out.add(path + (key,), f"{key} must be quoted, as the tokens carry it: {key}: \"{value}\" "
                "(an unquoted number can be read as another number)")
        return None
    if not isinstance(value, str) or not NUMERIC_ID.fullmatch(value):
        out.add(path + (key,), f"{key} must be the numeric id, quoted, e.g. \"123456\"")
        return None
    return value


def _env_name(item: dict[str, Any], key: str, path: Path, out: _Collector, *, required: bool) -> str | None:
    if key not in item:
        if required:
            out.add(path, f"{key} is required: the name of the environment variable holding the secret")
        return None
    value = item[key]
    if not isinstance(value, str) or not ENV_NAME.fullmatch(value):
        out.add(path + (key,), f"{key} must be an environment variable name such as ACME_CANARY_SECRET")
        return None
    if value.upper().startswith("RELAYROOM_"):
        # RELAYROOM_GITHUB_WEBHOOK_SECRET named here would hand the hub-wide
        # secret to a binding that never opted in with github_app: true.
        out.add(path + (key,), f"{key}: {value} is one of the gateway's own settings; name a variable that holds this "
                "binding's secret alone")
        return None
    return value


def _label(item: dict[str, Any], key: str, path: Path, out: _Collector) -> str | None:
    if key not in item:
        return None
    value = item[key]
    if not isinstance(value, str) or len(value) > MAX_LABEL:
        out.add(path + (key,), f"{key} is a name for people, a string of at most {MAX_LABEL} characters")
        return None
    return value


def _description(item: dict[str, Any], path: Path, out: _Collector) -> None:
    if "description" in item and not isinstance(item["description"], str):
        out.add(path + ("description",), "description is text for people, a string")


# -- checks ------------------------------------------------------------------


def _checks(data: dict[str, Any], out: _Collector) -> dict[str, CheckRule]:
    checks = data.get("checks")
    if checks is None:
        return {}
    if not isinstance(checks, dict):
        out.add(("checks",), "checks must be a mapping of check name to {supports: [entry ids]}")
        return {}
    rules: dict[str, CheckRule] = {}
    for position, (name, spec) in enumerate(checks.items()):
        path: Path = ("checks", name)
        if position == MAX_CHECKS:
            out.add(path, f"checks maps {len(checks)} checks; a check map holds at most {MAX_CHECKS} "
                    f"(this is check {MAX_CHECKS + 1})")
            break
        if not isinstance(name, str) or not 1 <= len(name) <= MAX_CHECK_NAME or not name.isprintable():
            out.add(path, f"a check name is 1 to {MAX_CHECK_NAME} printable characters")
            continue
        if not isinstance(spec, dict):
            out.add(path, f"{name} must be a mapping with supports: [entry ids]")
            continue
        _description(spec, path, out)
        for key in spec:
            if key not in CHECK_KEYS:
                out.add(path + (key,), f"unknown key {key!s} in check {name}; allowed: {', '.join(sorted(CHECK_KEYS))}")
        supports = spec.get("supports")
        if not isinstance(supports, list):
            out.add(path + ("supports",) if "supports" in spec else path, f"{name}: supports must be a list of entry ids")
            continue
        if len(supports) > MAX_SUPPORTS:
            out.add(path + ("supports", MAX_SUPPORTS), f"{name}: supports lists {len(supports)} entry ids; a check "
                    f"supports at most {MAX_SUPPORTS} (this is id {MAX_SUPPORTS + 1})")
            continue
        ids: list[str] = []
        for index, entry_id in enumerate(supports):
            # Only the shape is checked here; whether the id is an entry of this
            # project is the store's to say (reported, never supported).
            if not isinstance(entry_id, str) or not NO_SPACE.fullmatch(entry_id):
                out.add(path + ("supports", index), f"{name}: {entry_id!s} is not an entry id")
            elif entry_id not in ids:
                ids.append(entry_id)
        workflows = None
        if "workflows" in spec:
            workflows = _string_list(spec, "workflows", path, out)
        rules[name] = CheckRule(name=name, supports=tuple(ids), workflows=workflows, line=out.locator.line(path))
    return rules
