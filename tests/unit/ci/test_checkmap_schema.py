"""The check map schema (what an editor checks) and `relayroom checkmap check`
(what the gateway loads) say the same thing.

The schema's patterns are matched as editors match them, with ECMA-262
regular expressions (`regress`), not Python's `re`: a trailing newline, or
which characters `\\s` means, would otherwise hide a disagreement.  Every
shipped example and the map quickstart writes pass both; random maps, drawn
near the edges of every rule, are accepted by both or refused by both.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.ci import providers
from gateway.ci.checkmaps import validate
from gateway.ci.checkmaps.validate import validate_text
from gateway.ci.providers import fields, oidc, webhook
from gateway.ci.providers.issuers import issuer_system
from gateway.cli.quickstart import DEMO_CHECKMAP, SCHEMA
from tests.conftest import free_port

jsonschema = pytest.importorskip("jsonschema")
regress = pytest.importorskip("regress")

ROOT = Path(__file__).resolve().parents[3]
SCHEMA_FILE = ROOT / "checkmaps" / "checkmap.schema.json"
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the gateway's reader (yaml_lines)


@functools.lru_cache(maxsize=None)
def ecma(pattern: str) -> Any:
    return regress.Regex(pattern)


def _ecma_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and ecma(pattern).find(instance) is None:
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


EditorValidator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": _ecma_pattern})


@functools.lru_cache(maxsize=1)
def editor() -> Any:
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return EditorValidator(schema)


def schema_errors(text: str) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in editor().iter_errors(yaml.load(text, Loader=LOADER))]


def gateway_problems(text: str) -> list[str]:
    return [str(p) for p in validate_text(text, "map.yaml")[1]]


def schema_line(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("# yaml-language-server: $schema="):
            return line.split("=", 1)[1].strip()
    return None


# -- one source of truth --------------------------------------------------------


def test_the_schema_file_is_the_one_the_package_ships() -> None:
    assert SCHEMA_FILE.resolve() == SCHEMA.resolve() and SCHEMA.exists()


def test_the_schemas_patterns_are_the_validators_own() -> None:
    schema = json.loads(SCHEMA_FILE.read_text())
    defs, github = schema["$defs"], schema["$defs"]["github"]["properties"]
    assert schema["properties"]["project"]["pattern"] == validate.SLUG.pattern
    assert schema["properties"]["checks"]["propertyNames"]["pattern"] == validate.CHECK_NAME.pattern
    assert defs["numericId"]["pattern"] == fields.NUMERIC_ID.pattern
    assert defs["envName"]["pattern"] == fields.ENV_NAME.pattern
    assert defs["issuerUrl"]["pattern"] == fields.ISSUER_URL.pattern
    assert defs["issuerUrl"]["maxLength"] == fields.MAX_ISSUER
    assert defs["token"]["pattern"] == fields.NO_SPACE.pattern
    assert defs["label"]["maxLength"] == fields.MAX_LABEL
    assert defs["sharedWith"]["items"]["pattern"] == validate.SLUG.pattern
    assert defs["entryId"]["pattern"] == validate.ENTRY_ID.pattern
    assert defs["webhook"]["properties"]["source"]["pattern"] == webhook.SOURCE.pattern
    assert defs["oidc"]["properties"]["subject"]["pattern"] == fields.VISIBLE.pattern
    assert defs["oidc"]["properties"]["subject"]["maxLength"] == oidc.MAX_SUBJECT
    assert github["workflows"]["items"]["pattern"] == providers.github.WORKFLOW.pattern
    assert set(defs["check"]["properties"]) == validate.CHECK_KEYS
    assert set(schema["properties"]) == validate.TOP_KEYS


def test_the_schema_has_one_binding_shape_per_provider_with_its_keys() -> None:
    schema = json.loads(SCHEMA_FILE.read_text())
    shapes = [schema["$defs"][item["$ref"].rsplit("/", 1)[1]] for item in schema["properties"]["issuers"]["items"]["oneOf"]]
    by_provider = {shape["properties"]["provider"]["const"]: set(shape["properties"]) for shape in shapes}
    assert by_provider == {name: set(cls.keys()) for name, cls in providers.PROVIDERS.items()}


def shipped_maps() -> list[tuple[str, str, Path]]:
    maps = [(p.name, p.read_text(), p.parent) for p in sorted((ROOT / "checkmaps" / "examples").glob("*.yaml"))]
    return maps + [("quickstart demo.yaml", DEMO_CHECKMAP, SCHEMA.parent)]


@pytest.mark.parametrize("name,text,folder", shipped_maps(), ids=[m[0] for m in shipped_maps()])
def test_every_shipped_map_passes_both_and_names_the_schema(name: str, text: str, folder: Path) -> None:
    assert gateway_problems(text) == []
    assert schema_errors(text) == []
    pointer = schema_line(text)
    assert pointer is not None, f"{name} has no yaml-language-server $schema line"
    assert (folder / pointer).resolve() == SCHEMA.resolve()


def test_quickstart_writes_a_map_that_passes_both_with_the_schema_beside_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "quickstart", "--port", str(free_port())], env=env,
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    maps = tmp_path / ".relayroom" / "checkmaps"
    demo, beside = maps / "demo.yaml", maps / "checkmap.schema.json"
    try:
        deadline = time.monotonic() + 30
        while not (demo.exists() and beside.exists() and beside.stat().st_size):
            assert proc.poll() is None and time.monotonic() < deadline, "quickstart wrote no map"
            time.sleep(0.05)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    text = demo.read_text()
    assert gateway_problems(text) == [] and schema_errors(text) == []
    assert (demo.parent / str(schema_line(text))).read_bytes() == SCHEMA.read_bytes()
    cli = subprocess.run([sys.executable, "-m", "gateway", "checkmap", "check", str(demo.parent)], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stdout + cli.stderr


GOOD = """\
project: acme
issuers:
  - provider: github-actions
    repository: acme/api
    repository_id: "123456"
    refs: [refs/heads/main]
