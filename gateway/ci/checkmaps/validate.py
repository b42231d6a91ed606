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

import difflib
import hashlib
import re
from typing import Any, Iterable

from gateway.ci.checkmaps.model import CheckMap, CheckRule, Problem
from gateway.ci.checkmaps.yaml_lines import Locator, Path, load
from gateway.ci.providers import PROVIDERS, Binding, id_issuers
from gateway.ci.providers.fields import Fields, strings
from gateway.ci.providers.issuers import issuer_system
from gateway.knowledge.settings import SLUG


MAX_FILE_BYTES = 256 * 1024
LINE_BREAKS_IN_DISPUTE = frozenset("\u0085\u2028\u2029")
# As checkmap.schema.json's patterns (a test holds them equal); a check name
# is also printable, which a schema cannot say.
CHECK_NAME = re.compile(r"^[^\u0000-\u001f\u007f-\u009f]{1,200}$")
# Loose on purpose: an id of the right shape that no entry of the project has
# is reported and never supported, it does not fail the file.
ENTRY_ID = re.compile("^kn_[0-9A-Za-z]{1,64}$")
MAX_CHECK_NAME = 200
# Caps inside one file, far above what a project needs: each past-the-cap
# item is a FILE:LINE problem, so the file fails and its last good version stays.
MAX_BINDINGS = 50  # issuers: CI systems (or repositories) that may vote for one project
MAX_CHECKS = 2000  # checks: CI check names mapped in one project
MAX_SUPPORTS = 100  # entry ids one check supports

TOP_KEYS = {"project", "issuers", "checks", "description"}
CHECK_KEYS = {"supports", "workflows", "description"}
SECRET_KEYS = {"secret", "webhook_secret", "password", "token", "client_secret"}


class _Collector:
    def __init__(self, file: str, locator: Locator) -> None:
        self.file = file
        self.locator = locator
        self.problems: list[Problem] = []

    def add(self, path: Path, message: str) -> None:
        self.problems.append(Problem(self.file, self.locator.line(path), message))

    def written(self, path: Path) -> str | None:
        return self.locator.written(path)


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
            out.add((key,), unknown_key(key, TOP_KEYS - set(data), f"unknown key {key!s}; a check map has "
                                        f"{', '.join(sorted(TOP_KEYS))}"))
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
                    project_line=out.locator.line(("project",)), content=decoded), []


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
    """One `issuers:` item, read by its provider's class (`gateway.ci.providers`)."""
    if not isinstance(item, dict):
        out.add(path, "each issuer is a mapping starting with provider:")
        return None
    name = item.get("provider")
    provider = PROVIDERS.get(name) if isinstance(name, str) else None
    if provider is None:
        out.add(path + ("provider",), f"provider must be one of {', '.join(PROVIDERS)}")
        return None
    before = len(out.problems)
    for key in item:
        if key not in provider.keys() and str(key).lower() not in SECRET_KEYS:
            out.add(path + (key,), unknown_key(key, provider.keys() - set(item), f"unknown key {key!s} for provider {provider.NAME}; "
                                               f"allowed: {', '.join(sorted(provider.keys()))}"))
    _description(item, path, out)
    fields = Fields(item, path, out, project)
    common: dict[str, Any] = {"project": project, "file": out.file, "line": out.locator.line(path)}
    if provider.OIDC:
        common["issuer"] = fields.issuer(provider.DEFAULT_ISSUER)
    if "refs" in provider.KEYS:
        common["refs"] = fields.refs(provider)
    if "workflows" in provider.KEYS:
        common["workflows"] = fields.workflows(provider)
    if "allow_events" in provider.KEYS:
        # Any event name: each one lifts the refusal of that event for this binding, so a reviewer reads
        # exactly which events were let in.
        common["allow_events"] = fields.strings("allow_events") or ()
    if "shared_with" in provider.KEYS:
        common["shared_with"] = fields.shared_with()
    own = provider.read(fields)
    if len(out.problems) > before:
        return None
    return provider(**common, **own)


