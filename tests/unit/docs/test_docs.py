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