checks:
  migrations:
    supports: [kn_00000000000000000000000001]
"""


@pytest.mark.parametrize("change,message", [
    (('"123456"', "123456"), 'repository_id must be quoted, as the tokens carry it: repository_id: "123456"'),
    (('"123456"', "0123"), 'repository_id must be quoted'),  # 83 to PyYAML, 123 to an editor
    (("    refs: [refs/heads/main]\n", '    refs: [refs/heads/main]\n    description: 7\n'), "description is text"),
    (("repository: acme/api", "repository: null"), "repository is a name for people"),
    (("- provider: github-actions\n", "- provider: github-actions\n    issuer: http://127.0.0.1:ISSUER_PORT\n"),
     "issuer has a port that is not a number"),
    (("- provider: github-actions\n", "- provider: github-actions\n    issuer: HTTPS://ghe.example.com\n"),
     "issuer must be"),
    (("project: acme", 'project: "acme\\n"'), "project must be a project slug"),
    (("[kn_00000000000000000000000001]", '["kn\\u00a01"]'), "is not an entry id"),
])
def test_what_the_schema_refuses_the_gateway_refuses(change: tuple[str, str], message: str) -> None:
    assert gateway_problems(GOOD) == [] and schema_errors(GOOD) == []
    text = GOOD.replace(*change)
    problems = gateway_problems(text)
    assert any(message in p for p in problems), problems
    assert schema_errors(text), text


# -- random maps: accepted by both or refused by both ---------------------------

# Characters on both sides of every "visible" rule: spaces and controls that
# Python and JavaScript class differently (\x1c, \x85, \xa0, \u2028, \ufeff).
EDGE = "aZ09-_./:@*é✓ \t\n\x1c\x7f\x85\xa0\u2028\u200b\ufeff"
# Check names: the gateway also wants them printable (a rule the schema cannot
# state), so they are drawn from characters where printable means "no control".
NAME_CHARS = "aZ09-_./: é✓\t\n\x1c\x7f\x85"
edge_text = st.text(alphabet=EDGE, min_size=0, max_size=12)


def pool(*values: Any) -> st.SearchStrategy[Any]:
    return st.sampled_from(values)


def mostly(good: tuple[Any, ...], bad: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    """A value that passes (29 times in 30), or one near the edge on either
    side: from `bad` (which mixes passing and failing edge values) or edge text."""
    return st.integers(0, 29).flatmap(lambda n: pool(*good) if n else st.one_of(pool(*bad), edge_text))


IDS = mostly(("123456", "42", "1" * 20), ("1" * 21, "", "12a", "٣", "123\n", 123456, 0, True, None, "whsec_1"))
ENV = mostly(("ACME_SECRET",), ("_X", "a1", "1A", "RELAYROOM_GITHUB_WEBHOOK_SECRET", "relayroom_x", "whsec_AB", "A B",
                                "A" * 129, 5))
LABEL = mostly(("acme/api",), ("x" * 512, "x" * 513, None, 5, "whsec_1", ""))
DESCRIPTION = mostly(("why this binding",), (5, None, ["a"], "whsec_1"))
GITHUB_REFS = mostly(("refs/heads/main", "refs/tags/v1", "*"), ("main", "refs/", "refs/pull/1/merge", "whsec_1", 7))
GITLAB_REFS = mostly(("main", "refs/heads/main", "refs/tags/v1", "*"), ("refs/pull/1", "refs/merge-requests/1", 7))
WORKFLOWS = mostly((".github/workflows/ci.yml", "acme/shared/.github/workflows/m.yml@refs/tags/v2"),
                   (".github/workflows/ci.yaml", ".github/workflows/ci.json", "ci.yml", "a/b/c/.github/workflows/x.yml",
                    ".github/workflows/a b.yml", ".gitlab-ci.yml", "acme/api//ci/pipeline.yml"))
EVENTS = mostly(("workflow_run", "merge_request_event"), ("push", "a b", ""))
GITLAB_ISSUERS = mostly(("https://gitlab.example.com", "http://127.0.0.1:9102"), (
    "https://gitlab.example.com/", "http://localhost:8080/gl", "http://[::1]", "http://10.0.0.2",
    "https://gitlab.example.com?x=1", "https://u@gitlab.example.com", "HTTPS://gitlab.example.com",
    "https://gitlab.example.com:99999", "http://127.0.0.1:PORT", "https://git lab.example.com", "http://127.0.0.256",
    "ftp://gitlab.example.com", "https://gitlab.example.com/a b", "https://gitlab.example.com#f", "https://", 42, "x" * 600))
GITHUB_ISSUERS = mostly(("https://ghe.example.com/_services/token",), (
    "http://127.0.0.1:9101", "https://ghe.example.com/", "https://ghe.example.com:8443", "https://[2001:db8::1]/t",
    "http://ghe.example.com"))
OIDC_ISSUERS = mostly(("https://ci.example.com",), ("https://ci.example.com/", "http://127.0.0.3:1", "https://ci.example.com/a/b",
                                                    "https://ci.example.com/a?b", "https://c i.example.com", 3))
SUBJECTS = mostly(("repo:acme/api",), ("   ", "\u2028", "x" * 1024, "x" * 1025, "", 5, "whsec_1"))
SOURCES = mostly(("nightly-canary",), ("a.b_c", "github", "Nightly", "-x", "whsec_1", "x" * 64, 9))
SUPPORTS = mostly(("kn_01JD8XQ4M3V9T7R2K5N6P8W0YZ", "kn_" + "0" * 26, "kn_nope"),
                  ("ENTRY_ID", "not-an-id", "kn_", "kn_a-b", "kn_" + "x" * 65, "x" * 513, 5))
FLAG = mostly((True, False), ("yes", 1))
SHARED = mostly(("beta", "gamma-2"), ("Beta", "-x", "a" * 64, "beta\n", "", 5, "whsec_1"))
EXTRA_KEYS = pool("ref", "token", "secret", "Secret", "notes")


def lists(items: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.integers(0, 14).flatmap(lambda n: st.lists(items, min_size=1, max_size=3) if n else st.one_of(
        st.just([]), items))


@st.composite
def binding(draw: Any) -> dict[str, Any]:
    provider = draw(mostly(("github-actions", "gitlab", "oidc", "webhook"), ("jenkins", None)))
    fields: dict[str, st.SearchStrategy[Any]] = {}
    required: set[str] = set()
    if provider == "github-actions":
        fields = {"issuer": GITHUB_ISSUERS, "repository": LABEL, "repository_id": IDS, "repository_owner_id": IDS,
                  "refs": lists(GITHUB_REFS), "workflows": lists(WORKFLOWS), "webhook_secret_env": ENV,
                  "github_app": FLAG, "allow_events": lists(EVENTS), "shared_with": lists(SHARED)}
        required = {"repository_id", "refs"}
    elif provider == "gitlab":
        fields = {"issuer": GITLAB_ISSUERS, "project_path": LABEL, "project_id": IDS, "namespace_id": IDS,
                  "refs": lists(GITLAB_REFS), "workflows": lists(WORKFLOWS), "allow_events": lists(EVENTS),
                  "shared_with": lists(SHARED)}
        required = {"project_id", "refs"}
    elif provider == "oidc":
        fields = {"issuer": OIDC_ISSUERS, "subject": SUBJECTS, "refs": lists(GITHUB_REFS), "shared_with": lists(SHARED)}
        required = {"issuer", "subject"}
    elif provider == "webhook":
        fields = {"source": SOURCES, "secret_env": ENV}
        required = {"source", "secret_env"}
    out: dict[str, Any] = {} if provider is None else {"provider": provider}
    for key, strategy in fields.items():
        # Required keys are nearly always there; optional ones about half the time.
        if draw(st.integers(0, 29)) < (29 if key in required else 15):
            out[key] = draw(strategy)
    if draw(st.integers(0, 9)) == 0:
        out["description"] = draw(DESCRIPTION)
    if draw(st.integers(0, 19)) == 0:
        out[draw(EXTRA_KEYS)] = "x"
    return out


@st.composite
def check(draw: Any) -> Any:
    if draw(st.integers(0, 19)) == 0:
        return draw(pool(None, [], "kn_00000000000000000000000001", {"support": ["kn_00000000000000000000000001"]}))
    spec: dict[str, Any] = {"supports": draw(st.one_of(st.lists(SUPPORTS, max_size=3), pool(None, "kn_00000000000000000000000001")))}
    if draw(st.booleans()):
        spec["workflows"] = draw(lists(WORKFLOWS))
    if draw(st.integers(0, 9)) == 0:
        spec["description"] = draw(DESCRIPTION)
    return spec


@st.composite
def checkmaps(draw: Any) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if draw(st.integers(0, 19)):
        data["project"] = draw(mostly(("acme", "demo-1"), ("Acme", "-x", "a" * 63, "a" * 64, "acme\n", "", 5)))
    if draw(st.integers(0, 19)):
        data["issuers"] = draw(st.integers(0, 19).flatmap(
            lambda n: st.lists(binding(), min_size=1, max_size=3) if n else pool([], None, "github")))
    if draw(st.integers(0, 4)):
        names = mostly(("migrations", "tests-beside-files", "x" * 200), ("x" * 201, "", "a\tb", "\x85")).map(
            str) | st.text(NAME_CHARS, min_size=1, max_size=8).filter(str.isprintable) | st.text(NAME_CHARS, max_size=3)
        data["checks"] = draw(st.integers(0, 19).flatmap(
            lambda n: st.dictionaries(names, check(), max_size=3) if n else pool(None, [], "x")))
    if draw(st.integers(0, 9)) == 0:
        data["description"] = draw(DESCRIPTION)
    if draw(st.integers(0, 19)) == 0:
        data[draw(EXTRA_KEYS)] = "x"
    return data


def gateway_only(data: dict[str, Any]) -> bool:
    """A map that only the gateway can judge: one secret variable named twice
    (one sender, one voice), a binding sharing with the file's own project, or a generic binding of a host a GitLab or
    GitHub binding of the file names (bound by ids, never by `sub`); or a
    file holding U+0085, U+2028 or U+2029 as raw characters, which YAML 1.1
    reads as line breaks and YAML 1.2 as characters (the gateway refuses the
    file; what an editor makes of it depends on where the character sits)."""
    text = yaml.dump(data, Dumper=NoAliases, allow_unicode=True, sort_keys=False)
    if any(c in validate.LINE_BREAKS_IN_DISPUTE for c in text):
        return True
    bindings = [b for b in (data.get("issuers") or []) if isinstance(b, dict)] if isinstance(data.get("issuers"), list) else []
    names = [b.get(k) for b in bindings for k in ("secret_env", "webhook_secret_env") if isinstance(b.get(k), str)]
    def binds_by(binding: dict[str, Any]) -> str | None:
        cls = providers.PROVIDERS.get(binding.get("provider"))
        return cls.BINDS_BY if cls is not None else None

    hosts = {issuer_system(b["issuer"]) for b in bindings if binds_by(b) == "ids"
             and isinstance(b.get("issuer"), str) and fields.issuer_problem(b["issuer"]) is None}
    generic = {issuer_system(b["issuer"]) for b in bindings if binds_by(b) == "subject"
               and isinstance(b.get("issuer"), str) and fields.issuer_problem(b["issuer"]) is None}
    own = any(data.get("project") in b["shared_with"] for b in bindings if isinstance(b.get("shared_with"), list))
    return len(names) != len(set(names)) or bool(hosts & generic) or own


class NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


VERDICTS: Counter[str] = Counter()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(checkmaps())
def _schema_and_gateway_agree(data: dict[str, Any]) -> None:
    text = yaml.dump(data, Dumper=NoAliases, allow_unicode=True, sort_keys=False)
    if gateway_only(data):
        return
    gateway, schema = gateway_problems(text), schema_errors(text)
    VERDICTS["accepted" if not gateway else "refused"] += 1
    assert bool(gateway) == bool(schema), f"{text}\ngateway: {gateway}\nschema: {schema}"


def test_random_maps_are_accepted_by_both_or_refused_by_both() -> None:
    VERDICTS.clear()
    _schema_and_gateway_agree()
    # The draw reaches both sides of the line, or agreement would prove little.
    assert VERDICTS["accepted"] >= 20 and VERDICTS["refused"] >= 20, VERDICTS
