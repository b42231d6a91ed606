"""The docs keep up with the code: every setting documented, README commands true."""

from __future__ import annotations

import re
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


def test_the_provider_table_has_a_row_per_provider_that_says_what_its_class_says() -> None:
    from gateway.ci.providers import PROVIDERS

    text = (ROOT / "docs" / "ci-attestations.md").read_text()
    header = "| `provider:` | binds by | default issuer | `refs` | the pages say |"
    assert header in text, "docs/ci-attestations.md has the provider table"
    lines = text[text.index(header):].splitlines()[2:]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[:lines.index("")]]
    by_name = {row[0].strip("`"): row for row in rows}
    assert set(by_name) == set(PROVIDERS)
    for name, cls in PROVIDERS.items():
        _, binds, issuer, refs, pages = by_name[name]
        assert binds.startswith({"ids": "ids:", "subject": "subject:", "secret": "secret:"}[cls.BINDS_BY]), name
        assert (f"`{cls.DEFAULT_ISSUER}`" in issuer) if cls.DEFAULT_ISSUER else issuer.startswith("none"), name
        assert refs == ("required" if cls.REFS_REQUIRED and "refs" in cls.KEYS else
                        "optional" if "refs" in cls.KEYS else "none"), name
        assert pages.startswith(cls.LABEL or "CI at "), name


def test_no_file_cites_a_document_the_repository_does_not_hold() -> None:
    """The product's external contract and its knowledge rule live outside the
    repository: a file states the rule it follows instead of naming them."""
    cited = re.compile("CONTRA" + r"CT\b|" + "KNOWLEDGE" + r"\.md")
    roots = [ROOT / name for name in ("gateway", "docs", "checkmaps", "deploy", "tests", "scripts", "bench")]
    files = [ROOT / "README.md"] + [p for root in roots for p in root.rglob("*")
                                     if p.is_file() and p.suffix in (".py", ".md", ".yaml", ".yml", ".json", ".sh", "")]
    found = [f"{path.relative_to(ROOT)}:{number}" for path in files if "__pycache__" not in path.parts
             for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if cited.search(line)]
    assert found == []


def test_the_readme_is_what_a_user_needs_first() -> None:
    """Under 2,000 words: the reference lives in docs/, the measurements in
    bench/JOURNAL.md and the decisions in docs/decisions/."""
    words = len((ROOT / "README.md").read_text().split())
    assert words <= 2000, f"README.md has {words} words; move reference or measurements out of it"
