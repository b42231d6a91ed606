"""`relayroom export` and `relayroom import`: a project as JSON Lines.

    relayroom export --project acme --output acme.jsonl
    relayroom --database-url postgresql://... import --input acme.jsonl

Export reads one consistent snapshot; import writes one transaction into a
hub where the project does not exist yet (see gateway/knowledge/transfer.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import TYPE_CHECKING

from gateway.cli.main import run_with_hub
from gateway.hub import Hub

if TYPE_CHECKING:
    from gateway.cli.main import Subcommands


async def _export(hub: Hub, args: argparse.Namespace) -> int:
    from gateway.knowledge.transfer import export_project, write_jsonl

    records = await export_project(hub.driver, hub.clock, args.project)
    counts = records[-1]["counts"]
    if args.output in (None, "-"):
        write_jsonl(records, sys.stdout)
        sys.stdout.flush()
        print(f"exported project {args.project}: {json.dumps(counts)}", file=sys.stderr)
        return 0
    partial = f"{args.output}.partial"
    try:
        with open(partial, "w", encoding="utf-8") as out:
            write_jsonl(records, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, args.output)  # a reader never sees half a file
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
    print(json.dumps({"project": args.project, "output": args.output, "counts": counts}))
    return 0


async def _import(hub: Hub, args: argparse.Namespace) -> int:
    from gateway.knowledge.transfer import import_project

    if args.input in (None, "-"):
        summary = await import_project(hub.driver, sys.stdin)
    else:
        with open(args.input, encoding="utf-8") as source:
            summary = await import_project(hub.driver, source)
    print(json.dumps({"project": summary.project, "imported": summary.counts}))
    return 0


def register(sub: Subcommands, store: argparse.ArgumentParser) -> None:
    export = sub.add_parser("export", parents=[store], help="write a project (entries, supports, audit, ...) as JSON Lines")
    export.add_argument("--project", required=True, metavar="SLUG")
    export.add_argument("--output", default=None, metavar="FILE", help="default: standard output")
    export.set_defaults(func=run_with_hub(_export))

    imp = sub.add_parser("import", parents=[store], help="read a project exported by `relayroom export` into this hub")
    imp.add_argument("--input", default=None, metavar="FILE", help="default: standard input")
    imp.set_defaults(func=run_with_hub(_import))
