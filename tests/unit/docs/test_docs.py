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
