"""The owner's review as a queue: the Knowledge tab puts the candidates first,
each with its evidence and the checks that speak for it; a contradicted
entry's Confirm says until when it is blocked; the blocked page offers the
correction, prefilled, and that correction can be confirmed at once.  And
what a person reads elsewhere: an expired entry says Expired, the audit's
promote row names issuers as the other rows do."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gateway.core.clock import DAY, to_date
from tests.support.dashboard_helpers import HTML, csrf_for, login, post_form
from tests.support.helpers import bearer, learn, support

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])
P = "/projects/acme"
GITHUB = "oidc:127.0.0.1:9101:acme"
CHECKMAP = """\
project: acme
issuers:
  - provider: github-actions
    issuer: http://127.0.0.1:9101
    repository: acme/api
    repository_id: "123456"
    refs: [refs/heads/main]
  - provider: webhook
    source: nightly
    secret_env: ACME_NIGHTLY_SECRET_FOR_THE_QUEUE_TEST
checks:
  migrations:
    supports: [{entry}]
  schema-lint:
    supports: [{entry}]
"""


def ids(page: str) -> list[str]:
    return re.findall(r'<li class="entry[^"]*" data-entry-id="([^"]+)"', page)


def card(page: str, entry_id: str) -> str:
    match = re.search(rf'<li class="entry[^"]*" data-entry-id="{entry_id}".*?</li>', page, re.S)
    assert match is not None, entry_id
    return " ".join(re.sub(r"<[^>]+>", " ", match.group(0)).split())


@sqlite_only
async def test_candidates_come_first_with_their_evidence_and_checks(
    client: Any, acme: Any, hub: Any, checkmap_dir: Any
) -> None:
    waiting = (await learn(client, "acme", acme.writer, "Migrations run before the deploy.", kind="convention",
                           evidence="deploy.sh runs make migrate first"))["id"]
    hub.clock.advance(60)
    trusted = (await learn(client, "acme", acme.writer, "The pooler cannot do prepared statements."))["id"]
    await client.post(f"/v1/projects/acme/entries/{trusted}/confirm", headers=bearer(acme.owner))
    (checkmap_dir / "acme.yaml").write_text(CHECKMAP.format(entry=waiting))
    hub.checkmaps.reload()
    await support(hub, "acme", waiting, GITHUB, "migrations")
    await login(client, acme.owner)

    page = (await client.get(f"{P}/knowledge", headers=HTML)).text
    # Newest first alone would put the newer trusted entry above the waiting candidate.
    assert ids(page) == [waiting, trusted]
    assert page.index("Needs review") < page.index(f'data-entry-id="{waiting}"') < page.index("Trusted, contradicted and retired")
    text = card(page, waiting)
    assert "Evidence: deploy.sh runs make migrate first" in text
    assert "migrations passed (GitHub Actions · acme/api)" in text and "schema-lint mapped, no success yet" in text
    assert "Confirm" in text and "Refute" in text
    # A filter is one list, newest first, as before.
    assert ids((await client.get(f"{P}/knowledge?kind=fact", headers=HTML)).text) == [trusted]
    assert ids((await client.get(f"{P}/knowledge?state=candidate", headers=HTML)).text) == [waiting]


@sqlite_only
async def test_a_blocked_confirm_says_so_on_its_button_and_leads_to_a_prefilled_correction(
    client: Any, acme: Any, hub: Any
) -> None:
    entry_id = (await learn(client, "acme", acme.writer, "Deploys run on Fridays.", kind="decision"))["id"]
    await client.post(f"/v1/projects/acme/entries/{entry_id}/confirm", headers=bearer(acme.owner))
    refuted = await client.post(f"/v1/projects/acme/events", headers=bearer(acme.other_writer),
                                json={"type": "error", "detail": {"contradicts": entry_id, "reason": "saw a Monday deploy"}})
    assert refuted.json()["effect"] == "contradicted"
    until = to_date(hub.clock.now() + 30 * DAY)
    await login(client, acme.owner)

    page = (await client.get(f"{P}/knowledge", headers=HTML)).text
    button = re.search(rf'data-entry-id="{entry_id}".*?<form[^>]*/confirm"[^>]*>.*?(<button.*?</button>)', page, re.S)
    assert button is not None
    assert 'class="btn btn-blocked"' in button.group(1) and f"Confirm<span class=\"btn-note\"> blocked until" in button.group(1)
    assert until in button.group(1)

    blocked = await post_form(client, f"{P}/entries/{entry_id}/confirm", {"csrf_token": await csrf_for(client, f"{P}/knowledge")})
    assert blocked.status_code == 409 and until in blocked.text
    form = re.search(r'<form[^>]*action="([^"]*/correct)"[^>]*>(.*?)</form>', blocked.text, re.S)
    assert form is not None and form.group(1) == f"{P}/entries/{entry_id}/correct"
    assert ">Deploys run on Fridays.</textarea>" in form.group(2)
    assert '<option value="decision" selected>' in form.group(2)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.group(2)).group(1)  # type: ignore[union-attr]
    reason = re.search(r'name="reason" maxlength="2000" value="([^"]*)"', form.group(2)).group(1)  # type: ignore[union-attr]
    assert reason.startswith("Restated after the contradiction by agent-9")

    # The owner states the fact anew; the correction has no contradiction, so a confirm works at once.
    written = await post_form(client, f"{P}/entries/{entry_id}/correct", {
        "csrf_token": csrf, "statement": "Deploys run on Fridays, and hotfixes on any day.", "kind": "decision", "reason": reason})
    assert written.status_code == 303
    correction = re.search(r"/entries/(kn_\w+)", written.headers["location"]).group(1)  # type: ignore[union-attr]
    confirmed = await client.post(f"/v1/projects/acme/entries/{correction}/confirm", headers=bearer(acme.owner))
    assert confirmed.json()["state"] == "trusted"
    old = (await client.get(f"/v1/projects/acme/entries/{entry_id}", headers=bearer(acme.owner))).json()
    assert old["state"] == "retired"


@sqlite_only
async def test_an_expired_entry_reads_expired_not_promoted_not_yet(client: Any, acme: Any, hub: Any) -> None:
    entry_id = (await learn(client, "acme", acme.writer, "The cache is warm on Mondays.", ttl_days=1))["id"]
    hub.clock.advance(2 * DAY)
    await login(client, acme.owner)
    page = " ".join(re.sub(r"<[^>]+>", " ", (await client.get(f"{P}/entries/{entry_id}", headers=HTML)).text).split())
    assert "Promoted not yet" not in page
    assert "Promoted never: it expired first" in page and "Expired " in page and "State Expired: retired" in page
    listed = (await client.get(f"{P}/knowledge?state=retired", headers=HTML)).text
    assert "Expired " in card(listed, entry_id)


@sqlite_only
async def test_the_audits_promote_row_names_issuers_as_the_other_rows_do(
    client: Any, acme: Any, hub: Any, checkmap_dir: Any
) -> None:
    entry_id = (await learn(client, "acme", acme.writer, "Migrations run before the deploy."))["id"]
    (checkmap_dir / "acme.yaml").write_text(CHECKMAP.format(entry=entry_id))
    hub.checkmaps.reload()
    await support(hub, "acme", entry_id, GITHUB, "migrations")
    await support(hub, "acme", entry_id, "webhook:nightly:acme", "schema-lint")
    await login(client, acme.owner)
    page = (await client.get(f"{P}/audit?entry={entry_id}", headers=HTML)).text
    text = " ".join(re.sub(r"<[^>]+>", " ", page).split())
    assert "Trusted: enough distinct issuers support it (GitHub Actions · acme/api, Webhook nightly)." in text
    assert "CI at 127.0.0.1" not in text
