"""Check map files: validation with FILE:LINE problems, the registry's
reload rules (last good version, one file per project, examples not loaded),
store checks, `relayroom checkmap check`, and the JSON Schema for editors."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.ci.checkmaps import CheckmapRegistry, validate_text
from gateway.core.clock import ManualClock
from tests.support.attest_fixtures import learn
from tests.conftest import make_project

ROOT = Path(__file__).resolve().parents[3]

FULL_EXAMPLE = """\
# checkmaps/acme.yaml — maintained in the repository, reviewed like code
project: acme
issuers:
  - provider: github-actions
    repository: acme/api            # for people; the binding is the id below
    repository_id: "123456"
    repository_owner_id: "7890"
    refs: [refs/heads/main]         # required: the refs whose runs may vote ("*": any ref)
    workflows: [".github/workflows/ci.yml"]   # optional, matched against job_workflow_ref
    webhook_secret_env: ACME_GH_WEBHOOK_SECRET   # optional, for workflow_run webhooks
  - provider: gitlab
    issuer: https://gitlab.example.com
    project_id: "42"
    refs: [main]                    # required, as above
  - provider: oidc                  # any other OIDC issuer
    issuer: https://ci.example.com
    subject: "repo:acme/api"        # exact `sub` to bind (an issuer with no immutable id claim)
  - provider: webhook
    source: nightly-canary
    secret_env: ACME_CANARY_SECRET
checks:
  staging-migrations:
    supports: [kn_01JD8XQ4M3V9T7R2K5N6P8W0YZ]
    workflows: [".github/workflows/staging.yml"]   # optional: only these workflows speak for this check
  tests-beside-files:
    supports: [kn_01JD9A2B3C4D5E6F7G8H9J0K1M, kn_01JDAB2C3D4E5F6G7H8J9K0M1N]
"""

GOOD = """\
project: acme
issuers:
  - provider: github-actions
    repository_id: "123456"
    refs: [refs/heads/main]
checks:
  migrations:
    supports: [kn_00000000000000000000000001]
