"""Server-rendered pages: one Jinja environment, one set of security headers.

Autoescaping is on for every template, so any string an agent wrote (a
statement, evidence, a contradiction's detail, a principal name) reaches the
page as text.  The Content-Security-Policy allows scripts and styles from this
origin only: no inline script, no inline style, no framing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jinja2 import Environment, FileSystemLoader, pass_context, select_autoescape
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from gateway.core.clock import to_date, to_rfc3339
from gateway.core.errors import GatewayError
from gateway.core.visible import first_invisible, invisible, marker
from gateway.knowledge.model import Entry
from gateway.knowledge.trust import blocked_until
from gateway.web.audit_text import contradiction_reason, describe
from gateway.web.errors import gateway_error_response
from gateway.web.labels import SETTING_LABELS, plural

PACKAGE_DIR = Path(__file__).resolve().parent.parent
TEMPLATES_DIR = PACKAGE_DIR / "templates"
STATIC_DIR = PACKAGE_DIR / "static"

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ]
)

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _when(moment: float | None) -> str:
    if moment is None:
        return "never"
    text = to_rfc3339(moment) or ""
    return text[:16].replace("T", " ") + " UTC"


def _day(moment: float | None) -> str:
    return "" if moment is None else to_date(moment)


def _compact_json(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.0f}%"


_BREAK_AFTER = re.compile(r"([/_.:-])")
MAX_LINK = 2000


def _soft_breaks(value: Any) -> Markup:
    """Escaped text with a line-break opportunity after / - _ . : so that a
    long check name or id wraps between its words, never inside one."""
    return Markup(_BREAK_AFTER.sub(r"\1<wbr>", str(escape(value))))


_INVISIBLE_MARK = Markup('<mark class="invisible-char" title="a character a person cannot see, {}">{}</mark>')


def _shown(value: Any) -> Markup:
    """Text as the store holds it, drawn so that the page's text is what
    agents are served (gateway.core.visible.marked): each invisible
    character as its marker, highlighted; a carriage return as a character
    reference, since an HTML parser turns a raw one into a line feed; the
    rest escaped."""
    text = "" if value is None else str(value)
    if "\r" not in text and first_invisible(text) is None:
        return escape(text)
    parts: list[str] = []
    for char in text:
        if invisible(char):
            parts.append(_INVISIBLE_MARK.format(marker(char).strip("[]"), marker(char)))
        elif char == "\r":
            parts.append(Markup("&#13;"))
        else:
            parts.append(escape(char))
    return Markup("").join(parts)


def _http_url(value: Any) -> str | None:
    """The URL if it is an absolute http(s) link a person may follow, else
    None.  A run_url comes from CI's request body: a `javascript:` or
    `data:` URL, or one with spaces or control characters, is never a link
    (the template shows such a value as text, escaped)."""
    if not isinstance(value, str) or not value or len(value) > MAX_LINK:
        return None
    if any(ord(ch) <= 32 or ord(ch) == 127 for ch in value):
        return None
    try:
        parts = urlsplit(value)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    return value


@pass_context
def _audit_text(context: Any, row: dict[str, Any]) -> str:
    """An audit row as a sentence, issuers named as the page names them (the check map's labels)."""
    return describe(row.get("action", ""), row.get("detail"), context.get("issuer_label"))


def _blocked_until(entry: Entry, now: float) -> float | None:
    """Until when a live contradiction blocks an owner's confirm of `entry` (None: it does not)."""
    return blocked_until([c.to_rule() for c in entry.contradictions], now)


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES_DIR)),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["day"] = _day
    env.filters["rfc3339"] = to_rfc3339
    env.filters["compact_json"] = _compact_json
    env.filters["percent"] = _percent
    env.filters["plural"] = plural
    env.filters["soft_breaks"] = _soft_breaks
    env.filters["http_url"] = _http_url
    env.filters["shown"] = _shown
    env.filters["contradiction_reason"] = contradiction_reason
    env.filters["audit_text"] = _audit_text
    env.filters["blocked_until"] = _blocked_until
    env.globals["setting_labels"] = SETTING_LABELS
    return env


ENV = _environment()


def page(name: str, context: dict[str, Any], *, status: int = 200, headers: dict[str, str] | None = None) -> HTMLResponse:
    html = ENV.get_template(name).render(**context)
    response = HTMLResponse(html, status_code=status)
    for header, value in {**SECURITY_HEADERS, **(headers or {})}.items():
        response.headers[header] = value
    return response


def wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


def error_page(request: Request, exc: GatewayError, context: dict[str, Any] | None = None) -> Response:
    """A refusal as a page for a browser, as the contract's JSON body otherwise."""
    if not wants_html(request):
        response = gateway_error_response(exc)
        for header, value in SECURITY_HEADERS.items():
            response.headers.setdefault(header, value)
        return response
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
    return page("error.html", {**(context or {}), "error": exc}, status=exc.status, headers=headers)
