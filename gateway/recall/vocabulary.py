"""A small curated vocabulary of software development, for query expansion.

Agents ask in their own words; entries are written in the project's.  Each
group below holds words that, in a question about a code base, usually mean
the same thing or point at the same entry ("db" / "database" / "postgres",
"rename" / "name" / "naming").  The table is general software vocabulary,
not tuned to any one project: a word maps to the other members of every
group it belongs to, in table order, and the caller caps how many it uses.

`KIND_HINTS` lists the cues that say which kind of entry a question wants.
"""

from __future__ import annotations

from functools import lru_cache

SYNONYM_GROUPS: tuple[tuple[str, ...], ...] = (
    # naming and structure
    ("name", "naming", "named", "rename", "call", "called", "prefix"),
    ("folder", "directory", "dir", "path", "location"),
    ("file", "filename"),
    ("function", "method", "helper", "func", "fn"),
    ("class", "type", "struct", "model"),
    ("module", "package", "crate", "library", "lib"),
    ("export", "import", "exports"),
    ("component", "widget", "element"),
    ("field", "property", "attribute", "key", "column"),
    ("optional", "nullable", "null", "none", "missing"),
    ("variable", "var", "env", "environment"),
    ("constant", "const"),
    ("monorepo", "repo", "repository", "workspace"),
    # testing
    ("test", "tests", "testing", "pytest", "unittest", "spec", "suite"),
    ("mock", "stub", "fake", "intercept", "double"),
    ("fixture", "sample", "seed", "example"),
    ("snapshot", "insta", "golden", "expected"),
    ("coverage", "covered", "cov"),
    ("assert", "assertion", "compare", "equality", "equal"),
    ("flaky", "intermittent", "random", "nondeterministic"),
    # building and running
    ("build", "compile", "compiler", "compilation"),
    ("run", "execute", "invoke", "launch", "start"),
    ("stop", "shutdown", "kill", "halt"),
    ("install", "setup", "bootstrap", "provision"),
    ("dependency", "dependencies", "deps", "requirement", "requirements", "package"),
    ("upgrade", "update", "bump", "refresh", "regenerate"),
    ("lockfile", "lock", "pin", "pinned"),
    ("delete", "remove", "drop", "purge", "wipe", "clean", "cleanup"),
    ("reset", "recreate", "reinitialize", "initdb", "init", "initialize"),
    ("script", "command", "cmd", "task", "make", "just"),
    ("cli", "terminal", "shell", "console", "command-line"),
    ("repl", "shell", "console", "interactive"),
    # style and quality
    ("format", "formatter", "formatting", "fmt", "prettier", "black", "reformat"),
    ("lint", "linter", "linting", "clippy", "ruff", "eslint", "check", "checks"),
    ("style", "convention", "guideline", "rule", "standard"),
    ("typo", "spelling", "spell"),
    ("comment", "comments", "docstring"),
    ("warning", "warnings", "deny"),
    ("refactor", "restructure", "cleanup", "extract", "inline"),
    ("type", "types", "typing", "annotation", "typed"),
    # docs and process
    ("doc", "docs", "documentation", "readme", "guide", "manual", "sphinx", "mkdocs"),
    ("preview", "serve", "local", "locally", "view"),
    ("release", "publish", "ship", "deploy", "tag"),
    ("version", "versioning", "semver", "tag"),
    ("changelog", "release notes", "news", "history"),
    ("commit", "change", "changeset"),
    ("pr", "pull request", "merge request", "patch", "contribution"),
    ("review", "reviewer", "approve", "approval", "owner", "codeowners"),
    ("branch", "main", "master", "trunk"),
    ("rebase", "merge", "sync", "upstream", "fetch"),
    ("push", "force-push", "upload"),
    ("issue", "ticket", "bug", "report", "discussion"),
    ("feature", "enhancement", "proposal", "idea"),
    ("ci", "pipeline", "workflow", "github actions", "job", "build"),
    ("decision", "decide", "decided", "choose", "chose", "choice", "adr"),
    ("policy", "rule", "require", "required", "must"),
    # failures
    ("error", "exception", "failure", "fail", "fails", "failing", "crash", "traceback", "panic", "broken"),
    ("bug", "defect", "problem", "issue", "regression"),
    ("fix", "patch", "repair", "resolve", "workaround"),
    ("timeout", "timed", "hang", "hangs", "stuck", "slow"),
    ("permission", "denied", "access", "sudo", "root", "forbidden"),
    # data and storage
    ("database", "db", "sql", "postgres", "postgresql", "sqlite", "mysql"),
    ("migration", "migrations", "migrate", "schema", "alembic"),
    ("table", "tables", "schema"),
    ("query", "queries", "select"),
    ("cache", "cached", "caching", "memoize"),
    ("disk", "space", "storage", "volume", "volumes"),
    ("memory", "ram", "oom"),
    ("search", "elasticsearch", "index", "lookup"),
    ("page", "paging", "pagination", "paginate", "cursor", "limit"),
    ("json", "payload", "body", "serialization", "serialize", "wire"),
    ("yaml", "yml", "toml", "config", "configuration", "settings"),
    ("config", "configuration", "settings", "options", "preferences"),
    ("date", "dates", "time", "datetime", "timestamp", "timestamps", "timezone", "luxon", "moment"),
    ("locale", "translation", "translations", "i18n", "l10n", "localization"),
    # network and services
    ("http", "request", "requests", "fetch", "call", "client"),
    ("api", "endpoint", "rpc", "route", "method"),
    ("server", "service", "backend", "daemon"),
    ("frontend", "browser", "ui", "client", "web"),
    ("ui", "tui", "interface", "screen", "display", "render", "rendering", "output"),
    ("color", "colour", "colors", "theme", "style", "styled"),
    ("text", "string", "line", "lines", "wrap", "wrapping"),
    ("port", "address", "listen", "socket", "bind"),
    ("proxy", "mitmproxy", "intercept"),
    ("certificate", "cert", "certs", "tls", "ssl", "https", "pem"),
    ("network", "internet", "offline", "online", "sandbox"),
    ("auth", "authentication", "login", "log in", "sign in", "credential", "credentials"),
    ("password", "secret", "token", "key", "credential"),
    ("security", "vulnerability", "vulnerabilities", "cve", "exploit", "untrusted"),
    ("license", "licence", "copyright", "header"),
    ("docker", "container", "containers", "compose", "image"),
    ("log", "logs", "logging", "trace", "tracing", "verbose", "debug"),
    ("debug", "debugger", "debugging", "pdb", "inspect", "diagnose"),
    ("performance", "speed", "fast", "slow", "latency", "benchmark", "profile", "profiling"),
    ("async", "await", "asyncio", "trio", "concurrency", "concurrent"),
    ("thread", "threads", "parallel", "worker", "workers"),
    ("plugin", "plugins", "extension", "addon", "module"),
    ("hook", "hooks", "callback", "event"),
    ("windows", "win", "msvc", "win32"),
    ("macos", "mac", "osx", "darwin"),
    ("linux", "ubuntu", "debian", "fedora"),
    ("python", "py", "interpreter", "cpython"),
    ("rust", "cargo", "rustc"),
    ("javascript", "js", "typescript", "ts", "node", "npm"),
    ("react", "jsx", "tsx"),
    ("sign", "signing", "codesign", "signature"),
    ("safe", "safety", "risky", "danger", "dangerous"),
    ("small", "minimal", "tiny", "short"),
    ("big", "large", "huge"),
)

