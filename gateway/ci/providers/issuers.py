"""An issuer URL, read as the CI system it names.

A binding's `issuer` is written exactly as its tokens carry `iss`; the rules
that compare issuers (one repository per project, no issuer with immutable
ids bound by `sub`) read it as a CI system, however its URL is spelled.
"""

from __future__ import annotations

import functools
from urllib.parse import urlsplit


@functools.lru_cache(maxsize=256)
def issuer_host(issuer_url: str) -> str:
    """`host[:port]` of an issuer URL: the CI system's name in an issuer identity."""
    parts = urlsplit(issuer_url)
    host = (parts.hostname or "").lower()
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    return f"{host}:{parts.port}" if parts.port else host


def issuer_system(issuer_url: str) -> str:
    """The host an issuer URL names, the default https port dropped: the CI
    system it is, however the URL is spelled."""
    host = issuer_host(issuer_url)
    return host[:-4] if host.endswith(":443") and issuer_url.lower().startswith("https:") else host


def issuer_location(issuer_url: str) -> str:
    """The issuer as one CI system names it: its host (the default https
    port dropped) and its path."""
    return issuer_system(issuer_url) + urlsplit(issuer_url).path
