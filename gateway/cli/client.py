"""`relayroom recall | learn | used | entries | confirm | refute`: a client for shells and hooks.

A client of a running gateway (not of the database): the same REST routes an
HTTP client would call, so the same rule and the same audit apply.

    RELAYROOM_URL      the gateway's base URL (default http://127.0.0.1:8750;
                       its MCP endpoint, ending in /mcp, names the same gateway)
    RELAYROOM_TOKEN    a project token (read for recall/used, write for learn,
                       owner for confirm/refute)
    RELAYROOM_PROJECT  optional: the project slug; without it the client asks
                       GET /v1/whoami which project the token belongs to

The token is read from the environment only, never from a flag, so it does
not show in `ps` or shell history.  Text output is for people; `--json`
prints the gateway's answer for programs.  A refusal is one line on stderr
and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from gateway.accounts.tokens import is_placeholder
from gateway.cli.main import CommandError, print_table
from gateway.knowledge.inputs import MAX_PAGE
from gateway.knowledge.trust import KINDS, STATES
from gateway.recall.fusion import PROBABLY_RELEVANT

if TYPE_CHECKING:
    from gateway.cli.main import Subcommands

DEFAULT_URL = "http://127.0.0.1:8750"
TIMEOUT = 15.0


class GatewayClient:
    def __init__(self, url: str, token: str, project: str | None, *, transport: httpx.BaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self.project = project
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}", "User-Agent": "relayroom-cli"},
            timeout=TIMEOUT,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise CommandError(f"cannot reach the gateway at {self.url}: {exc}") from None
        if response.status_code >= 400:
            raise CommandError(_refusal(response))
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """The gateway's answer, a JSON object on every route the client calls."""
        answer: dict[str, Any] = self._call(method, path, **kwargs).json()
        return answer

    def project_path(self) -> str:
        if self.project is None:
            self.project = self._json("GET", "/v1/whoami")["project"]
        return f"/v1/projects/{quote(self.project, safe='')}"

    def recall(self, query: str, kind: str | None, limit: int | None) -> dict[str, Any]:
        params: dict[str, Any] = {"q": query}
        if kind:
            params["kind"] = kind
        if limit is not None:
            params["limit"] = limit
        return self._json("GET", f"{self.project_path()}/recall", params=params)

    def learn(self, kind: str, statement: str, evidence: str | None, ttl_days: float | None) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": kind, "statement": statement}
        if evidence is not None:
            body["evidence"] = evidence
        if ttl_days is not None:
            body["ttl_days"] = ttl_days
        return self._json("POST", f"{self.project_path()}/entries", json=body)

    def entries(self, state: str | None, kind: str | None) -> list[dict[str, Any]]:
        """Every entry the token may see, newest first, page after page."""
        params: dict[str, Any] = {"limit": MAX_PAGE}
        if state:
            params["state"] = state
        if kind:
            params["kind"] = kind
        found: list[dict[str, Any]] = []
        while True:
            page = self._json("GET", f"{self.project_path()}/entries", params=params)
            found.extend(page["entries"])
            if not page.get("next_cursor"):
                return found
            params["cursor"] = page["next_cursor"]

    def confirm(self, entry_id: str) -> dict[str, Any]:
        return self._json("POST", f"{self.project_path()}/entries/{quote(entry_id, safe='')}/confirm")

    def refute(self, entry_id: str, reason: str) -> dict[str, Any]:
        path = f"{self.project_path()}/entries/{quote(entry_id, safe='')}/refute"
        return self._json("POST", path, json={"reason": reason})

    def used(self, recall_id: str, entry_id: str) -> None:
        self._call("POST", f"{self.project_path()}/recall_used", json={"recall_id": recall_id, "entry_id": entry_id})


