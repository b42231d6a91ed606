"""In process (a diagnosis): the attestation intake alone, no HTTP.

    .venv/bin/python bench/attest_intake.py [--requests 3000]
    CG=1 valgrind --tool=callgrind --instr-atstart=no .venv/bin/python bench/attest_intake.py --requests 400

A temporary SQLite store with the project and check map of `bench/attest.py`,
the test OIDC issuer on 127.0.0.1, 200 warm-up attestations (the JWKS fetch,
the first supports), then reruns through `AttestationIntake.from_token` from
64 tasks, the store's writer included.  It prints the process CPU per
attestation for three rounds.  With CG=1 under callgrind it runs one round
and switches instrumentation on only around it (`callgrind_control -i`), so
the total instruction count divided by --requests is the cost of one
attestation, the same from run to run whatever the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.attest import CHECKS, mint, prepare  # noqa: E402


async def measure(work: Path, issuer: object, requests: int, callgrind: bool) -> None:
    from gateway.ci.intake import read_statement
    from gateway.core.config import Config
    from gateway.hub import Hub

    db = f"sqlite:///{work}/bench.db"
    folder = work / "checkmaps"
    folder.mkdir()
    await prepare(db, folder, issuer.url)  # type: ignore[attr-defined]
    rounds = 1 if callgrind else 3
    tokens = mint(issuer, requests * rounds + 200)
    hub = Hub(Config.from_env({}, database_url=db, checkmaps=str(folder), allow_insecure_issuers=True))
    await hub.start(serve=True, background=False)
    logging.getLogger().handlers[:] = [logging.NullHandler()]  # the line is made, not written
    logging.getLogger().setLevel(logging.INFO)
    try:
        async def run(batch: list[str]) -> None:
            queue = list(enumerate(batch))

            async def worker() -> None:
                while queue:
                    i, token = queue.pop()
                    statement = read_statement({"check": f"check-{i % CHECKS}", "outcome": "success"})
                    await hub.intake.from_token(token, statement)

            await asyncio.gather(*(worker() for _ in range(64)))

        await run(tokens[:200])
        for r in range(rounds):
            batch = tokens[200 + r * requests: 200 + (r + 1) * requests]
            if callgrind:
                subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True, stdout=subprocess.DEVNULL)
            started = time.process_time()
            await run(batch)
            spent = time.process_time() - started
            if callgrind:
                subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], check=True, stdout=subprocess.DEVNULL)
            print(f"round {r + 1}: {spent / len(batch) * 1e6:.1f} us of process CPU per attestation", flush=True)
    finally:
        await hub.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000, help="attestations per round")
    args = parser.parse_args()
    from tests.support.oidc_issuer import OidcIssuer

    with tempfile.TemporaryDirectory() as work, OidcIssuer() as issuer:
        asyncio.run(measure(Path(work), issuer, args.requests, bool(os.environ.get("CG"))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
