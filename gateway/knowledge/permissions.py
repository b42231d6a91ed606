"""Who may do what: every action a door or a service refuses below some
token level, and the one check that refuses it.

One table, so that the level an action needs is read in one place (and
docs/security.md's table can be checked against it) rather than repeated at
each door: REST, MCP and the services check the same action by name.  An
action missing from the table is a programming error (KeyError), never a
silent allow.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.errors import Forbidden
from gateway.knowledge.model import Principal


@dataclass(frozen=True)
class Action:
    level: str
    # How the refusal names the action ("<doing> needs a/an <level> token ...");
    # clients and the docs quote these sentences, so they stay as they were.
    doing: str


ACTIONS: dict[str, Action] = {
    # agents' writes
    "learn": Action("write", "learn"),
    "post_event": Action("write", "posting an event"),
    "report_error": Action("write", "report_error"),
    "post_message": Action("write", "posting a thread message"),
    "propose": Action("write", "proposing a reflection"),
    # owner moves on entries and proposals
    "confirm": Action("owner", "confirm"),
    "refute": Action("owner", "refute"),
    "retire": Action("owner", "retiring an entry"),
    "set_expiry": Action("owner", "changing an entry's expiry"),
    "correct": Action("owner", "correcting an entry"),
    "bulk": Action("owner", "a move on several entries"),
    "list_proposals": Action("owner", "listing proposals"),
    "approve_proposal": Action("owner", "approving a proposal"),
    "reject_proposal": Action("owner", "rejecting a proposal"),
    # owner reads and project settings
    "read_audit": Action("owner", "reading the audit ledger"),
    "read_learning": Action("owner", "reading the learning figures"),
    "read_settings": Action("owner", "reading settings"),
    "change_settings": Action("owner", "changing settings"),
    "edit_playbook": Action("owner", "editing the playbook"),
    "manage_tokens": Action("owner", "managing the project's tokens"),
    "read_checkmap": Action("owner", "reading the project's check map"),
    "review_checkmap": Action("owner", "approving or rejecting a published check map"),
}


def require(principal: Principal, action: str) -> None:
    """Refuse (403 insufficient_level) unless `principal` holds the level `action` needs."""
    needed = ACTIONS[action]
    if not principal.at_least(needed.level):
        raise Forbidden(
            f"{needed.doing} needs {'an' if needed.level == 'owner' else 'a'} {needed.level} token for project {principal.project.slug}; "
            f"this token is {principal.level}",
            code="insufficient_level",
        )
