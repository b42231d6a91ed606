"""Settings as one table: environment variable, CLI flag, default, help.

The table feeds `Config.from_env`, the CLI's flags and docs/configuration.md,
so a setting cannot exist in one place and be missing from another.
Secrets are wrapped in `Secret`, which hides itself in repr and logs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any, Mapping


class Secret:
    """A string that never shows itself in a repr, a log line or a traceback."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')"

    __str__ = __repr__

    def __bool__(self) -> bool:
        return bool(self._value)


@dataclass(frozen=True)
class Setting:
    name: str
    env: str
    default: Any
    help: str
    parse: Any = str


def _flag(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def _log_format(value: str) -> str:
    name = value.strip().lower()
    if name not in ("auto", "json", "text"):
        raise ValueError(value)
    return name


def _budget(value: str) -> int:
    """An hourly budget: a whole number of at least 1 (0 would refuse everything)."""
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


def _hosts(value: str) -> tuple[str, ...]:
    return tuple(h.strip() for h in value.split(",") if h.strip())


SETTINGS: tuple[Setting, ...] = (
    Setting("database_url", "RELAYROOM_DATABASE_URL", "sqlite:///./relayroom.db",
            "sqlite:///PATH (embedded default) or postgresql://USER@HOST:PORT/DB (several processes)"),
    Setting("checkmaps", "RELAYROOM_CHECKMAPS", "./checkmaps", "folder of check maps (*.yaml, *.yml)"),
    Setting("audience", "RELAYROOM_AUDIENCE", "relayroom", "the `aud` every CI OIDC token must carry"),
    Setting("allow_insecure_issuers", "RELAYROOM_ALLOW_INSECURE_ISSUERS", False,
            "1 lets an OIDC issuer be http:// on a loopback address (tests, local dev only)", _flag),
    Setting("github_webhook_secret", "RELAYROOM_GITHUB_WEBHOOK_SECRET", None,
            "secret of a GitHub App the operator runs for the whole hub (X-Hub-Signature-256); it verifies "
            "deliveries only for bindings with github_app: true (unset: /v1/webhooks/github answers 404 unless a "
            "binding names its own webhook_secret_env)", lambda v: Secret(v) if v else None),
    Setting("secret_key", "RELAYROOM_SECRET_KEY", None,
            "signs dashboard session cookies; generated once and kept in the store when unset",
            lambda v: Secret(v) if v else None),
    Setting("host", "RELAYROOM_HOST", "127.0.0.1", "listen address"),
    Setting("port", "RELAYROOM_PORT", 8750, "listen port", int),
    Setting("workers", "RELAYROOM_WORKERS", 1, "uvicorn worker processes", int),
    Setting("public_hosts", "RELAYROOM_PUBLIC_HOSTS", (),
            "comma-separated host names (host or host:port) the gateway is reached by behind a proxy; "
            "MCP's DNS-rebinding protection accepts these besides loopback", _hosts),
    Setting("learn_per_hour", "RELAYROOM_LEARN_PER_HOUR", 600,
            "candidates per principal per hour, by any path: learn (REST and MCP), the candidates its thread "
            "messages extract, its reflection proposals", _budget),
    Setting("events_per_hour", "RELAYROOM_EVENTS_PER_HOUR", 1200,
            "events per principal per hour (thread messages are counted against it apart)", _budget),
    Setting("recalls_per_hour", "RELAYROOM_RECALLS_PER_HOUR", 3600,
            "recalls and recall_used calls per principal per hour, REST and MCP together", _budget),
    Setting("sweep_interval", "RELAYROOM_SWEEP_INTERVAL", 60.0, "seconds between background expiry sweeps", float),
    Setting("log_level", "RELAYROOM_LOG_LEVEL", "info", "debug, info, warning or error"),
    Setting("log_format", "RELAYROOM_LOG_FORMAT", "auto",
            "json (one JSON object per line), text (a short line for a person), or auto: text when stderr is a "
            "terminal, JSON lines when it is not", _log_format),
    Setting("semantic_model", "RELAYROOM_SEMANTIC_MODEL", None,
            "the sentence-embedding model recall fuses with its lexical ranking: unset for the one the package "
            "installs with (all-MiniLM-L6-v2), off for lexical recall alone, or a folder holding model.onnx and "
            "tokenizer.json"),
    Setting("semantic_model_sha256", "RELAYROOM_SEMANTIC_MODEL_SHA256", None,
            "with a model folder: the sha256 its model.onnx must have; a file that differs is not run and recall "
            "stays lexical"),
    Setting("semantic_pair", "RELAYROOM_SEMANTIC_PAIR", False,
            "on: rank with a second model, multilingual-e5-small, read together with the installed one (a better "
            "\"nothing relevant\" signal, better answers on long entries, no better on short ones; about 100 MB more memory "
            "and 1.6 times the recall time; "
            "needs the pair extra: pip install 'relayroom-gateway[pair]'); ignored when RELAYROOM_SEMANTIC_MODEL "
            "is set", _flag),
)


@dataclass(frozen=True)
class Config:
    database_url: str = "sqlite:///./relayroom.db"
    checkmaps: str = "./checkmaps"
    audience: str = "relayroom"
    allow_insecure_issuers: bool = False
    github_webhook_secret: Secret | None = None
    secret_key: Secret | None = None
    host: str = "127.0.0.1"
    port: int = 8750
    workers: int = 1
    public_hosts: tuple[str, ...] = ()
    learn_per_hour: int = 600
    events_per_hour: int = 1200
    recalls_per_hour: int = 3600
    sweep_interval: float = 60.0
    log_level: str = "info"
    log_format: str = "auto"
    semantic_model: str | None = None
    semantic_model_sha256: str | None = None
    semantic_pair: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "Config":
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for setting in SETTINGS:
            raw = env.get(setting.env)
            if raw is not None and raw != "":
                try:
                    values[setting.name] = setting.parse(raw)
                except ValueError:
                    raise ValueError(f"{setting.env}={raw!r} is not valid: {setting.help}") from None
        known = {f.name for f in fields(cls)}
        for name, value in overrides.items():
            if value is not None:
                if name not in known:
                    raise TypeError(f"unknown setting {name}")
                values[name] = value
        return cls(**values)


def settings_markdown() -> str:
    rows = ["| variable | meaning | default |", "|---|---|---|"]
    for s in SETTINGS:
        default = "unset" if s.default in (None, ()) else s.default
        rows.append(f"| `{s.env}` | {s.help} | `{default}` |")
    return "\n".join(rows) + "\n"
