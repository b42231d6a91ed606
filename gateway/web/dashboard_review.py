"""Dashboard review pages: proposals, checks, the Learning panel, the
playbook editor and the project settings."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.knowledge.inputs import MAX_EVIDENCE as MAX_REASON
from gateway.knowledge.inputs import validate_text
from gateway.knowledge.settings import SETTING_RULES
from gateway.ci.report import OUTCOMES, checks_report, recent_runs
from gateway.ci_steps import github_usage, unreachable_from_ci
from gateway.core.errors import Invalid
from gateway.recall.learning import DEFAULT_DAYS, MAX_DAYS, learning_report
from gateway.knowledge.playbook import relayroom_md
from gateway.knowledge.proposals import PROPOSAL_STATES
from gateway.web import charts
from gateway.web.dashboard_base import context, owner_post, owner_session, redirect, view, with_notice
from gateway.web.html import page
from gateway.web.inputs import hub_of, query_int, query_str
from gateway.web.labels import SETTING_LABELS, bindings_of

DEFAULT_REJECT_REASON = "rejected by the project owner in the dashboard"
LEARNING_WINDOWS = (7, 30, 90)
HALF_CHART = 520  # about the drawn width in pixels, so chart text stays at its CSS size
FULL_CHART = 1080
RECENT_RUNS = 5  # attestations listed under each check, each linked to its run
SETTING_HELP = {
    "k_distinct_issuers": "How many distinct CI systems must support a candidate before it is trusted. "
    "Your own confirm is enough alone, whatever K is.",
    "window_days": "How long a contradiction blocks promotion and your confirm. "
    "Each contradiction keeps the window in force when it was recorded.",
    "playbook_min_trusted": "RELAYROOM.md lists project knowledge only once the project has this many trusted entries.",
    "playbook_top_n": "How many trusted entries RELAYROOM.md lists, most used first.",
    "demotions_per_hour": "How many contradictions one principal (an agent, or you) may record in an hour; "
    "over it, a refutation is refused and written down once.",
}



# -- proposals ------------------------------------------------------------------------


@view
async def proposals(request: Request) -> Response:
    session = await owner_session(request)
    service = hub_of(request).proposals
    state = query_str(request, "state", 20)
    if state is None and "state" not in request.query_params:
        state = "pending"
    cursor = query_str(request, "cursor", 64)
    found, next_cursor = await service.list(session.principal, state=state, limit=50, cursor=cursor)
    ctx = await context(
        request,
        session,
        "proposals",
        proposals=found,
        next_cursor=next_cursor,
        state=state or "",
        states=PROPOSAL_STATES,
        counts=await service.counts(session.principal),
        paged=cursor is not None,
    )
    return page("proposals.html", ctx)


@view
async def approve(request: Request) -> Response:
    session, _ = await owner_post(request)
    entry, duplicate = await hub_of(request).proposals.approve(session.principal, request.path_params["proposal_id"])
    slug = session.principal.project.slug
    return redirect(with_notice(f"/projects/{slug}/proposals", "approved_duplicate" if duplicate else "approved", entry.id))


@view
async def reject(request: Request) -> Response:
    session, fields = await owner_post(request)
    reason = " ".join(fields.get("reason", "").split()) or DEFAULT_REJECT_REASON
    await hub_of(request).proposals.reject(session.principal, request.path_params["proposal_id"], reason)
    slug = session.principal.project.slug
    return redirect(with_notice(f"/projects/{slug}/proposals", "rejected"))


# -- checks ---------------------------------------------------------------------------------


@view
async def checks(request: Request) -> Response:
    hub = hub_of(request)
    session = await owner_session(request)
    project = session.principal.project
    now = hub.clock.now()
    report = await checks_report(hub.driver, project, now, hub.checkmaps)
    recent = await recent_runs(hub.driver, project, RECENT_RUNS)
    candidates, _ = await hub.knowledge.list(session.principal, state="candidate", limit=3)
    gateway_url = str(request.base_url).rstrip("/")
    ctx = await context(
        request,
        session,
        "checks",
        checkmap=await hub.publications.view(session.principal),
        report=report,
        outcomes=OUTCOMES,
        recent=recent,
        has_bindings=bool(bindings_of(hub.checkmaps, project.slug)),
        workflow=github_usage(gateway_url, "tests", hub.config.audience),
        unreachable=unreachable_from_ci(gateway_url),
        example_ids=[e.id for e in candidates],
    )
    return page("checks.html", ctx)


@view
async def approve_checkmap(request: Request) -> Response:
    session, _ = await owner_post(request)
    await hub_of(request).publications.approve(session.principal, request.path_params["sha256"])
    return redirect(with_notice(f"/projects/{session.principal.project.slug}/checks", "checkmap_approved"))


@view
async def reject_checkmap(request: Request) -> Response:
    session, fields = await owner_post(request)
    reason = " ".join(fields.get("reason", "").split())
    await hub_of(request).publications.reject(session.principal, request.path_params["sha256"],
                                              validate_text(reason, "reason", MAX_REASON) if reason else None)
    return redirect(with_notice(f"/projects/{session.principal.project.slug}/checks", "checkmap_rejected"))


# -- the Learning panel ------------------------------------------------------------------


@view
async def learning(request: Request) -> Response:
    hub = hub_of(request)
    session = await owner_session(request)
    days = query_int(request, "days", DEFAULT_DAYS, 1, MAX_DAYS)
    now = hub.clock.now()
    report = await learning_report(hub.driver, session.principal.project, now, days)
    labels = [d.date for d in report.per_day]
    top_used = max([e.used for e in report.most_useful] or [0])
    ctx = await context(
        request,
        session,
        "learning",
        report=report,
        days=days,
        windows=LEARNING_WINDOWS,
        ranking=hub.recall.status,
        recalls_chart=charts.bar_chart(
            labels, [("recalls", "recalls", [d.recalls for d in report.per_day])], width=HALF_CHART
        ),
        usage_chart=charts.bar_chart(
            labels,
            [
                ("returned", "entries returned", [d.returned for d in report.per_day]),
                ("used", "entries used", [d.used for d in report.per_day]),
            ],
            width=HALF_CHART,
        ),
        rate_chart=charts.rate_chart(labels, [d.use_rate for d in report.per_day], width=FULL_CHART, height=180),
        meter=lambda value: charts.meter(value, top_used),
    )
    return page("learning.html", ctx)


# -- playbook and settings ----------------------------------------------------------------


@view
async def playbook(request: Request) -> Response:
    hub = hub_of(request)
    session = await owner_session(request)
    project = session.principal.project
    now = hub.clock.now()
    base, trusted = await hub.ledger.playbook_base(session.principal)
    document = await relayroom_md(hub.driver, project, now)
    ctx = await context(
        request, session, "playbook", base=base, document=document, trusted=trusted, settings=project.settings
    )
    return page("playbook.html", ctx)


@view
async def save_playbook(request: Request) -> Response:
    session, fields = await owner_post(request)
    # Browsers send a textarea's line breaks as CRLF; the playbook is Markdown with LF.
    text = fields.get("playbook", "").replace("\r\n", "\n")
    await hub_of(request).accounts.set_playbook(session.principal, text)
    return redirect(with_notice(f"/projects/{session.principal.project.slug}/playbook", "playbook_saved"))


@view
async def settings(request: Request) -> Response:
    hub = hub_of(request)
    session = await owner_session(request)
    project = session.principal.project
    values = project.settings.to_json()
    fields = [
        {
            "name": name,
            "value": f"{values[name]:g}" if isinstance(values[name], float) else values[name],
            "step": "1" if kind is int else "any",
            "min": minimum,
            "max": maximum,
            "wanted": wanted,
            "help": SETTING_HELP.get(name, ""),
            "label": SETTING_LABELS.get(name, name),
        }
        for name, (kind, minimum, maximum, wanted) in SETTING_RULES.items()
    ]
    ctx = await context(request, session, "settings", fields=fields)
    return page("settings.html", ctx)


@view
async def save_settings(request: Request) -> Response:
    hub = hub_of(request)
    session, fields = await owner_post(request)
    project = session.principal.project
    current = project.settings.to_json()
    changes: dict[str, Any] = {}
    for name, (kind, _, _, wanted) in SETTING_RULES.items():
        raw = fields.get(name, "").strip()
        if raw == "":
            continue
        try:
            value: Any = kind(raw) if kind is int else float(raw)
        except ValueError:
            raise Invalid(f"{name} must be {wanted}", code="invalid_setting") from None
        if value != current[name]:
            changes[name] = value
    slug = session.principal.project.slug
    if not changes:
        return redirect(with_notice(f"/projects/{slug}/settings", "settings_unchanged"))
    await hub.accounts.update_settings(session.principal, changes)
    return redirect(with_notice(f"/projects/{slug}/settings", "settings_saved"))


P = "/projects/{project}"

routes = [
    Route(f"{P}/proposals", proposals, methods=["GET"]),
    Route(f"{P}/proposals/{{proposal_id}}/approve", approve, methods=["POST"]),
    Route(f"{P}/proposals/{{proposal_id}}/reject", reject, methods=["POST"]),
    Route(f"{P}/checks", checks, methods=["GET"]),
    Route(f"{P}/checkmap/pending/{{sha256}}/approve", approve_checkmap, methods=["POST"]),
    Route(f"{P}/checkmap/pending/{{sha256}}/reject", reject_checkmap, methods=["POST"]),
    Route(f"{P}/learning", learning, methods=["GET"]),
    Route(f"{P}/playbook", playbook, methods=["GET"]),
    Route(f"{P}/playbook", save_playbook, methods=["POST"]),
    Route(f"{P}/settings", settings, methods=["GET"]),
    Route(f"{P}/settings", save_settings, methods=["POST"]),
]
