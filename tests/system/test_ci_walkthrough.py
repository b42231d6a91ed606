"""docs/ci-attestations.md's by-hand walkthrough, run as written: from an
empty store to an entry promoted by two CI systems, with the files it names,
leaving nothing behind in the folder it ran in (on free ports instead of
8750, 9101 and 9102, which may be taken on this machine)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

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
