#!/usr/bin/env python3
"""Screenshots of the dashboard, made from the real thing.

Starts a gateway on a temporary SQLite database filled with demo data (a
month of recalls, CI attestations, entries in every state), signs in with an
owner token in headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright), and writes:

    docs/screenshots/knowledge.png   the Knowledge tab
    docs/screenshots/learning.png    the Learning panel

Run from the repository root:  .venv/bin/python scripts/screenshots.py
Everything stays on 127.0.0.1; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.core.clock import DAY, HOUR, ManualClock  # noqa: E402
from gateway.core.config import Config  # noqa: E402
from gateway.hub import Hub  # noqa: E402
from gateway.knowledge.model import Support  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
GITHUB = "oidc:token.actions.githubusercontent.com:acme"
CANARY = "webhook:nightly-canary:acme"

TRUSTED = [
    ("convention", "Migrations are named YYYYMMDD_description.sql and never edited after merge.", "migrations"),
    ("pitfall", "The connection pooler runs in transaction mode: prepared statements fail; use simple protocol.", "pooler-smoke"),
    ("convention", "Tests live beside the file they test, as test_<module>.py.", "tests-beside-files"),
    ("decision", "We use SQLite in development and PostgreSQL in production because one file is enough locally.", "backend-matrix"),
    ("fact", "The public API is versioned under /v1 and breaking changes need a new prefix.", "api-contract"),
    ("pitfall", "Time zones: store UTC epoch seconds; formatting happens only at the edge.", "timezone-suite"),
    ("convention", "Every refusal returns {\"error\": {\"code\", \"message\"}} with a snake_case code.", "error-shape"),
]
# Trusted after the month of recalls: the Learning panel lists them as never recalled.
LATE_TRUSTED = [
    ("decision", "Release branches are cut on Tuesdays because the on-call rota changes on Mondays."),
    ("fact", "Invoices are rendered by the billing-worker container, never by the web tier."),
]
CANDIDATES = [
    ("pitfall", "The staging database is reset every Sunday at 03:00 UTC; do not keep fixtures there.", "learn", "agent-7"),
    ("convention", "Feature flags are read once per request, never cached across requests.", "learn", "agent-9"),
    ("decision", "We decided to pin Node 22 in CI because the MCP Inspector needs it.", "extraction", "agent-7"),
    ("fact", "The nightly canary posts its results as Standard Webhooks.", "reflection", "agent-12"),
]


async def seed(database_url: str, checkmaps: str) -> dict[str, str]:
    """Fill a fresh store with a month of believable activity; returns tokens."""
    rng = random.Random(7)
    now = time.time()
    clock = ManualClock(start=now - 32 * DAY)
    hub = Hub(Config.from_env({}, database_url=database_url, checkmaps=checkmaps, sweep_interval=0.0), clock=clock)
    await hub.start(background=False)
    try:
        await hub.accounts.create_project("acme")
        tokens = {
            "owner": await hub.accounts.create_token("acme", "owner", "olivia"),
            "agent-7": await hub.accounts.create_token("acme", "write", "agent-7"),
            "agent-9": await hub.accounts.create_token("acme", "write", "agent-9"),
            "agent-12": await hub.accounts.create_token("acme", "write", "agent-12"),
        }
        agents = {name: await hub.accounts.authenticate(tokens[name]) for name in ("agent-7", "agent-9", "agent-12")}
        owner = await hub.accounts.authenticate(tokens["owner"])
        project = await hub.accounts.project("acme")

        trusted_ids = []
        mapped: dict[str, str] = {}
        for index, (kind, statement, check) in enumerate(TRUSTED):
            author = ("agent-7", "agent-9", "agent-12")[index % 3]
            entry, _ = await hub.knowledge.learn(agents[author], kind, statement, evidence=f"Seen in CI check {check}.")
            clock.advance(HOUR)
            if index == 5:
                await hub.knowledge.confirm(owner, entry.id)
            else:
                for issuer in (GITHUB, CANARY):
                    await _attest(hub, project, issuer, check, "success", entry.id)
                    clock.advance(0.3 * HOUR)
            trusted_ids.append(entry.id)
            if index != 5:
                mapped[check] = entry.id

        contradicted, _ = await hub.knowledge.learn(
            agents["agent-9"], "convention", "Run the full test suite before every commit, even for docs changes."
        )
        await hub.knowledge.confirm(owner, contradicted.id)
        await hub.knowledge.learn(agents["agent-12"], "fact", "The old billing service still answers on port 8081.", ttl_days=3)
        for _ in range(3):  # CI noise: unmapped checks and reruns
            await _attest(hub, project, GITHUB, "lint", "success", None)
            await _attest(hub, project, GITHUB, "staging-reset-check", rng.choice(["success", "failure"]), None)
            clock.advance(2 * HOUR)

        # A month of recalls, busier as agents adopt it; some results reported used.
        queries = ["how do I name a migration", "pooler prepared statements", "where do tests go", "error body shape",
                   "which database in dev", "api versioning", "timestamps utc", "deploy checklist"]
        start_day = int((now - 30 * DAY) // DAY)
        for day in range(30):
            clock.set((start_day + day) * DAY + 8 * HOUR)
            for _ in range(4 + day // 2 + rng.randint(0, 4)):
                agent = agents[rng.choice(list(agents))]
                recall_id, results = await hub.recall.recall(agent, rng.choice(queries), limit=5)
                for entry, _score in results[:2]:
                    if rng.random() < 0.35 + day / 80:
                        await hub.recall.used(agent, recall_id, entry.id)
                clock.advance(rng.randint(5, 50) * 60)

        clock.set(now - 3 * HOUR)
        for kind, statement in LATE_TRUSTED:
            late, _ = await hub.knowledge.learn(agents["agent-12"], kind, statement)
            await hub.knowledge.confirm(owner, late.id)
        clock.set(now - 2 * HOUR)
        await hub.knowledge.post_event(
            agents["agent-7"], "error", {"contradicts": contradicted.id, "reason": "docs-only changes skip the suite since PR #412"}
        )
        clock.set(now - HOUR)
        for kind, statement, via, author in CANDIDATES:
            if via == "extraction":
                # Extraction is a thread message's labelled line (gateway/knowledge/extraction.py).
                await hub.threads.post_message(agents[author], "ci-upgrade", author, f"{kind.capitalize()}: {statement}")
            elif via == "reflection":

                proposal = await hub.proposals.propose(
                    agents[author], kind, statement, "Every canary run in the last week arrived that way."
                )
                await hub.proposals.approve(owner, proposal.id)
            else:
                await hub.knowledge.learn(agents[author], kind, statement)
            clock.advance(60)

        await hub.proposals.propose(
            agents["agent-9"], "pitfall", "Renaming a check in CI silently unmaps it from the check map.",
            "The lint check stopped voting after the workflow was renamed.",
        )
        _write_checkmap(Path(checkmaps) / "acme.yaml", mapped)
        return tokens
    finally:
        await hub.stop()


async def _attest(hub: Hub, project: Any, issuer: str, check: str, outcome: str, entry_id: str | None) -> None:
    from gateway.core.ids import new_id

    now = hub.clock.now()
    attestation_id = new_id("at")
    counted = entry_id is not None and outcome == "success"
    reason = None if counted else ("not_success" if entry_id else "unmapped_check")

    async def unit(q: Any) -> None:
        await q.insert_attestation(attestation_id, project.id, issuer, check, outcome, counted, reason, {}, None, now)
        if counted:
            await hub.knowledge.apply_support(q, project, entry_id, Support(issuer, check, attestation_id, now), now)

    await hub.driver.write(unit)


def _write_checkmap(path: Path, mapped: dict[str, str]) -> None:
    """The demo project's check map, as a maintainer would keep it in the repository."""
    lines = [
        "project: acme",
        "issuers:",
        "  - provider: github-actions",
        "    repository: acme/api",
        '    repository_id: "123456"',
        '    repository_owner_id: "7890"',
        "    refs: [refs/heads/main]",
        "  - provider: webhook",
        "    source: nightly-canary",
        "    secret_env: ACME_CANARY_SECRET",
        "checks:",
    ]
    for check, entry_id in mapped.items():
        lines += [f"  {check}:", f"    supports: [{entry_id}]"]
    path.write_text("\n".join(lines) + "\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shoot(base_url: str, owner_token: str, out_dir: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1180}, device_scale_factor=1)
        page.goto(f"{base_url}/login")
        page.fill("input[name=token]", owner_token)
        page.click("button[type=submit]")
        page.wait_for_url("**/projects/acme/knowledge")
        # The Knowledge tab is long: its first screenful shows what it is.
        for name, path, full in (
            ("knowledge", "/projects/acme/knowledge", False),
            ("learning", "/projects/acme/learning", True),
        ):
            page.goto(base_url + path)
            target = out_dir / f"{name}.png"
            page.screenshot(path=str(target), full_page=full)
            written.append(target)
        browser.close()
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        print(f"{CHROMIUM} is missing: apt-get install chromium", file=sys.stderr)
        return 1
    import uvicorn

    from gateway.web.app import build_app

    with tempfile.TemporaryDirectory() as tmp:
        database_url = f"sqlite:///{tmp}/demo.db"
        tokens = asyncio.run(seed(database_url, tmp))
        config = Config.from_env({}, database_url=database_url, checkmaps=tmp, sweep_interval=0.0)
        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(build_app(Hub(config)), host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 15
        while not server.started:
            if time.monotonic() > deadline:
                print("the gateway did not start", file=sys.stderr)
                return 1
            time.sleep(0.05)
        try:
            for path in shoot(f"http://127.0.0.1:{port}", tokens["owner"], Path(args.out)):
                print(path)
        finally:
            server.should_exit = True
            thread.join(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