KIND_HINTS: dict[str, tuple[str, ...]] = {
    "pitfall": (
        "pitfall", "pitfalls", "gotcha", "gotchas", "trap", "traps", "caveat", "caveats", "careful",
        "beware", "watch out", "avoid", "mistake", "mistakes", "footgun", "never", "don't", "dont",
        "fails", "failing", "failed", "broke", "broken", "breaks", "error", "errors", "wrong",
        "doesn't work", "not working", "why does", "why is", "stopped working", "refuses",
    ),
    "decision": (
        "decision", "decisions", "decide", "decided", "why did we", "why do we", "chose", "choose",
        "chosen", "choice", "rationale", "reason", "adr", "tradeoff", "trade-off", "alternative",
        "instead of", "which library", "which tool", "policy",
    ),
    "convention": (
        "convention", "conventions", "style", "naming", "how do i", "how should", "how to",
        "where do i put", "where should", "what should i call", "standard", "guideline", "rule",
        "rules", "the right way", "proper way", "format",
    ),
    "fact": (
        "fact", "what is", "which version", "default", "does it", "is there", "what port",
        "minimum", "how many", "where is",
    ),
}


def _stem(word: str) -> str:
    """A crude English stem for table lookups only (the index stems with
    Porter): enough to find "names" under "name" and "formatting" under
    "format"."""
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + keep
    return word


@lru_cache(maxsize=1)
def _table() -> dict[str, tuple[str, ...]]:
    table: dict[str, list[str]] = {}
    for group in SYNONYM_GROUPS:
        for member in group:
            for key in {member, _stem(member)}:
                bucket = table.setdefault(key, [])
                for other in group:
                    if other != member and other not in bucket:
                        bucket.append(other)
    return {key: tuple(values) for key, values in table.items()}


def synonyms_for(term: str) -> tuple[str, ...]:
    """Other words for `term` (lower-case), nearest groups first; () if none."""
    table = _table()
    stem = _stem(term)
    found = table.get(term) or table.get(stem) or ()
    return tuple(w for w in found if w != term and _stem(w) != stem)
