"""Check map messages that lead a maintainer to the fix (issue 37, item 5).

YAML 1.1 reads `0123456` as the octal number 42798, another public
repository's id: the message quotes the text as written, never a number a
reader made of it.  A misspelt key gets the key it likely meant.  Entry ids
under `supports` have one shape, so a lint without a store refuses
`not-an-id`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.ci.checkmaps.validate import validate_text

ENTRY = "kn_01JD8XQ4M3V9T7R2K5N6P8W0YZ"


def problems_of(text: str) -> list[str]:
    parsed, problems = validate_text(text, "acme.yaml")
    assert parsed is None, "the map is refused"
    return [str(p) for p in problems]


def github(**fields: str) -> str:
    lines = {"repository_id": '"123456"', "refs": "[refs/heads/main]", **fields}
    return "project: acme\nissuers:\n  - provider: github-actions\n" + "".join(
        f"    {key}: {value}\n" for key, value in lines.items()) + f"checks:\n  unit:\n    supports: [{ENTRY}]\n"


@pytest.mark.parametrize("key,written,read_as", [
    ("repository_id", "0123456", "42798"),
    ("repository_id", "1_000", "1000"),
    ("repository_id", "0x1F", "31"),
    ("repository_id", "123456", None),
    ("repository_owner_id", "0777", "511"),
    ("repository_id", "1.5e+3", "1500"),
])
def test_an_unquoted_id_is_echoed_as_written(key: str, written: str, read_as: str | None) -> None:
    [problem] = problems_of(github(**{key: written}))
    assert f'{key}: "{written}"' in problem and problem.startswith("acme.yaml:")
    if read_as is not None:
        assert read_as not in problem.replace(written, ""), problem


def test_a_gitlab_project_id_too() -> None:
    text = f"project: acme\nissuers:\n  - provider: gitlab\n    project_id: 042\n    refs: [main]\n"
    [problem] = problems_of(text)
    assert 'project_id: "042"' in problem and "34" not in problem


@pytest.mark.parametrize("text,meant", [
    (f"project: acme\nissuers:\n  - provider: webhook\n    source: s\n    secret_env: S\nchecks:\n  unit:\n"
     f"    suports: [{ENTRY}]\n", "supports"),
    (f"project: acme\nisuers:\n  - provider: webhook\n    source: s\n    secret_env: S\n", "issuers"),
    (github(repository_id='"1"').replace("    refs: [refs/heads/main]\n", "    ref: [refs/heads/main]\n"), "refs"),
    (github(repositry_id='"1"').replace('    repository_id: "123456"\n', ""), "repository_id"),
    (github(alow_events="[workflow_run]"), "allow_events"),
])
def test_a_misspelt_key_gets_the_key_it_likely_meant(text: str, meant: str) -> None:
    found = problems_of(text)
    assert any(f"did you mean `{meant}`?" in p for p in found), found
    assert not any("supports must be a list" in p for p in found), found


def test_a_key_that_is_no_misspelling_lists_what_is_allowed() -> None:
    [problem] = problems_of(github(ref="[main]"))  # refs is there already: ref is not it misspelt
    assert "unknown key ref for provider github-actions; allowed:" in problem


@pytest.mark.parametrize("item", ["not-an-id", "kn_", "kn_a-b", "kn_" + "x" * 65, "0123"])
def test_supports_items_have_the_entry_id_shape(item: str) -> None:
    [problem] = problems_of(github().replace(f"[{ENTRY}]", f"[{item}]"))
    assert f"unit: {item} is not an entry id" in problem


@pytest.mark.parametrize("item", ["kn_nope", "kn_1", ENTRY.lower(), ENTRY + "0"])
def test_an_id_of_that_shape_no_entry_has_does_not_fail_the_file(item: str) -> None:
    """Such an id is the store's to report (not an entry of the project) and
    is never supported; the map's other checks keep counting."""
    parsed, problems = validate_text(github().replace(f"[{ENTRY}]", f"[{item}, {ENTRY}]"), "acme.yaml")
    assert problems == [] and parsed is not None
    assert parsed.checks["unit"].supports == (item, ENTRY)


def test_an_offline_lint_refuses_not_an_id(tmp_path: Path) -> None:
    (tmp_path / "acme.yaml").write_text(github().replace(ENTRY, "not-an-id"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    result = subprocess.run([sys.executable, "-m", "gateway", "checkmap", "check", str(tmp_path)],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert result.returncode == 1
    assert f"{tmp_path / 'acme.yaml'}:8: unit: not-an-id is not an entry id" in result.stdout
    assert not (tmp_path / "relayroom.db").exists()
