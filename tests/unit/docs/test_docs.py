"""The docs keep up with the code: every setting documented, README commands true."""

from __future__ import annotations

from pathlib import Path

from gateway.core.config import SETTINGS, settings_markdown

ROOT = Path(__file__).resolve().parents[3]


def test_configuration_doc_matches_settings_table() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    assert settings_markdown() in text, "regenerate docs/configuration.md from gateway.core.config.settings_markdown()"
    for setting in SETTINGS:
        assert setting.env in text


def test_readme_starts_with_the_two_commands() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    block = lines[lines.index("```bash") + 1 : lines.index("```bash") + 3]
    assert "relayroom quickstart" in block[0] and "pip install -e ." in block[0]
    assert block[1].startswith("./scripts/test")
    assert (ROOT / "scripts" / "test").stat().st_mode & 0o111
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_the_inspector_the_docs_name_is_the_one_the_tests_run() -> None:
    import re

    pinned = {
        name: set(re.findall(r"@modelcontextprotocol/inspector@([0-9.]+)", (ROOT / name).read_text()))
        for name in ("README.md", "docs/mcp.md", "scripts/test")
    }
    assert all(len(versions) == 1 for versions in pinned.values()), pinned
    assert len(set.union(*pinned.values())) == 1, pinned
    for name in ("README.md", "docs/mcp.md"):  # never an unpinned npx line
        assert not re.search(r"npx( -y)? @modelcontextprotocol/inspector(?!@)", (ROOT / name).read_text()), name


def test_every_extra_the_docs_name_exists() -> None:
    import re
    import tomllib

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for named in re.findall(r"\.\[([a-z0-9_,-]+)\]", page.read_text()):
            for extra in named.split(","):
                assert extra in extras, f"{page.name} names the extra [{extra}], which pyproject.toml does not define"


def test_the_readme_is_what_a_user_needs_first() -> None:
    """Under 2,000 words: the reference lives in docs/, the measurements in
    bench/JOURNAL.md and the decisions in docs/decisions/."""
    words = len((ROOT / "README.md").read_text().split())
    assert words <= 2000, f"README.md has {words} words; move reference or measurements out of it"


def test_no_file_cites_a_document_the_repository_does_not_hold() -> None:
    """The contract and the trust rule's source text are not in the
    repository: a file states the rule itself instead of citing them."""
    import re
    import subprocess

    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, timeout=60)
    if listed.returncode != 0:
        import pytest

        pytest.skip("not a git checkout")
    cited = re.compile(r"\b(?:CONTRACT|KNOWLEDGE)" + r"\.md\b")
    offenders = []
    for name in listed.stdout.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # images and other binary files
        offenders += [f"{name}:{n}" for n, line in enumerate(text.splitlines(), 1) if cited.search(line)]
    assert not offenders, f"these lines cite a document the repository does not hold: {offenders}"