def _one_voice_each(bindings: list[Binding], out: _Collector) -> None:
    """Inside one file, what `conflicts` enforces across files: one binding
    per secret variable, and no issuer bound by sub that has immutable ids."""
    seen: dict[str, Binding] = {}
    for binding in bindings:
        for name in binding.secret_names():
            if name in seen:
                out.problems.append(Problem(out.file, binding.line, f"the secret variable {name} is already named by "
                                            f"the binding at line {seen[name].line}; one secret is one sender, and one "
                                            "sender is one voice: give each binding its own variable"))
            else:
                seen[name] = binding
    # Compared by host: GitHub's per-enterprise issuers (https://token.actions.
    # githubusercontent.com/SLUG) carry the same ids as the default one.
    by_id = {issuer_system(i) for i in id_issuers()}
    by_id |= {issuer_system(b.issuer) for b in bindings if b.BINDS_BY == "ids" and b.issuer}
    for binding in bindings:
        if binding.BINDS_BY == "subject" and binding.issuer and issuer_system(binding.issuer) in by_id:
            id_providers = " or ".join(cls.NAME for cls in PROVIDERS.values() if cls.BINDS_BY == "ids")
            out.problems.append(Problem(out.file, binding.line, f"{binding.issuer} has immutable ids: bind it with "
                                        f"provider: {id_providers}, never by sub, which names can be made to match"))


def allow_event_notes(checkmap: CheckMap) -> list[Problem]:
    """One note per event a binding lets vote on purpose: the reviewer of
    the map should see each one (they are not problems: the map loads)."""
    return [Problem(checkmap.file, binding.line, f"note: {binding.allow_event_note(event)}", severity="note")
            for binding in checkmap.bindings for event in binding.allow_events]


def unknown_key(key: Any, allowed: Iterable[str], otherwise: str) -> str:
    """The problem of a key no map may hold there: the likeliest meant key
    (among those `allowed` and not written yet) when it looks like a
    misspelling (`suports`), else `otherwise`."""
    meant = _closest(key, allowed)
    return f"unknown key {key!s}: did you mean `{meant}`?" if meant is not None else otherwise


def _closest(key: Any, allowed: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(str(key), sorted(allowed), n=1, cutoff=0.75)
    return found[0] if found else None


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
        misspelt = False
        for key in spec:
            if key not in CHECK_KEYS:
                out.add(path + (key,), unknown_key(key, CHECK_KEYS - set(spec), f"unknown key {key!s} in check {name}; allowed: "
                                                   f"{', '.join(sorted(CHECK_KEYS))}"))
                misspelt = misspelt or _closest(key, CHECK_KEYS - set(spec)) == "supports"
        supports = spec.get("supports")
        if not isinstance(supports, list):
            if "supports" in spec or not misspelt:  # a misspelt `supports` is reported once, above
                out.add(path + ("supports",) if "supports" in spec else path,
                        f"{name}: supports must be a list of entry ids")
            continue
        if len(supports) > MAX_SUPPORTS:
            out.add(path + ("supports", MAX_SUPPORTS), f"{name}: supports lists {len(supports)} entry ids; a check "
                    f"supports at most {MAX_SUPPORTS} (this is id {MAX_SUPPORTS + 1})")
            continue
        ids: list[str] = []
        for index, entry_id in enumerate(supports):
            # Only the shape is checked here; whether the id is an entry of this
            # project is the store's to say (reported, never supported).
            if not isinstance(entry_id, str) or not ENTRY_ID.fullmatch(entry_id):
                written = out.written(path + ("supports", index)) or str(entry_id)
                out.add(path + ("supports", index), f"{name}: {written} is not an entry id (kn_ and letters and "
                        "digits, as the gateway shows them: kn_01JD8XQ4M3V9T7R2K5N6P8W0YZ)")
            elif entry_id not in ids:
                ids.append(entry_id)
        workflows = strings(spec, "workflows", path, out)
        rules[name] = CheckRule(name=name, supports=tuple(ids), workflows=workflows, line=out.locator.line(path))
    return rules
