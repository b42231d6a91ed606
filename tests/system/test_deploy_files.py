"""The deployment files check out as far as this machine can check them.

Docker engines do not run here, so the image is not built; instead: the
compose file parses and has two gateway replicas, PostgreSQL and a TLS proxy;
the Dockerfile's final stage runs as a non-root user; the wheel the image
installs builds from exactly the files its build context lets in; the
Caddyfile passes `caddy validate` and the systemd unit `systemd-analyze
verify` and `security` (each skipped, with the reason, where the tool is
missing).
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def test_compose_runs_two_gateways_behind_a_tls_proxy_on_postgres() -> None:
    services = compose()["services"]
    assert set(services) == {"gateway", "postgres", "proxy"}
    gateway, postgres, proxy = services["gateway"], services["postgres"], services["proxy"]

    assert gateway["deploy"]["replicas"] == 2
    env = gateway["environment"]
    assert env["RELAYROOM_DATABASE_URL"].startswith("postgresql://relayroom@postgres:5432/")
    assert "PGPASSWORD" in env and "RELAYROOM_PUBLIC_HOSTS" in env
    assert gateway["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "ports" not in gateway, "only the proxy is published"
    assert gateway["read_only"] is True and gateway["cap_drop"] == ["ALL"]
    build = gateway["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == (DEPLOY / "Dockerfile").resolve()

    assert postgres["image"].startswith("postgres:")
    assert any(v.endswith(":/var/lib/postgresql/data") for v in postgres["volumes"])
    assert postgres["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]

    assert proxy["image"].startswith("caddy:")
    assert "443:443" in proxy["ports"]
    mounted = {v.split(":")[0]: v.split(":")[1] for v in proxy["volumes"]}
    assert (DEPLOY / "Caddyfile").exists() and mounted["./Caddyfile"] == "/etc/caddy/Caddyfile"


def test_every_variable_compose_requires_is_in_the_example_env() -> None:
    text = (DEPLOY / "compose.yaml").read_text()
    required = set(re.findall(r"\$\{([A-Z_]+):\?", text))
    example = {line.split("=", 1)[0] for line in (DEPLOY / "relayroom.env.example").read_text().splitlines() if "=" in line and not line.startswith("#")}
    assert required and required <= example, f"document {sorted(required - example)} in deploy/relayroom.env.example"


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """(INSTRUCTION, arguments) per stage, continuation lines joined."""
    logical: list[str] = []
    pending = ""
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip("\\").strip() + " "
        if not line.rstrip().endswith("\\"):
            logical.append(pending.strip())
            pending = ""
    stages: list[list[tuple[str, str]]] = []
    for statement in logical:
        instruction, _, args = statement.partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        stages[-1].append((instruction.upper(), args.strip()))
    return stages


def test_the_image_is_slim_and_runs_as_a_non_root_user() -> None:
    stages = dockerfile_stages()
    final = stages[-1]
    assert final[0] == ("FROM", "python:3.11-slim")
    users = [args for instruction, args in final if instruction == "USER"]
    assert users, "the final stage must set USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0") and user.isdigit() and int(user) >= 1000
    cmd = " ".join(args for instruction, args in final if instruction in ("ENTRYPOINT", "CMD"))
    assert '"relayroom"' in cmd and '"serve"' in cmd and '"--host", "0.0.0.0"' in cmd
    assert any(instruction == "HEALTHCHECK" and "/readyz" in args for instruction, args in final)
    assert any(instruction == "EXPOSE" and args == "8750" for instruction, args in final)


def _context_files() -> list[Path]:
    """What the build context holds under deploy/Dockerfile.dockerignore
    (an allow-list: `*`, then `!` lines)."""
    rules = [line.strip() for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert rules[0] == "*", "the context is an allow-list"
    allowed = [r[1:].rstrip("/") for r in rules if r.startswith("!")]
    files = []
    for name in allowed:
        path = ROOT / name
        files.extend([path] if path.is_file() else [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts])
    return files


@pytest.mark.slow
def test_the_wheel_the_image_installs_builds_from_its_build_context(tmp_path: Path) -> None:
    stages = dockerfile_stages()
    copied = [args.split()[:-1] for instruction, args in stages[0] if instruction == "COPY"]
    context = tmp_path / "context"
    for path in _context_files():
        target = context / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    for sources in copied:
        for source in sources:
            assert (context / source).exists(), f"COPY {source}: not in the build context"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(tmp_path / "wheels"), str(context)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    wheel = next((tmp_path / "wheels").glob("relayroom_gateway-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for module in ("gateway/cli/main.py", "gateway/store/postgres.py", "gateway/web/app.py", "gateway/knowledge/transfer.py"):
        assert module in names
    for data in (ROOT / "gateway").rglob("*"):
        if data.suffix in (".html", ".css", ".js", ".sql", ".md", ".json") and "__pycache__" not in data.parts:
            assert str(data.relative_to(ROOT)) in names, f"{data.relative_to(ROOT)} is missing from the wheel"


def test_caddyfile_proxies_every_replica_and_keeps_metrics_inside() -> None:
    text = (DEPLOY / "Caddyfile").read_text()
    assert "{$RELAYROOM_HOSTNAME}" in text
    assert re.search(r"dynamic a \{\s*name gateway\s*port 8750", text)
    assert re.search(r"@internal path /metrics", text) and "respond @internal 404" in text
    assert "flush_interval -1" in text  # MCP streams


def test_caddyfile_is_valid(tmp_path: Path) -> None:
    caddy = shutil.which("caddy")
    if caddy is None:
        pytest.skip("caddy is not installed here (apt-get install caddy): the Caddyfile was not validated")
    env = {**os.environ, "RELAYROOM_HOSTNAME": "knowledge.example.com", "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    result = subprocess.run([caddy, "validate", "--config", str(DEPLOY / "Caddyfile"), "--adapter", "caddyfile"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((DEPLOY / "relayroom.service").read_text())
    return parser


def test_systemd_unit_is_hardened() -> None:
    service = unit()["Service"]
    assert service["DynamicUser"] == "yes" and service["StateDirectory"] == "relayroom"
    assert service["ProtectSystem"] == "strict" and service["NoNewPrivileges"] == "yes"
    assert service["CapabilityBoundingSet"] == "" and service["PrivateTmp"] == "yes"
    assert " serve " in service["ExecStart"] + " " and "127.0.0.1" in service["ExecStart"]
    # The SQLite store lives in the state directory (the parser keeps only the last Environment= line).
    environment = re.findall(r"^Environment=(.*)$", (DEPLOY / "relayroom.service").read_text(), re.MULTILINE)
    assert any(e.startswith("RELAYROOM_DATABASE_URL=sqlite:////var/lib/relayroom/") for e in environment), environment
    assert unit()["Install"]["WantedBy"] == "multi-user.target"


def _verifiable_unit(tmp_path: Path) -> Path:
    """The unit with ExecStart pointed at this checkout's `relayroom`, which
    `verify` needs to exist."""
    binary = Path(sys.executable).parent / "relayroom"
    if not binary.exists():
        pytest.skip("no relayroom console script next to this Python: install the project (pip install -e .)")
    text = (DEPLOY / "relayroom.service").read_text().replace("/opt/relayroom/bin/relayroom", str(binary))
    path = tmp_path / "relayroom.service"
    path.write_text(text)
    return path


def _systemd_analyze() -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed here: the unit was not verified")
    return tool


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    tool = _systemd_analyze()
    result = subprocess.run([tool, "verify", str(_verifiable_unit(tmp_path))], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


def test_systemd_unit_exposure_is_low(tmp_path: Path) -> None:
    """`systemd-analyze security` rates the unit; 2.0 of 10 or lower is "OK"."""
    tool = _systemd_analyze()
    result = subprocess.run(
        [tool, "security", "--offline=yes", "--threshold=20", str(_verifiable_unit(tmp_path))],
        capture_output=True, text=True, timeout=60,
    )
    if "--offline" in result.stderr or "unrecognized option" in result.stderr:
        pytest.skip("this systemd-analyze cannot rate a unit file offline")
    assert result.returncode == 0, result.stdout[-1500:]
