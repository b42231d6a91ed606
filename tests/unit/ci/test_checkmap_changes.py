"""A published map takes effect at once only when it binds exactly what the
map in force binds, compared by meaning: how the file words it makes no
difference, and every change of who may vote, on which refs and events,
waits for the owner."""

from __future__ import annotations

import pytest

from gateway.ci.checkmaps.changes import binding_rows, binds_the_same, check_rows
from gateway.ci.checkmaps.model import CheckMap
from gateway.ci.checkmaps.validate import validate_text

ENTRY_A = "kn_01JD8XQ4M3V9T7R2K5N6P8W0YZ"
ENTRY_B = "kn_01JD9A2B3C4D5E6F7G8H9J0K1M"

BASE = f"""project: acme
issuers:
  - provider: github-actions
    repository: acme/api
    repository_id: "123456"
    repository_owner_id: "7890"
    refs: [refs/heads/main, refs/heads/release]
    webhook_secret_env: ACME_GH_SECRET
  - provider: gitlab
    issuer: https://gitlab.example.com
    project_id: "42"
    refs: [main]
  - provider: webhook
    source: nightly
    secret_env: ACME_NIGHTLY
checks:
  migrations:
    supports: [{ENTRY_A}]
"""


def parsed(text: str) -> CheckMap:
    checkmap, problems = validate_text(text, "checkmaps/acme.yaml")
    assert problems == [] and checkmap is not None, problems
    return checkmap


# Each rewrites BASE without changing who may vote, or how.
SAME_MEANING = {
    "checks changed": BASE.replace(f"[{ENTRY_A}]", f"[{ENTRY_A}, {ENTRY_B}]") + "  lint:\n    supports: [" + ENTRY_B + "]\n",
    "bindings reordered": BASE.replace("""  - provider: webhook
    source: nightly
    secret_env: ACME_NIGHTLY
""", "").replace("issuers:\n", "issuers:\n  - provider: webhook\n    source: nightly\n    secret_env: ACME_NIGHTLY\n"),
    "refs reordered": BASE.replace("[refs/heads/main, refs/heads/release]", "[refs/heads/release, refs/heads/main]"),
    "a GitLab branch written in full": BASE.replace("refs: [main]", "refs: [refs/heads/main]"),
    "the default issuer written out": BASE.replace("  - provider: github-actions\n",
                                                   "  - provider: github-actions\n    issuer: https://token.actions.githubusercontent.com\n"),
    "comments, quoting and block lists": "# the map\n" + BASE.replace('repository_id: "123456"', "repository_id: '123456'  # the id")
    .replace("refs: [main]", "refs:\n      - main"),
    "a name for people changed": BASE.replace("repository: acme/api", "repository: acme/api-renamed")
    .replace('    project_id: "42"', '    project_id: "42"\n    project_path: acme/api'),
    "descriptions": BASE.replace("  - provider: gitlab\n", "  - provider: gitlab\n    description: our GitLab\n"),
}

# Each changes who may vote, or on which refs and events: the owner decides.
CHANGED_BINDINGS = {
    "a ref added": BASE.replace("refs/heads/release]", "refs/heads/release, refs/heads/next]"),
    "a ref removed": BASE.replace(", refs/heads/release]", "]"),
    "any ref": BASE.replace("[refs/heads/main, refs/heads/release]", '["*"]'),
    "a GitLab branch made a tag": BASE.replace("refs: [main]", "refs: [refs/tags/main]"),
    "an event let in": BASE.replace("    webhook_secret_env: ACME_GH_SECRET\n",
                                    "    webhook_secret_env: ACME_GH_SECRET\n    allow_events: [pull_request_target]\n"),
    "workflows narrowed": BASE.replace("    webhook_secret_env: ACME_GH_SECRET\n",
                                       "    webhook_secret_env: ACME_GH_SECRET\n    workflows: [.github/workflows/ci.yml]\n"),
    "a secret's name": BASE.replace("ACME_GH_SECRET", "ACME_OTHER_SECRET"),
    "the hub's GitHub App secret": BASE.replace("    webhook_secret_env: ACME_GH_SECRET\n",
                                                "    webhook_secret_env: ACME_GH_SECRET\n    github_app: true\n"),
    "shared with another project": BASE.replace("    refs: [main]\n", "    refs: [main]\n    shared_with: [beta]\n"),
    "the owner id dropped": BASE.replace('    repository_owner_id: "7890"\n', ""),
    "another repository": BASE.replace('"123456"', '"123457"'),
    "another issuer": BASE.replace("https://gitlab.example.com", "https://gitlab.example.com:8443"),
    "a binding removed": BASE.replace("  - provider: webhook\n    source: nightly\n    secret_env: ACME_NIGHTLY\n", ""),
    "a binding added": BASE.replace("checks:", "  - provider: oidc\n    issuer: https://ci.example.com\n    subject: repo:acme\nchecks:"),
}


@pytest.mark.parametrize("text", SAME_MEANING.values(), ids=SAME_MEANING.keys())
def test_a_rewording_binds_the_same(text: str) -> None:
    assert binds_the_same(parsed(BASE), parsed(text))


@pytest.mark.parametrize("text", CHANGED_BINDINGS.values(), ids=CHANGED_BINDINGS.keys())
def test_a_change_of_who_may_vote_does_not(text: str) -> None:
    assert parsed(text).sha256 != parsed(BASE).sha256
    assert not binds_the_same(parsed(BASE), parsed(text))


def test_nothing_in_force_binds_nothing_the_same() -> None:
    assert not binds_the_same(None, parsed(BASE))


def test_the_owner_sees_the_bindings_side_by_side() -> None:
    new = parsed(CHANGED_BINDINGS["a ref added"].replace("  - provider: webhook\n    source: nightly\n    secret_env: ACME_NIGHTLY\n", ""))
    rows = {row.who: row for row in binding_rows(parsed(BASE), new)}
    github = rows["GitHub repository 123456 on github.com"]
    assert github.change == "changed"
    [refs] = [f for f in github.fields if f.changed]
    assert (refs.label, refs.old, refs.new) == ("Refs that vote", "refs/heads/main, refs/heads/release",
                                               "refs/heads/main, refs/heads/release, refs/heads/next")
    assert rows["GitLab project 42 on gitlab.example.com"].change == "same"
    removed = rows["webhook nightly"]
    assert removed.change == "removed" and all(f.new is None for f in removed.fields)
    assert [row.change for row in binding_rows(None, new)] == ["added", "added"]


def test_events_name_what_allow_events_lets_in() -> None:
    rows = binding_rows(parsed(BASE), parsed(CHANGED_BINDINGS["an event let in"]))
    [events] = [f for f in rows[0].fields if f.changed]
    assert events.old == "push, schedule, workflow_dispatch"
    assert events.new == "push, schedule, workflow_dispatch; also pull_request_target (allow_events)"


def test_the_checks_that_changed() -> None:
    rows = check_rows(parsed(BASE), parsed(SAME_MEANING["checks changed"]))
    assert [(r.name, r.old is None, r.new is None) for r in rows] == [("lint", True, False), ("migrations", False, False)]
    assert check_rows(parsed(BASE), parsed(SAME_MEANING["refs reordered"])) == []
