"""Check maps in a real editor's YAML language server agree with
`relayroom checkmap check`: the server reads the map's
`# yaml-language-server: $schema=` line, loads the schema beside it, and
reports exactly when the gateway's validator does.

Skips without the server (scripts/test installs it), unless
RELAYROOM_REQUIRE_YAML_LS=1."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from gateway.cli.quickstart import DEMO_CHECKMAP, SCHEMA
from tests.support.yaml_ls import YamlLanguageServer
from tests.unit.ci.test_checkmap_schema import GOOD, NoAliases, checkmaps, gateway_only, gateway_problems

ROOT = Path(__file__).resolve().parents[2]
MODELINE = "# yaml-language-server: $schema=checkmap.schema.json\n"


@pytest.fixture(scope="module")
def server() -> Iterator[YamlLanguageServer]:
    binary = os.environ.get("RELAYROOM_TEST_YAML_LS", "")
    if not binary or not os.path.exists(binary):
        message = "no YAML language server: scripts/test installs it and sets RELAYROOM_TEST_YAML_LS"
        if os.environ.get("RELAYROOM_REQUIRE_YAML_LS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    env = dict(os.environ)
    if os.environ.get("RELAYROOM_TEST_NODE_BIN"):
        env["PATH"] = f"{os.environ['RELAYROOM_TEST_NODE_BIN']}{os.pathsep}{env.get('PATH', '')}"
    running = YamlLanguageServer(binary, env)
    yield running
    running.close()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: Any) -> Path:
    """A check map folder with the schema beside the maps, as quickstart leaves it."""
    path = tmp_path_factory.mktemp("checkmaps")
    shutil.copy(SCHEMA, path / "checkmap.schema.json")
    return Path(path)


def test_the_shipped_maps_have_no_problem_in_the_editor(server: YamlLanguageServer, folder: Path) -> None:
    for example in sorted((ROOT / "checkmaps" / "examples").glob("*.yaml")):
        assert server.diagnostics(example, example.read_text()) == [], example.name
    assert server.diagnostics(folder / "demo.yaml", DEMO_CHECKMAP) == []


def test_an_unquoted_id_is_a_problem_in_the_editor_and_for_the_gateway(server: YamlLanguageServer, folder: Path) -> None:
    text = MODELINE + GOOD.replace('"123456"', "123456")
    assert server.diagnostics(folder / "acme.yaml", text) == [(6, 'Incorrect type. Expected "string".')]
    assert any('repository_id must be quoted' in p for p in gateway_problems(text))
    assert server.diagnostics(folder / "acme.yaml", MODELINE + GOOD) == [] and gateway_problems(GOOD) == []


@pytest.fixture(scope="module")
def verdicts() -> dict[str, int]:
    return {"accepted": 0, "refused": 0}


def test_random_maps_get_the_same_verdict_from_the_editor_and_the_gateway(
    server: YamlLanguageServer, folder: Path, verdicts: dict[str, int]
) -> None:
    # Derandomized: each example costs an editor round trip, so 120 is all
    # this test can afford, and on a random draw of 120 the accepted maps
    # ranged from 2 to about 15.  The same 120 every run keep the "both sides
    # of the line" check meaningful; the schema-only property test in
    # tests/unit/ci/test_checkmap_schema.py keeps exploring at random.
    @settings(max_examples=120, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(checkmaps())
    def agree(data: dict[str, Any]) -> None:
        if gateway_only(data):
            return
        text = MODELINE + yaml.dump(data, Dumper=NoAliases, allow_unicode=True, sort_keys=False)
        gateway = gateway_problems(text)
        editor = server.diagnostics(folder / "map.yaml", text)
        verdicts["accepted" if not gateway else "refused"] += 1
        assert bool(gateway) == bool(editor), f"{text}\ngateway: {gateway}\neditor: {editor}"

    agree()
    assert verdicts["accepted"] >= 5 and verdicts["refused"] >= 5, verdicts
