"""docs/ci-attestations.md's by-hand walkthrough, run as written: from an
empty store to an entry promoted by two CI systems, with the files it names,
leaving nothing behind in the folder it ran in (on free ports instead of
8750, 9101 and 9102, which may be taken on this machine)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.system.test_cli_first_run import clean_env, json_objects

ROOT = Path(__file__).resolve().parents[2]


def docs_block(path: Path, heading: str) -> str:
    text = path.read_text()
    rest = text[text.index(heading):]
    start = rest.index("```bash\n") + len("```bash\n")
    return rest[start: rest.index("```\n", start)]


def test_the_ci_walkthrough_promotes_an_entry_and_leaves_nothing_behind(tmp_path: Path) -> None:
    ports = {"9101": str(free_port()), "9102": str(free_port()), "8750": str(free_port())}
    script = docs_block(ROOT / "docs" / "ci-attestations.md", "## 5. Run it by hand")
    example = (ROOT / "checkmaps" / "examples" / "demo-local.yaml").read_text()
    for wanted, free in ports.items():
        script, example = script.replace(wanted, free), example.replace(wanted, free)
    # The repository root as the walkthrough needs it: the venv, the test issuer, the example map.
    (tmp_path / ".venv").symlink_to(sys.prefix)
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    (tmp_path / "checkmaps" / "examples").mkdir(parents=True)
    (tmp_path / "checkmaps" / "examples" / "demo-local.yaml").write_text(example)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if "tests" not in p.parts)

    proc = subprocess.Popen(["bash", "-e"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=tmp_path, env=clean_env(), text=True, start_new_session=True)
    try:
        out, err = proc.communicate(script, timeout=180)
    finally:
        try:  # whatever the script started, if it stopped before its last line
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, err

    answers = json_objects(out)
    attestations = [a for a in answers if "counted" in a]
    assert [a["counted"] for a in attestations] == [True, True]
    assert attestations[0]["promoted"] == [] and len(attestations[1]["promoted"]) == 1
    refusals = [a["error"]["code"] for a in answers if "error" in a]
    assert refusals == ["token_reused", "binding_mismatch"]
    entry = answers[-1]
    assert entry["state"] == "trusted" and entry["promoted_by"] == "issuers" and entry["distinct_issuers"] == 2
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if "tests" not in p.parts)
    assert after == before, "the walkthrough left files behind"


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_the_publish_walkthrough_binds_by_file_then_publishes_to_two_gateways(tmp_path: Path, store: str) -> None:
    """Section 6's walkthrough as written: a repository bound once by a file of
    the folder, then a check changed by publishing (in force on a second
    gateway that has no folder of its own), and a binding changed by
    publishing plus the owner's approval; on SQLite, and on PostgreSQL."""
    ports = {"9101": str(free_port()), "8750": str(free_port()), "8751": str(free_port())}
    script = docs_block(ROOT / "docs" / "ci-attestations.md", "### Run it by hand: bind once by file, then publish")
    for wanted, free in ports.items():
        script = script.replace(wanted, free)
    (tmp_path / ".venv").symlink_to(sys.prefix)
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    with contextlib.ExitStack() as stack:
        if store == "postgres":
            from tests.support.pg import fresh_database

            script = script.replace("sqlite:///$WORK/demo.db", stack.enter_context(fresh_database()))
            assert "sqlite" not in script
        proc = subprocess.Popen(["bash", "-e"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=tmp_path, env=clean_env(), text=True, start_new_session=True)
        try:
            out, err = proc.communicate(script, timeout=180)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert proc.returncode == 0, err

    applied, ready, counted, pending, refused, view, approved, release = json_objects(out)
    assert applied["status"] == "applied" and pending["status"] == "pending_owner"
    [published] = ready["checkmaps"]  # the second gateway has no folder: the store gave it the map
    assert published["source"] == "published" and published["sha256"] == applied["sha256"] and published["error"] is None
    assert counted["counted"] is True and counted["supports"][0]["duplicate"] is False
    assert refused["error"]["code"] == "binding_mismatch"
    assert view["source"] == "published" and view["sha256"] == applied["sha256"]
    assert view["pending"]["sha256"] == pending["sha256"] and "refs/heads/release" in view["pending"]["content"]
    assert approved["source"] == "published" and approved["sha256"] == pending["sha256"] and approved["pending"] is None
    assert release["counted"] is True
