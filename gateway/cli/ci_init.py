"""`relayroom ci init github|gitlab`: write the CI step into a repository.

The GitHub composite action or the GitLab job template ships with the
package; this command copies it to where a workflow reads it
(`.github/actions/relayroom-attest/action.yml`,
`.gitlab/relayroom-attest.gitlab-ci.yml`) in the repository holding the
current folder, and prints the lines that use it, filled with the gateway's
address: to attest a check, and to publish the project's check map.  A file already there is left alone unless it is the same, or
`--force` says to replace it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.ci_steps import EXAMPLE_URL, STEPS_BY_NAME, unreachable_from_ci
from gateway.cli.checkout import checkout_of
from gateway.cli.main import CommandError, command_group

if TYPE_CHECKING:
    from gateway.cli.main import Subcommands


def cmd_init(args: argparse.Namespace) -> int:
    step = STEPS_BY_NAME[args.provider]
    root = Path(args.repo) if args.repo else checkout_of(Path.cwd()) or Path.cwd()
    if not root.is_dir():
        raise CommandError(f"{root} is not a folder")
    target = root / step.target
    shipped = step.source.read_bytes()
    shown = os.path.relpath(target)
    if target.exists() and target.read_bytes() == shipped:
        print(f"{shown} is already this version")
    elif target.exists() and not args.force:
        raise CommandError(f"{shown} exists and differs from this version: --force replaces it (git diff shows what changed)")
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(shipped)
        print(f"wrote {shown}: commit it with the workflow that uses it")
    url = (args.gateway_url or os.environ.get("RELAYROOM_URL") or EXAMPLE_URL).rstrip("/")
    audience = args.audience or os.environ.get("RELAYROOM_AUDIENCE") or "relayroom"
    print("\nThen, in the job that runs the check:\n")
    print(step.usage(url, args.check, audience))
    project = args.project or "PROJECT"
    print("\nAnd to keep the project's check map current from this repository (a change of who may vote waits "
          "for the owner's approval on the Checks page):\n")
    print(step.publish_usage(url, project, args.checkmap or f"checkmaps/{project}.yaml", audience))
    if url == EXAMPLE_URL:
        print(f"\n(put your gateway's address in place of {EXAMPLE_URL}, or pass --gateway-url)")
    elif (warning := unreachable_from_ci(url)) is not None:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def register(sub: Subcommands, store: argparse.ArgumentParser) -> None:
    ci = command_group(sub, "ci", "CI: write the attestation step into a repository")
    init = ci.add_parser(
        "init", help="write the GitHub action or the GitLab template into this repository, and print how to use it",
        description="Write the attestation step (GitHub: a composite action; GitLab: a job template) into the "
                    "repository holding the current folder, and print the workflow lines that use it.",
    )
    init.add_argument("provider", choices=sorted(STEPS_BY_NAME), help="the CI system")
    init.add_argument("--repo", default=None, metavar="DIR",
                      help="the repository's root (default: the git checkout holding the current folder)")
    init.add_argument("--gateway-url", default=None, metavar="URL",
                      help=f"the gateway's https address, as a CI runner reaches it (default: $RELAYROOM_URL, else {EXAMPLE_URL})")
    init.add_argument("--check", default="tests", help="the check's name in the printed lines (default: tests)")
    init.add_argument("--audience", default=None,
                      help="the gateway's RELAYROOM_AUDIENCE (default: $RELAYROOM_AUDIENCE, else relayroom)")
    init.add_argument("--project", default=None, help="the project whose check map the repository publishes")
    init.add_argument("--checkmap", default=None, metavar="PATH",
                      help="the map file's path in the repository (default: checkmaps/PROJECT.yaml)")
    init.add_argument("--force", action="store_true", help="replace a file that differs from this version")
    init.set_defaults(func=cmd_init)