"""


def test_the_contract_example_is_valid() -> None:
    checkmap, problems = validate_text(FULL_EXAMPLE, "acme.yaml")
    assert problems == []
    assert checkmap is not None and checkmap.project == "acme"
    identities = {b.identity for b in checkmap.bindings}
    assert identities == {"oidc:token.actions.githubusercontent.com:acme", "oidc:gitlab.example.com:acme",
                          "oidc:ci.example.com:acme", "webhook:nightly-canary:acme"}
    assert checkmap.checks["staging-migrations"].workflows == (".github/workflows/staging.yml",)


BAD = [
    ("no refs on a GitHub binding", "  - provider: github-actions\n    repository_id: \"1\"\n", 3, "refs is required"),
    ("empty refs", "  - provider: github-actions\n    repository_id: \"1\"\n    refs: []\n", 5, "refs must be a non-empty"),
    ("no refs on a GitLab binding", "  - provider: gitlab\n    project_id: \"42\"\n", 3, "refs is required"),
    ("a name instead of an id", "  - provider: github-actions\n    repository_id: acme/api\n    refs: [refs/heads/main]\n", 4,
     "repository_id must be the numeric id"),
    ("no immutable id", "  - provider: github-actions\n    repository: acme/api\n    refs: [refs/heads/main]\n", 3,
     "repository_id is required"),
    ("a secret in the YAML", "  - provider: webhook\n    source: canary\n    secret: hunter2\n    secret_env: X\n", 5,
     "a secret must never be written"),
    ("a whsec_ value", "  - provider: webhook\n    source: canary\n    secret_env: whsec_abc\n", 5, "looks like a webhook secret"),
    ("a typo drops a restriction", "  - provider: github-actions\n    repository_id: \"1\"\n    refs: [refs/heads/main]\n"
     "    workflow: [.github/workflows/ci.yml]\n", 6, "unknown key workflow"),
    ("a short GitHub ref", "  - provider: github-actions\n    repository_id: \"1\"\n    refs: [main]\n", 5,
     "GitHub refs are full names"),
    ("star with others", "  - provider: github-actions\n    repository_id: \"1\"\n    refs: [\"*\", refs/heads/main]\n", 5,
     "write it alone"),
    ("http issuer off loopback", "  - provider: oidc\n    issuer: http://ci.example.com\n    subject: x\n", 4, "must be https"),
    ("issuer with a trailing slash", "  - provider: oidc\n    issuer: https://ci.example.com/\n    subject: x\n", 4,
     "must not end with /"),
    ("generic issuer without subject", "  - provider: oidc\n    issuer: https://ci.example.com\n", 3, "subject is required"),
    ("unknown provider", "  - provider: jenkins\n", 3, "provider must be one of"),
    ("source named github", "  - provider: webhook\n    source: github\n    secret_env: X\n", 4, "taken by /v1/webhooks/github"),
    ("key written twice", "  - provider: github-actions\n    repository_id: \"1\"\n    refs: [refs/heads/main]\n"
     "    refs: [\"*\"]\n", 6, "written twice"),
    ("an alias", "  - &gh\n    provider: github-actions\n    repository_id: \"1\"\n    refs: [refs/heads/main]\n  - *gh\n", 3,
     "aliases"),
    ("allow_events not a list of names", "  - provider: github-actions\n    repository_id: \"1\"\n    refs: [refs/heads/main]\n"
     "    allow_events: [[push]]\n", 6, "each item of allow_events"),
    ("github_app a string", "  - provider: github-actions\n    repository_id: \"1\"\n    refs: [refs/heads/main]\n"
     "    github_app: \"true\"\n", 6, "github_app must be true or false"),
    ("github_app a number", "  - provider: github-actions\n    repository_id: \"1\"\n    refs: [refs/heads/main]\n"
     "    github_app: 1\n", 6, "github_app must be true or false"),
    ("github_app on gitlab", "  - provider: gitlab\n    project_id: \"1\"\n    refs: [main]\n"
     "    github_app: true\n", 6, "unknown key github_app"),
]


@pytest.mark.parametrize("name,issuers,line,message", BAD, ids=[b[0] for b in BAD])
def test_problems_name_the_file_and_line(name: str, issuers: str, line: int, message: str) -> None:
    text = f"project: acme\nissuers:\n{issuers}checks: {{}}\n"
    checkmap, problems = validate_text(text, "maps/acme.yaml")
    assert checkmap is None
    assert any(p.line == line and message in p.message for p in problems), [str(p) for p in problems]
    assert all(str(p).startswith(f"maps/acme.yaml:{p.line}: ") for p in problems)


@pytest.mark.parametrize("text,message", [
    ("project: Acme!\nissuers: []\n", "project must be a project slug"),
    ("- a\n- b\n", "a check map is a mapping"),
    ("project: acme\nissuers: [\n", "not valid YAML"),
    ("project: acme\n---\nproject: beta\n", "not valid YAML"),
    (GOOD + "  lint:\n    supports: kn_00000000000000000000000001\n", "supports must be a list"),
    (GOOD + "  lint:\n    supports: [kn_00000000000000000000000001]\n    trusted: true\n", "unknown key trusted"),
    (GOOD + "extra: 1\n", "unknown key extra"),
])
def test_more_problems(text: str, message: str) -> None:
    checkmap, problems = validate_text(text, "acme.yaml")
    assert checkmap is None and any(message in p.message for p in problems), [str(p) for p in problems]


def test_yaml_tags_that_build_objects_are_refused() -> None:
    checkmap, problems = validate_text("project: !!python/object/apply:os.system [\"true\"]\nissuers: []\n", "x.yaml")
    assert checkmap is None and problems and "not valid YAML" in problems[0].message


# -- the registry ------------------------------------------------------------------


def registry_for(folder: Path) -> CheckmapRegistry:
    return CheckmapRegistry(folder, ManualClock(start=1_800_000_000))


def test_a_broken_edit_keeps_the_last_good_version(tmp_path: Path) -> None:
    (tmp_path / "acme.yaml").write_text(GOOD)
    registry = registry_for(tmp_path)
    assert registry.reload() is True
    good_sha = registry.status()[0]["sha256"]
    assert registry.snapshot.rule("acme", "migrations") is not None
    (tmp_path / "acme.yaml").write_text(GOOD.replace("refs: [refs/heads/main]", "refs: []"))
    assert registry.reload() is True
    [row] = registry.status()
    assert row["sha256"] == good_sha and row["error"] and "acme.yaml:5: refs must be" in row["error"]
    assert registry.snapshot.rule("acme", "migrations") is not None  # still in force
    (tmp_path / "acme.yaml").write_text(GOOD.replace("kn_00000000000000000000000001", "kn_00000000000000000000000002"))
    registry.reload()
    [row] = registry.status()
    assert row["error"] is None and row["sha256"] != good_sha
    assert registry.snapshot.rule("acme", "migrations").supports == ("kn_00000000000000000000000002",)
    assert registry.reload() is False  # nothing changed


def test_the_poll_reads_only_files_whose_stat_moved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    real_read = Path.read_bytes

    def counting_read(self: Path) -> bytes:
        reads.append(self.name)
        return real_read(self)

    monkeypatch.setattr(Path, "read_bytes", counting_read)
    path = tmp_path / "acme.yaml"
    path.write_text(GOOD)
    an_hour_ago = time.time() - 3600
    os.utime(path, (an_hour_ago, an_hour_ago))
    registry = registry_for(tmp_path)
    assert registry.reload() is True and reads == ["acme.yaml"]
    assert registry.reload() is False and reads == ["acme.yaml"]  # stat unchanged and old: not read again
    # Same size, same (old) mtime: the change time and the content still move.
    path.write_text(GOOD.replace("kn_00000000000000000000000001", "kn_00000000000000000000000002"))
    os.utime(path, (an_hour_ago, an_hour_ago))
    assert registry.reload() is True and reads == ["acme.yaml"] * 2
    assert registry.snapshot.rule("acme", "migrations").supports == ("kn_00000000000000000000000002",)
    # A file written just now is read on every poll until its time is safely past
    # (two writes within one tick of the file clock look alike).
    path.write_text(GOOD.replace("kn_00000000000000000000000001", "kn_00000000000000000000000003"))
    registry.reload()
    assert registry.reload() is False and reads == ["acme.yaml"] * 4


def test_one_file_per_project(tmp_path: Path) -> None:
    """At start neither of two files naming one project is loaded (nothing
    decides for one of them); once one is alone it loads, and a second file
    arriving later is the error while the first stays in force."""
    folder = tmp_path / "maps: team"  # a ": " in the path must not garble the FILE:LINE: message
    folder.mkdir()
    (folder / "a.yaml").write_text(GOOD)
    (folder / "b.yml").write_text(GOOD.replace("kn_00000000000000000000000001", "kn_00000000000000000000000009"))
    registry = registry_for(folder)
    registry.reload()
    rows = {Path(r["file"]).name: r for r in registry.status()}
    a, b = folder / "a.yaml", folder / "b.yml"
    assert rows["a.yaml"]["sha256"] is None and rows["b.yml"]["sha256"] is None
    assert [str(p) for p in registry.problems()] == [
        f"{a}:1: not loaded: project acme is already mapped by {b}; one file per project (neither file is loaded "
        "until one of them changes)",
        f"{b}:1: not loaded: project acme is already mapped by {a}; one file per project (neither file is loaded "
        "until one of them changes)",
    ]
    assert registry.snapshot.rule("acme", "migrations") is None
    b.unlink()
    registry.reload()
    assert registry.snapshot.rule("acme", "migrations").supports == ("kn_00000000000000000000000001",) and registry.problems() == []
    (folder / "0-takeover.yaml").write_text(GOOD.replace("kn_00000000000000000000000001", "kn_00000000000000000000000009"))
    registry.reload()
    assert registry.snapshot.rule("acme", "migrations").supports == ("kn_00000000000000000000000001",)
    assert [str(p) for p in registry.problems()] == [
        f"{folder / '0-takeover.yaml'}:1: not loaded: project acme is already mapped by {a}; one file per project "
        "(that file is in force and stays in force)"
    ]


def test_only_top_level_files_are_loaded(tmp_path: Path) -> None:
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "acme.yaml").write_text(GOOD)
    (tmp_path / "notes.md").write_text("not a map")
    (tmp_path / ".#acme.yaml").write_text("editor lock file")
    registry = registry_for(tmp_path)
    registry.reload()
    assert registry.status() == [] and registry.snapshot.maps == {}


def test_the_shipped_checkmaps_folder_loads_nothing() -> None:
    registry = registry_for(ROOT / "checkmaps")
    registry.reload()
    assert registry.snapshot.maps == {}


async def test_the_store_check_reports_unknown_projects_and_foreign_or_unknown_ids(hub: Any, tmp_path: Path) -> None:
    await make_project(hub, "acme")
    await make_project(hub, "beta")
    mine = await learn(hub, "acme", "Ours.")
    theirs = await learn(hub, "beta", "Theirs.")
    (tmp_path / "acme.yaml").write_text(GOOD.replace("[kn_00000000000000000000000001]", f"[{mine}, {theirs}, kn_nope]"))
    (tmp_path / "ghost.yaml").write_text(GOOD.replace("acme", "ghost").replace("123456", "654321"))
    registry = registry_for(tmp_path)
    registry.reload()
    await registry.check_store(hub.driver)
    messages = [str(p) for p in registry.problems()]
    assert any(f"{theirs} belongs to another project" in m for m in messages)
    assert any("kn_nope is not an entry of project acme" in m for m in messages)
    assert any("project ghost does not exist" in m for m in messages)
    assert not any(mine in m for m in messages)
    rows = {Path(r["file"]).name: r for r in registry.status()}
    assert rows["acme.yaml"]["error"] is None and len(rows["acme.yaml"]["warnings"]) == 2


async def test_readyz_shows_each_file_in_force(hub: Any, client: Any, checkmap_dir: Path) -> None:
    (checkmap_dir / "acme.yaml").write_text(GOOD)
    registry = hub.checkmaps
    await registry.refresh(hub.driver)
    response = await client.get("/readyz")
    assert response.status_code == 200
    [row] = response.json()["checkmaps"]
    assert set(row) >= {"file", "sha256", "loaded_at", "error"}
    assert row["sha256"] == __import__("hashlib").sha256(GOOD.encode()).hexdigest()
    assert row["error"] is None and row["loaded_at"].endswith("Z")


async def test_a_change_is_in_force_within_two_seconds(hub: Any, tmp_path: Path) -> None:
    registry = registry_for(tmp_path)
    task = asyncio.create_task(registry.watch(hub.driver))
    try:
        (tmp_path / "acme.yaml").write_text(GOOD)
        deadline = time.monotonic() + 2.0
        while registry.snapshot.rule("acme", "migrations") is None:
            assert time.monotonic() < deadline, "the new check map was not noticed within 2 s"
            await asyncio.sleep(0.05)
    finally:
        task.cancel()


async def test_validating_a_changed_map_does_not_stall_the_event_loop(
        hub: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.ci.checkmaps.registry as registry_module

    real_validate = registry_module.validate_text

    def slow_validate(raw: bytes, name: str) -> Any:
        time.sleep(0.4)  # a big map: validation holds the thread that runs it
        return real_validate(raw, name)

    monkeypatch.setattr(registry_module, "validate_text", slow_validate)
    registry = registry_for(tmp_path)
    (tmp_path / "acme.yaml").write_text(GOOD)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        await registry.refresh(hub.driver)
    finally:
        task.cancel()
    assert registry.snapshot.rule("acme", "migrations") is not None
    assert ticks >= 10, f"the loop ran only {ticks} times while the map was validated"


async def test_sighup_reloads(hub: Any, tmp_path: Path) -> None:
    registry = registry_for(tmp_path)
    registry.install_sighup(hub.driver)
    try:
        (tmp_path / "acme.yaml").write_text(GOOD)
        os.kill(os.getpid(), signal.SIGHUP)
        deadline = time.monotonic() + 2.0
        while registry.snapshot.rule("acme", "migrations") is None:
            assert time.monotonic() < deadline, "SIGHUP did not reload the check maps"
            await asyncio.sleep(0.02)
    finally:
        registry.remove_sighup()


# -- relayroom checkmap check ---------------------------------------------------------


def run_cli(*args: str, env: dict[str, str] | None = None) -> Any:
    import subprocess
    import sys

    environment = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True, env=environment,
                          timeout=60, cwd=env.get("CWD") if env else None)


def test_cli_reports_file_line_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "acme.yaml").write_text(GOOD.replace("refs: [refs/heads/main]", "refs: []"))
    (tmp_path / "beta.yaml").write_text(GOOD.replace("acme", "beta"))
    result = run_cli("checkmap", "check", str(tmp_path), env={"CWD": str(tmp_path)})
    assert result.returncode == 1
    assert result.stdout.splitlines() == [f"{tmp_path / 'acme.yaml'}:5: refs must be a non-empty list of strings"]
    assert result.stderr.strip().splitlines()[-1].startswith("relayroom: 1 problem")
    assert "Traceback" not in result.stderr


def test_cli_ok_line_and_exit_0(tmp_path: Path) -> None:
    (tmp_path / "acme.yaml").write_text(GOOD)
    result = run_cli("checkmap", "check", str(tmp_path), env={"CWD": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("OK: 1 check map(s)")


def test_cli_checks_ids_against_the_store_when_there_is_one(tmp_path: Path) -> None:
    db = tmp_path / "relayroom.db"
    env = {"RELAYROOM_DATABASE_URL": f"sqlite:///{db}", "CWD": str(tmp_path)}
    assert run_cli("project", "create", "acme", env=env).returncode == 0
    maps = tmp_path / "maps"
    maps.mkdir()
    (maps / "acme.yaml").write_text(GOOD)
    result = run_cli("checkmap", "check", str(maps), env=env)
    assert result.returncode == 1
    assert "acme.yaml:7: migrations: kn_00000000000000000000000001 is not an entry of project acme" in result.stdout


def test_cli_checks_one_file_as_its_repository_publishes_it(tmp_path: Path) -> None:
    """`relayroom checkmap check FILE` in a repository's CI: the problems name
    the file as the repository does, and hidden characters are refused as a
    publication refuses them (the owner reads the file before approving)."""
    (tmp_path / "checkmaps").mkdir()
    (tmp_path / "checkmaps" / "acme.yaml").write_text(GOOD)
    ok = run_cli("checkmap", "check", "checkmaps/acme.yaml", env={"CWD": str(tmp_path)})
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("OK: checkmaps/acme.yaml is a valid check map for project acme")
    (tmp_path / "checkmaps" / "acme.yaml").write_text("# main \u202e niam\n" + GOOD.replace("refs: [refs/heads/main]", "ref: [main]"))
    bad = run_cli("checkmap", "check", "checkmaps/acme.yaml", env={"CWD": str(tmp_path)})
    assert bad.returncode == 1
    assert bad.stdout.splitlines()[0] == ("checkmaps/acme.yaml:1: U+202E at character 8 cannot be seen for what it is; "
                                          "the owner reviews this text, so it holds only what a person can see")
    assert "checkmaps/acme.yaml:6: unknown key ref: did you mean `refs`?" in bad.stdout
    assert bad.stderr.strip().splitlines()[-1].startswith("relayroom: ") and "Traceback" not in bad.stderr


def test_cli_says_a_file_too_big_to_publish_though_the_folder_takes_it(tmp_path: Path) -> None:
    """A folder file may reach 256 KiB; a published one travels in a 64 KiB
    body.  `checkmap check FILE` (the repository's own CI) says so at line 1,
    before the gateway's 413; the folder check still takes the file."""
    (tmp_path / "checkmaps").mkdir()
    def as_json_string(text: str) -> int:
        return len(json.dumps(text, ensure_ascii=False).encode())

    fits = GOOD + ("# " + "x" * 98 + "\n") * 600
    fits += "#" + "x" * (64 * 1024 - as_json_string(fits) - 1)
    assert as_json_string(fits) == 64 * 1024
    (tmp_path / "checkmaps" / "acme.yaml").write_text(fits)
    ok = run_cli("checkmap", "check", "checkmaps/acme.yaml", env={"CWD": str(tmp_path)})
    assert ok.returncode == 0, ok.stdout
    (tmp_path / "checkmaps" / "acme.yaml").write_text(fits + "x")
    big = run_cli("checkmap", "check", "checkmaps/acme.yaml", env={"CWD": str(tmp_path)})
    assert big.returncode == 1
    assert big.stdout.splitlines()[0] == ("checkmaps/acme.yaml:1: as a JSON string this file is 65,537 bytes; a "
                                          "publication's body is at most 65,536 bytes (64 KiB), so the gateway would "
                                          "answer 413 body_too_large")
    assert "413 body_too_large" in big.stdout and "Traceback" not in big.stderr
    folder = run_cli("checkmap", "check", "checkmaps", env={"CWD": str(tmp_path)})
    assert folder.returncode == 0, folder.stdout


def test_cli_checks_one_files_ids_against_the_store(tmp_path: Path) -> None:
    env = {"RELAYROOM_DATABASE_URL": f"sqlite:///{tmp_path / 'relayroom.db'}", "CWD": str(tmp_path)}
    assert run_cli("project", "create", "acme", env=env).returncode == 0
    (tmp_path / "acme.yaml").write_text(GOOD)
    result = run_cli("checkmap", "check", "acme.yaml", env=env)
    assert result.returncode == 1
    assert "acme.yaml:7: migrations: kn_00000000000000000000000001 is not an entry of project acme" in result.stdout


def test_cli_missing_folder(tmp_path: Path) -> None:
    result = run_cli("checkmap", "check", str(tmp_path / "nope"), env={"CWD": str(tmp_path)})
    assert result.returncode == 1 and "is not a folder" in result.stderr.strip().splitlines()[-1]


# -- the JSON Schema for editors -----------------------------------------------------------


def test_the_schema_accepts_the_examples_and_refuses_what_the_gateway_refuses() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "checkmaps" / "checkmap.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    examples = [p.read_text() for p in (ROOT / "checkmaps" / "examples").glob("*.yaml")]
    for text in [FULL_EXAMPLE, GOOD] + [e for e in examples if "ISSUER_PORT" not in e]:  # not the template
        assert list(validator.iter_errors(yaml.safe_load(text))) == []
        assert validate_text(text, "example.yaml")[1] == []
    for bad in (GOOD.replace("    refs: [refs/heads/main]\n", ""),
                GOOD.replace("refs: [refs/heads/main]", "refs: [refs/heads/main]\n    secret: x"),
                GOOD.replace('"123456"', "acme/api")):
        assert list(validator.iter_errors(yaml.safe_load(bad))), bad
        assert validate_text(bad, "bad.yaml")[0] is None


@pytest.mark.parametrize("depth", [40, 600, 20_000])
def test_deep_nesting_is_a_problem_not_a_crash(depth: int) -> None:
    for text in ("project: acme\nx: " + "[" * depth + "]" * depth + "\n",
                 "project: acme\nx: " + "{a: " * depth + "1" + "}" * depth + "\n"):
        checkmap, problems = validate_text(text, "deep.yaml")
        assert checkmap is None and problems[0].line == 2 and "nested more than" in problems[0].message


@pytest.mark.parametrize("depth", [33, 200, 600])
@pytest.mark.parametrize("item", ["k{n}:", "-"])
def test_deep_block_nesting_is_a_problem_not_a_crash(depth: int, item: str) -> None:
    # Indented one space a level: the deepest of these is still under the size cap.
    text = "project: acme\nx:\n" + "".join(" " * n + item.format(n=n) + "\n" for n in range(1, depth + 1))
    text += " " * (depth + 1) + "1\n"
    checkmap, problems = validate_text(text, "deep.yaml")
    assert checkmap is None and "nested more than 32 levels deep" in problems[0].message
    assert 3 <= problems[0].line <= depth + 3, problems[0]  # inside the nesting, not line 1


def test_a_file_the_validator_cannot_handle_is_reported_and_the_last_good_version_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "acme.yaml").write_text(GOOD)
    registry = registry_for(tmp_path)
    registry.reload()

    def explode(raw: Any, name: str) -> Any:
        raise RuntimeError("a bug in a validator")

    monkeypatch.setattr("gateway.ci.checkmaps.registry.validate_text", explode)
    (tmp_path / "acme.yaml").write_text(GOOD + "# edited\n")
    assert registry.reload() is True
    [row] = registry.status()
    assert "could not be validated" in row["error"] and row["sha256"] is not None
    assert registry.snapshot.rule("acme", "migrations") is not None


