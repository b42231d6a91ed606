"""Prometheus metrics, one registry per hub (tests build many hubs).

With several uvicorn workers each process exports its own figures; scrape
each, or put the gateway behind one process per host.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("relayroom_http_requests_total", "HTTP requests", ["method", "route", "status"], registry=r)
        self.request_seconds = Histogram(
            "relayroom_http_request_seconds", "HTTP request latency", ["route"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.attestations = Counter(
            "relayroom_attestations_total", "CI attestations recorded", ["outcome", "counted"], registry=r
        )
        self.promotions = Counter("relayroom_promotions_total", "entries promoted to trusted", ["by"], registry=r)
        self.contradictions = Counter("relayroom_contradictions_total", "contradictions recorded", registry=r)
        self.jwks_fetches = Counter("relayroom_jwks_fetches_total", "JWKS and discovery fetches", ["result"], registry=r)
        self.recall_seconds = Histogram(
            "relayroom_recall_seconds", "recall latency inside the gateway", buckets=LATENCY_BUCKETS, registry=r
        )
        self.refusals = Counter("relayroom_refusals_total", "refused requests by error code", ["code"], registry=r)
        # labels() validates and looks up its arguments on every call; a
        # request's children are found in one dictionary look-up instead.
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:
            children = (self.requests.labels(method, route, str(status)), self.request_seconds.labels(route))
            if len(self._children) < 4096:  # methods come from clients: keep the cache bounded
                self._children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
