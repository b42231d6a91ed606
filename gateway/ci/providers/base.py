"""The CI provider interface: a check map binding is an instance of its
provider's class.

A provider is one subclass of `Binding`, in its own module, listed once in
`gateway.ci.providers.PROVIDERS`.  The class says, and every rule asks it
(check map validation, the conflicts between maps, the OIDC verifier, the
intake, the pages); no other code names a provider:

    NAME, LABEL                 the `provider:` a map writes; how the pages name it
    KEYS, read, check_ref, check_workflow   the binding's keys: how they are read and checked
    BINDS_BY, ID_ISSUERS        immutable ids, a subject, or a secret; the issuers
                                that carry its ids (never bound by `sub`)
    repository_key              the repository whose CI it lets speak (one project each)
    REQUIRED_CLAIMS, identifies which tokens are its runs, and which are this binding's
    run_from_claims, refusal    the run a token describes, and why it may not vote
    workflow_of, home, provenance   what the attestation keeps of the run
    run_record                  the run a published map came from (repository, ref, commit, workflow, run, link)
    LABELS, normal_ref, meaning what a binding lets vote, whatever the file's wording
    detail, allow_event_note, EVENTS   what the pages and the map's reviewer read

An instance holds what every binding has (project, file, line, issuer, refs,
workflows, allow_events, shared_with) and the fields its class declares.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Hashable, Literal, Mapping

from gateway.ci.providers.claims import Refusal, mismatched, not_bound, ref_listed, str_claim
from gateway.ci.providers.issuers import issuer_host
from gateway.ci.providers.workflows import WorkflowRef
from gateway.core.errors import Forbidden

if TYPE_CHECKING:
    from gateway.ci.providers.fields import Fields


@dataclass(frozen=True)
class RunFacts:
    """What a verified credential says about the run that wants to vote.

    A provider builds one from a token's claims (`run_from_claims`), GitHub
    also from a signed `workflow_run` delivery, and judges it in `refusal`:
    one policy for both doors, so they cannot drift apart.
    """

    event: str | None  # what started the run: GitHub's event_name, GitLab's pipeline_source
    ref: str | None  # as the binding's refs name it: refs/heads/main, refs/tags/v1
    # "branch" / "tag" as the credential says; "" when a token says nothing;
    # None only when the door cannot know (a workflow_run payload writes a
    # branch's and a tag's name alike in head_branch).
    ref_type: str | None
    workflow: WorkflowRef | None
    home: str | None  # the repository (project path) the run's code came from, by name
    # The provider's own facts, as its credential carries them (GitHub's
    # repository_id, GitLab's ref_protected, ...): read by its own `refusal`.
    provider_facts: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Binding:
    """One `issuers:` item of a check map: a CI system that may vote for a project."""

    NAME: ClassVar[str]
    LABEL: ClassVar[str]  # "" when the pages name its CI systems by their hosts
    KEYS: ClassVar[frozenset[str]]  # every key its item may hold but `provider` and `description`
    # How a binding names the runs that may vote: by immutable ids (which
    # names cannot be made to match), by an exact token subject, or by a
    # shared secret (a webhook source).
    BINDS_BY: ClassVar[Literal["ids", "subject", "secret"]]
    OIDC: ClassVar[bool] = True  # its runs present OIDC tokens, verified against `issuer`
    DEFAULT_ISSUER: ClassVar[str | None] = None  # None: the map must name the issuer
    # Issuers whose tokens carry this provider's ids even where no binding of
    # it names them: such an issuer is never bound by `sub`.
    ID_ISSUERS: ClassVar[tuple[str, ...]] = ()
    REFS_REQUIRED: ClassVar[bool] = True  # the binding must list the refs whose runs vote
    REQUIRED_CLAIMS: ClassVar[tuple[str, ...]] = ()
    PROVENANCE_CLAIMS: ClassVar[tuple[str, ...]] = ()
    # Fields that name things for people (a repository's name beside its id):
    # no part of what a binding lets vote.
    LABELS: ClassVar[frozenset[str]] = frozenset()
    # Which events vote without `allow_events`, for the pages.
    EVENTS: ClassVar[str] = "every run the binding names"

    project: str
    file: str
    line: int
    issuer: str | None = None  # the exact `iss` of its tokens; None for a webhook source
    refs: tuple[str, ...] | None = None
    workflows: tuple[str, ...] | None = None
    allow_events: tuple[str, ...] = ()
    # the other projects whose maps may bind the same repository (each must name this one back)
    shared_with: tuple[str, ...] = ()

    # -- the check map ---------------------------------------------------------------

    @property
    def provider(self) -> str:
        return self.NAME

    @classmethod
    def keys(cls) -> frozenset[str]:
        return cls.KEYS | {"provider", "description"}

    @classmethod
    def read(cls, fields: Fields) -> dict[str, Any]:
        """The provider's own fields, read from the item (problems go to `fields`)."""
        return {}

    @classmethod
    def check_ref(cls, ref: str) -> str | None:
        """What is wrong with one item of `refs` (None: nothing)."""
        return None

    @classmethod
    def check_workflow(cls, workflow: str) -> str | None:
        """What is wrong with one item of `workflows` (None: nothing)."""
        return None

    @classmethod
    def normal_ref(cls, ref: str) -> str:
        """One item of `refs` as the ref it names, however the map spells it."""
        return ref

    def meaning(self) -> tuple[Any, ...]:
        """What this binding lets vote, in the provider's terms: every field
        but where it is written and the names for people, lists as sets,
        refs as the refs they name.  Two bindings of one meaning let the
        same runs vote the same way, however the file words them."""
        out: list[tuple[str, Any]] = []
        for spec in fields(self):
            if spec.name in ("project", "file", "line") or spec.name in self.LABELS:
                continue
            value = getattr(self, spec.name)
            if spec.name == "refs" and value is not None:
                value = frozenset(self.normal_ref(ref) for ref in value)
            elif isinstance(value, tuple):
                value = frozenset(value)
            out.append((spec.name, value))
        return (self.NAME, tuple(out))

    def repository_key(self) -> str | None:
        """The repository whose CI this binding lets speak, as one name however
        its issuer is spelled: one repository's CI speaks for one project
        unless both maps consent (`shared_with`).  None: no repository."""
        return None

    def secret_names(self) -> tuple[str, ...]:
        """The environment variables holding its secrets: one secret, one voice."""
        return ()

    def lookup_keys(self) -> tuple[Hashable, ...]:
        """Keys a door finds this binding by, besides its issuer (a webhook's source)."""
        return ()

    @property
    def identity(self) -> str:
        """The issuer identity: derived from the verified issuer (or webhook
        source) and the project, never from the provider label."""
        assert self.issuer is not None
        return f"oidc:{issuer_host(self.issuer)}:{self.project}"

    def where(self) -> str:
        return f"{self.file}:{self.line}"

    # -- the OIDC door -------------------------------------------------------------------

    def identifies(self, claims: dict[str, Any]) -> bool:
        """Whether a verified token of this binding's issuer is one of its runs."""
        return False

    @classmethod
    def identity_mismatch(cls, bindings: list[Binding], claims: dict[str, Any]) -> Forbidden:
        """The refusal of a token no binding of `bindings` identifies.  It may
        name what a binding expects only to a token of that binding's own
        repository: anything else is other projects' business."""
        name = cls.REQUIRED_CLAIMS[0] if cls.REQUIRED_CLAIMS else "sub"
        return not_bound(name, repr(claims.get(name)), "run")

    @classmethod
    def run_from_claims(cls, claims: dict[str, Any]) -> RunFacts:
        return RunFacts(event=None, ref=str_claim(claims, "ref"), ref_type=str_claim(claims, "ref_type") or "",
                        workflow=cls.workflow_of(claims), home=cls.home(claims))

    def refusal(self, run: RunFacts) -> Refusal | None:
        """Why this run may not vote through this binding (None: it may).  By
        default a run on a ref the binding does not list."""
        if self.refs is not None and not ref_listed(self.refs, run.ref):
            return mismatched("ref", f"one of {', '.join(self.refs)}", run.ref, self.where())
        return None

    def authorize(self, claims: dict[str, Any]) -> None:
        found = self.refusal(self.run_from_claims(claims))
        if found is not None:
            raise found.error()

    @classmethod
    def workflow_of(cls, claims: dict[str, Any]) -> WorkflowRef | None:
        return None

    @classmethod
    def home(cls, claims: dict[str, Any]) -> str | None:
        return None

    @classmethod
    def provenance(cls, claims: dict[str, Any]) -> dict[str, Any]:
        out = {name: claims[name] for name in cls.PROVENANCE_CLAIMS if isinstance(claims.get(name), (str, int))}
        if isinstance(claims.get("sha"), (str, int)):
            out["commit"] = claims["sha"]
        return out

    @classmethod
    def run_record(cls, claims: dict[str, Any], issuer: str) -> dict[str, str | None]:
        """The run a published check map came from, as the ledger and the
        pages name it: repository, ref, commit, workflow, run, and a link to
        the run (`url`, None when the provider has no page for it)."""
        return {"repository": str_claim(claims, "sub"), "ref": str_claim(claims, "ref"),
                "commit": str_claim(claims, "sha"), "workflow": str_claim(claims, "workflow"),
                "run": str_claim(claims, "run_id") or str_claim(claims, "jti"), "url": None}

    # -- what people read ----------------------------------------------------------------

    def detail(self) -> str | None:
        """What the pages add to the provider's label: the repository, by name."""
        return None

    def allow_event_note(self, event: str) -> str:
        return f"allow_events lifts {event}: runs of this event vote, and they may build code that is not on a listed ref"
