"""docs/security.md names the tests that hold each promise: every name must
exist, so a renamed or deleted test cannot leave a promise unheld in silence."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "security.md"

def located(name: str) -> Path:
    """Where a test file named in the doc lives: the tests are grouped in
    sub-folders (unit/<domain>, http, system), the doc names them by file."""
    found = sorted((ROOT / "tests").rglob(name))
    return found[0] if found else ROOT / "tests" / name


TEST_REF = re.compile(r"`(test_[a-z0-9_]+\.py)::(test_[a-z0-9_]+)`")
FILE_REF = re.compile(r"`(test_[a-z0-9_]+\.py)`")
CASES = re.compile(r"`(test_[a-z0-9_]+\.py)(?:::test_[a-z0-9_]+)?` \(cases? ((?:`[^`]+`(?:, )?)+)\)")


def test_every_test_the_security_doc_names_exists() -> None:
    text = DOC.read_text()
    refs = TEST_REF.findall(text)
    assert len(refs) >= 60, "the table names the tests that hold each promise"
    missing = []
    for file, name in refs:
        source = located(file).read_text() if located(file).exists() else ""
        if not re.search(rf"^(async )?def {name}\(", source, re.MULTILINE):
            missing.append(f"{file}::{name}")
    for file in set(FILE_REF.findall(text)):
        if not located(file).exists():
            missing.append(file)
    assert missing == [], missing


def test_every_hostile_case_the_security_doc_names_exists() -> None:
    text = DOC.read_text()
    missing = []
    for file, names in CASES.findall(text):
        source = located(file).read_text()
        for name in re.findall(r"`([^`]+)`", names):
            if "…" in name:  # a family of cases, e.g. `webhook …`
                prefix = name.replace("…", "").strip()
                if f'Case("{prefix}' not in source:
                    missing.append(f"{file}: {name}")
            elif f'Case("{name}"' not in source:
                missing.append(f"{file}: {name}")
    assert missing == [], missing
