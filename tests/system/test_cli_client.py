"""`relayroom recall | learn | used` as clients of a running gateway (uvicorn on 127.0.0.1)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from gateway.cli.main import main
from gateway.knowledge.model import Principal
from tests.conftest import LiveServer, ProjectTokens, free_port, live_setup, make_project


@pytest.fixture
def acme_live(live_server: LiveServer) -> ProjectTokens:
    return live_setup(live_server, lambda hub: make_project(hub, "acme"))


@pytest.fixture
def as_agent(monkeypatch: pytest.MonkeyPatch, live_server: LiveServer) -> Any:
    def use(token: str, project: str | None = None) -> None:
        monkeypatch.setenv("RELAYROOM_URL", live_server.url)
        monkeypatch.setenv("RELAYROOM_TOKEN", token)
        if project is None:
            monkeypatch.delenv("RELAYROOM_PROJECT", raising=False)
        else:
            monkeypatch.setenv("RELAYROOM_PROJECT", project)

    return use


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def confirm(server: LiveServer, entry_id: str) -> None:
    async def go(hub: Any) -> None:
        project = await hub.accounts.project("acme")
        await hub.knowledge.confirm(Principal(project=project, name="olivia", level="owner"), entry_id)

    live_setup(server, go)


def test_learn_recall_used_round_trip_in_json(
    live_server: LiveServer, acme_live: ProjectTokens, as_agent: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    as_agent(acme_live.writer)  # the project comes from GET /v1/whoami
    code, out, err = run(capsys, "learn", "convention", "Migrations are named YYYYMMDD_description.sql.",
                         "--evidence", "db/migrations", "--json")
    assert code == 0, err
    learned = json.loads(out)
    assert learned["state"] == "candidate" and learned["created_by"] == "agent-7"
    confirm(live_server, learned["id"])

    as_agent(acme_live.reader, "acme")
    code, out, err = run(capsys, "recall", "how do I name a migration?", "--json", "--limit", "5")
    assert code == 0, err
    answer = json.loads(out)
    assert [e["id"] for e in answer["entries"]] == [learned["id"]]
    code, out, err = run(capsys, "used", answer["recall_id"], learned["id"], "--json")
    assert code == 0 and json.loads(out)["ok"] is True


def test_text_output_is_for_people(
    live_server: LiveServer, acme_live: ProjectTokens, as_agent: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    as_agent(acme_live.writer)
    code, out, _ = run(capsys, "learn", "pitfall", "The pooler cannot do prepared statements.")
    assert code == 0 and out.startswith("learned kn") and "candidate" in out
    entry_id = out.split()[1]
    code, out, _ = run(capsys, "learn", "pitfall", "the pooler cannot do  prepared statements.")
    assert code == 0 and out.startswith(f"already known as {entry_id}")
    confirm(live_server, entry_id)
    code, out, _ = run(capsys, "recall", "pooler gotchas", "--kind", "pitfall")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("recall rc") and "1 trusted entry" in lines[0]
    assert lines[1] == "1. [pitfall] The pooler cannot do prepared statements."
    assert entry_id in lines[2]
    assert "maybe nothing" not in out
    # One word of four in common: the first score (a confidence) is under 0.5, and the text says so.
    code, out, _ = run(capsys, "recall", "pooler weather forecast tomorrow")
    assert code == 0 and entry_id in out
    assert "(the first score is under 0.5: maybe nothing here answers this)" in out.splitlines()
    recall_id = lines[0].split()[1].rstrip(":")
    code, out, _ = run(capsys, "used", recall_id, entry_id)
    assert code == 0 and out.startswith("recorded:")


@pytest.mark.parametrize(
    "argv, token, expected",
    [
        (("learn", "fact", "Readers cannot write."), "reader", "needs a write token"),
        (("used", "rc_nope", "kn_nope"), "reader", "recall_not_found"),
        (("recall", "x", "--limit", "99"), "reader", "limit must be an integer"),
        (("recall", "x"), "bogus", "not valid for this gateway"),
        (("recall", "x", "--project", "globex"), "reader", "no project 'globex'"),
    ],
)
def test_refusals_are_one_line_on_stderr_and_exit_1(
    live_server: LiveServer,
    acme_live: ProjectTokens,
    as_agent: Any,
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
    token: str,
    expected: str,
) -> None:
    as_agent(getattr(acme_live, token, "not-a-token"))
    code, out, err = run(capsys, *argv)
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and expected in err, err


def test_missing_token_and_unreachable_gateway(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RELAYROOM_TOKEN", raising=False)
    code, _, err = run(capsys, "recall", "x")
    assert code == 1 and "RELAYROOM_TOKEN" in err
    monkeypatch.setenv("RELAYROOM_TOKEN", "t")
    monkeypatch.setenv("RELAYROOM_URL", f"http://127.0.0.1:{free_port()}")
    code, _, err = run(capsys, "recall", "x", "--project", "acme")
    assert code == 1 and "cannot reach the gateway" in err and len(err.strip().splitlines()) == 1


def test_owner_confirms_and_refutes_through_the_client(
    live_server: LiveServer, acme_live: ProjectTokens, as_agent: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    as_agent(acme_live.writer)
    code, out, _ = run(capsys, "learn", "-q", "fact", "The staging database is reset every night.")
    entry_id = out.strip()
    assert code == 0 and re.fullmatch(r"kn_\w+", entry_id), out
    code, _, err = run(capsys, "confirm", entry_id)  # a writer may not
    assert code == 1 and "owner" in err and len(err.strip().splitlines()) == 1

    as_agent(acme_live.owner)
    code, out, _ = run(capsys, "confirm", entry_id)
    assert code == 0 and out == f"{entry_id} is trusted: recall now answers with it\n"
    as_agent(acme_live.reader, "acme")
    code, out, _ = run(capsys, "recall", "staging database reset", "--json")
    assert [e["id"] for e in json.loads(out)["entries"]] == [entry_id]

    as_agent(acme_live.owner)
    code, out, _ = run(capsys, "refute", entry_id, "--reason", "it is reset weekly", "--json")
    assert code == 0 and json.loads(out)["state"] == "contradicted"
    as_agent(acme_live.reader, "acme")
    code, out, _ = run(capsys, "recall", "staging database reset", "--json")
    assert json.loads(out)["entries"] == []


@pytest.mark.parametrize("placeholder", ["${RELAYROOM_TOKEN}", "$RELAYROOM_TOKEN", "%RELAYROOM_TOKEN%"])
def test_an_unexpanded_token_is_named_a_placeholder_by_the_cli_and_the_gateway(
    live_server: LiveServer, acme_live: ProjectTokens, as_agent: Any, capsys: pytest.CaptureFixture[str], placeholder: str
) -> None:
    as_agent(placeholder)
    code, out, err = run(capsys, "recall", "x")
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1
    assert f"RELAYROOM_TOKEN is {placeholder}, which looks like a placeholder that was not expanded" in err
    # An HTTP client, or an MCP client whose configuration kept the placeholder.
    headers = {"Authorization": f"Bearer {placeholder}", "Accept": "application/json, text/event-stream"}
    for answer in (httpx.get(f"{live_server.url}/v1/whoami", headers=headers),
                   httpx.post(f"{live_server.url}/mcp", headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})):
        assert answer.status_code == 401
        error = answer.json()["error"]
        assert error["code"] == "invalid_token" and "looks like a placeholder that was not expanded" in error["message"]
        assert placeholder in error["message"]
    assert "looks like a placeholder that was not expanded" in answer.headers["www-authenticate"]  # the MCP 401's challenge


def test_the_mcp_endpoint_is_taken_as_the_gateway_it_belongs_to(
    live_server: LiveServer, acme_live: ProjectTokens, as_agent: Any, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    as_agent(acme_live.writer)
    monkeypatch.setenv("RELAYROOM_URL", f"{live_server.url}/mcp/")
    code, out, err = run(capsys, "learn", "-q", "fact", "The MCP URL names the same gateway.")
    assert code == 0 and out.startswith("kn_"), err


def test_entries_lists_what_the_token_may_see(
    live_server: LiveServer, acme_live: ProjectTokens, as_agent: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    as_agent(acme_live.writer)
    waiting = run(capsys, "learn", "-q", "pitfall", "The pooler cannot do\nprepared statements.")[1].strip()
    trusted = run(capsys, "learn", "-q", "convention", "Migrations are named YYYYMMDD_description.sql.")[1].strip()
    confirm(live_server, trusted)

    as_agent(acme_live.owner)
    code, out, err = run(capsys, "entries", "--state", "candidate")
    rows = [line.split(None, 3) for line in out.splitlines()]
    assert code == 0 and rows == [["ID", "STATE", "KIND", "STATEMENT"],
                                  [waiting, "candidate", "pitfall", "The pooler cannot do prepared statements."]], err
    code, out, _ = run(capsys, "entries", "--json")
    assert [e["id"] for e in json.loads(out)] == [trusted, waiting]

    as_agent(acme_live.reader)  # a reader sees trusted entries only, and no other principal's candidate
    code, out, _ = run(capsys, "entries")
    assert [line.split()[0] for line in out.splitlines()[1:]] == [trusted]
    code, out, err = run(capsys, "entries", "--state", "contradicted")
    assert code == 0 and out == "" and err.strip() == "no contradicted entries this token may see"