def test_a_line_break_yaml_readers_disagree_on_is_a_problem_at_its_line() -> None:
    """U+0085 (and U+2028, U+2029) break a line for YAML 1.1, the gateway's
    reader, and not for YAML 1.2, an editor's: the same bytes would be two
    maps.  The file is refused at that line, whatever the character is in."""
    for odd in ("\u0085", "\u2028", "\u2029"):
        text = FULL_EXAMPLE.replace("checks:", f"description: 'a{odd}b'\nchecks:", 1)
        checkmap, problems = validate_text(text, "acme.yaml")
        line = text.split("\n").index(f"description: 'a{odd}b'") + 1
        assert checkmap is None and [(p.line, "disagree" in p.message) for p in problems] == [(line, True)]


def test_an_issuer_port_out_of_range_is_a_problem_not_a_crash() -> None:
    """`https://ci.example:99999` fits five digits but is no port: urllib
    raises on it, so the shape itself says 1 to 65535, in the validator and
    the schema alike."""
    for port in ("99999", "65536", "70000"):
        text = FULL_EXAMPLE.replace("https://gitlab.example.com",
                                        f"https://gitlab.example.com:{port}", 1)
        assert text != FULL_EXAMPLE
        checkmap, problems = validate_text(text, "acme.yaml")
        assert checkmap is None and any("port" in p.message for p in problems), problems
    checkmap, problems = validate_text(FULL_EXAMPLE.replace(
        "https://gitlab.example.com", "https://gitlab.example.com:65535", 1), "acme.yaml")
    assert problems == [] and checkmap is not None