def _refusal(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        return f"{error['message']} ({error['code']}, HTTP {response.status_code})"
    except (ValueError, KeyError, TypeError):
        return f"the gateway answered HTTP {response.status_code}"


def token_from_env() -> str:
    token = os.environ.get("RELAYROOM_TOKEN", "").strip()
    if not token:
        raise CommandError("set RELAYROOM_TOKEN to a project token (relayroom token create ...)")
    if is_placeholder(token):
        raise CommandError(
            f"RELAYROOM_TOKEN is {token}, which looks like a placeholder that was not expanded: "
            "set it to the token itself (export RELAYROOM_TOKEN=rr_...)"
        )
    return token


def base_url(url: str | None) -> str:
    """The gateway's base URL, from a flag or RELAYROOM_URL.  The MCP
    endpoint (`.../mcp`, as an agent's configuration names it) is taken as
    the gateway it belongs to."""
    url = (url or os.environ.get("RELAYROOM_URL") or "").strip().rstrip("/") or DEFAULT_URL
    return url[: -len("/mcp")] if url.endswith("/mcp") else url


def client_from_env(args: argparse.Namespace) -> GatewayClient:
    token = token_from_env()
    project = args.project or os.environ.get("RELAYROOM_PROJECT") or None
    return GatewayClient(base_url(args.url), token, project)


def _emit_json(payload: Any) -> None:
    print(json.dumps(payload, indent=2, ensure_ascii=False))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def score_text(score: Any) -> str:
    """A score as a person reads it: three significant digits at any scale
    (0.842, 0.05, 5e-06), where a fixed `.3f` printed 0.000 for a small one."""
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        return "n/a"
    return f"{score:.3g}"


def cmd_recall(args: argparse.Namespace) -> int:
    client = client_from_env(args)
    try:
        answer = client.recall(args.query, args.kind, args.limit)
    finally:
        client.close()
    if args.json:
        _emit_json(answer)
        return 0
    entries = answer["entries"]
    print(f"recall {answer['recall_id']}: {len(entries)} trusted entr{'y' if len(entries) == 1 else 'ies'}")
    for rank, entry in enumerate(entries, 1):
        print(f"{rank}. [{entry['kind']}] {_one_line(entry['statement'])}")
        if entry.get("evidence"):
            print(f"   evidence: {_one_line(entry['evidence'])}")
        print(f"   id {entry['id']}  score {score_text(entry.get('score'))}")
    if entries and isinstance(entries[0].get("score"), (int, float)) and entries[0]["score"] < PROBABLY_RELEVANT:
        print(f"(the first score is under {PROBABLY_RELEVANT}: maybe nothing here answers this)")
    if entries:
        print(f"(if one shaped your work: relayroom used {answer['recall_id']} ENTRY_ID)")
    return 0


def cmd_learn(args: argparse.Namespace) -> int:
    client = client_from_env(args)
    try:
        entry = client.learn(args.kind, args.statement, args.evidence, args.ttl_days)
    finally:
        client.close()
    if args.json:
        _emit_json(entry)
    elif args.quiet:
        print(entry["id"])
    elif entry.get("duplicate"):
        print(f"already known as {entry['id']} ({entry['state']}); nothing new was stored")
    else:
        print(f"learned {entry['id']} as a {entry['state']}: other agents see it once CI or an owner confirms it")
    return 0


def cmd_entries(args: argparse.Namespace) -> int:
    client = client_from_env(args)
    try:
        entries = client.entries(args.state, args.kind)
    finally:
        client.close()
    if args.json:
        _emit_json(entries)
        return 0
    if not entries:
        which = " ".join(filter(None, [args.state, args.kind]))
        print(f"no {which + ' ' if which else ''}entries this token may see", file=sys.stderr)
        return 0
    print_table(["ID", "STATE", "KIND", "STATEMENT"],
                [[e["id"], e["state"], e["kind"], _one_line(e["statement"])] for e in entries])
    return 0


def cmd_confirm(args: argparse.Namespace) -> int:
    client = client_from_env(args)
    try:
        entry = client.confirm(args.entry_id)
    finally:
        client.close()
    if args.json:
        _emit_json(entry)
    else:
        print(f"{entry['id']} is {entry['state']}: recall now answers with it")
    return 0


def cmd_refute(args: argparse.Namespace) -> int:
    client = client_from_env(args)
    try:
        entry = client.refute(args.entry_id, args.reason)
    finally:
        client.close()
    if args.json:
        _emit_json(entry)
    else:
        print(f"{entry['id']} is {entry['state']}: recall no longer answers with it")
    return 0


def cmd_used(args: argparse.Namespace) -> int:
    client = client_from_env(args)
    try:
        client.used(args.recall_id, args.entry_id)
    finally:
        client.close()
    if args.json:
        _emit_json({"ok": True, "recall_id": args.recall_id, "entry_id": args.entry_id})
    else:
        print(f"recorded: {args.entry_id} from recall {args.recall_id} shaped your work")
    return 0


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the gateway's JSON answer")
    parser.add_argument("--project", default=None, help="project slug (default RELAYROOM_PROJECT, else asked of the gateway)")
    parser.add_argument("--url", default=None, help=f"the gateway's base URL (default: $RELAYROOM_URL, else {DEFAULT_URL})")


def register(sub: Subcommands, store: argparse.ArgumentParser) -> None:
    recall = sub.add_parser("recall", help="ask a running gateway for trusted knowledge (RELAYROOM_URL, RELAYROOM_TOKEN)")
    recall.add_argument("query", help="what you are about to do, in your own words")
    recall.add_argument("--kind", choices=KINDS, default=None)
    recall.add_argument("--limit", type=int, default=None, help="1 to 50 (default 10)")
    _common(recall)
    recall.set_defaults(func=cmd_recall)

    learn = sub.add_parser("learn", help="propose an entry to a running gateway; it stays a candidate until confirmed")
    learn.add_argument("kind", choices=KINDS)
    learn.add_argument("statement", help="one self-contained sentence")
    learn.add_argument("--evidence", default=None, help="how you know (a file, a command, a link)")
    learn.add_argument("--ttl-days", dest="ttl_days", type=float, default=None, help="expire after this many days")
    learn.add_argument("-q", "--quiet", action="store_true", help="print only the entry's id (ID=$(relayroom learn -q ...))")
    _common(learn)
    learn.set_defaults(func=cmd_learn)

    entries = sub.add_parser(
        "entries", help="list the entries RELAYROOM_TOKEN may see: id, state, kind, statement (an owner sees every entry)"
    )
    entries.add_argument("--state", choices=STATES, default=None, help="only this state (default: every state)")
    entries.add_argument("--kind", choices=KINDS, default=None, help="only this kind (default: every kind)")
    _common(entries)
    entries.set_defaults(func=cmd_entries)

    confirm = sub.add_parser("confirm", help="as an owner: promote an entry to trusted (an owner token in RELAYROOM_TOKEN)")
    confirm.add_argument("entry_id")
    _common(confirm)
    confirm.set_defaults(func=cmd_confirm)

    refute = sub.add_parser("refute", help="as an owner: contradict an entry, so recall no longer returns it")
    refute.add_argument("entry_id")
    refute.add_argument("--reason", required=True, help="why it is wrong (kept in the audit ledger)")
    _common(refute)
    refute.set_defaults(func=cmd_refute)

    used = sub.add_parser("used", help="say that an entry from a recall shaped your work")
    used.add_argument("recall_id")
    used.add_argument("entry_id")
    _common(used)
    used.set_defaults(func=cmd_used)


if __name__ == "__main__":  # pragma: no cover - `relayroom` is the entry point
    sys.exit("run it as: relayroom recall | learn | used | confirm | refute")
