"""Installed as a tool would install it: the wheel built from the tracked
files, put into a fresh venv, serving the dashboard from the installed
package (not from this checkout).

Offline: pip builds with --no-build-isolation (setuptools and wheel are in the
test venv) and installs with --no-deps; the fresh venv reaches the
dependencies through one path line to the test venv's site-packages, which
runs none of that folder's .pth files, so this checkout's editable install is
invisible to it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import venv
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.support.helpers import wait_healthy

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def tracked_files() -> list[str]:
    result = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [line for line in result.stdout.splitlines() if (ROOT / line).is_file()]


def test_the_built_wheel_installs_in_a_fresh_venv_and_serves_the_dashboard(tmp_path: Path) -> None:
    source = tmp_path / "source"
    for name in tracked_files():  # a clean copy: no build/ or egg-info of this checkout
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(tmp_path / "wheels"), str(source)],
        capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp_path / "wheels").glob("relayroom_gateway-*.whl"))

    fresh = tmp_path / "venv"
    venv.create(fresh, with_pip=False)
    python = fresh / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    (purelib / "test-venv-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--quiet", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    home = tmp_path / "home"  # a folder of the user's, far from any checkout
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAYROOM_", "PYTHON"))}
    where = subprocess.run([str(python), "-c", "import gateway; print(gateway.__file__)"], cwd=home, env=env,
                           capture_output=True, text=True, timeout=60)
    assert where.stdout.strip().startswith(str(purelib)), f"gateway came from {where.stdout!r}, not the wheel"
    port = free_port()
    proc = subprocess.Popen([str(fresh / "bin" / "relayroom"), "quickstart", "--port", str(port)], cwd=home, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        while not any("owner token" in line for line in lines):
            line = proc.stdout.readline()
            assert line, "quickstart stopped: " + "".join(lines)
            lines.append(line)
        owner = next(line.split()[-1] for line in lines if "owner token" in line)
        wait_healthy(url, proc, time.monotonic() + 30)
        with httpx.Client(base_url=url, timeout=10, headers={"Accept": "text/html"}) as browser:
            form = browser.get("/login")
            assert form.status_code == 200
            csrf = re.search(r'name="csrf_token" value="([^"]*)"', form.text)
            assert csrf is not None
            signed_in = browser.post("/login", data={"token": owner, "csrf_token": csrf.group(1)}, follow_redirects=True)
            assert signed_in.status_code == 200 and str(signed_in.url).endswith("/projects/demo/knowledge")
            assert "Sign out" in signed_in.text and 'href="/static/dashboard.css"' in signed_in.text
            for asset in ("/static/dashboard.css", "/static/dashboard.js", "/static/api_docs.css"):
                assert browser.get(asset).status_code == 200, asset
            assert "POST" in browser.get("/docs").text
            assert browser.get("/projects/demo/RELAYROOM.md", headers={"Authorization": f"Bearer {owner}"}).text.startswith("# RELAYROOM.md")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    # The CI steps ship in the wheel: `ci init` writes them from the installed package.
    for provider, written in (("github", ".github/actions/relayroom-attest/action.yml"),
                              ("gitlab", ".gitlab/relayroom-attest.gitlab-ci.yml")):
        done = subprocess.run([str(fresh / "bin" / "relayroom"), "ci", "init", provider], cwd=home, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "relayroom-attest" in (home / written).read_text()
