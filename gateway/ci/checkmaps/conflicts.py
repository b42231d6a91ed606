"""Which check map files may be in force together: a pure rule over parsed maps.

A file claims things that only one file may hold:

- its project (one file per project);
- each secret variable its bindings name (`secret_env`, `webhook_secret_env`):
  one sender is one voice, so two bindings reading one secret would let one
  sender count as two issuers;
- each repository its bindings let speak (a GitHub host and repository id,
  a GitLab issuer and project id, an OIDC issuer and subject): one
  repository's CI speaks for one project, unless every binding of it in
  either file names the other project under `shared_with`, both ways;
- the issuers its bindings bind by `sub` (`provider: oidc`), which may not
  be the issuer (compared by host) of a provider with immutable ids that any
  file binds by id: such an issuer is bound by its ids, never by a
  name-based subject.

The rule that settles a collision of projects, secret variables or
repositories: **the file in force stays in force, the newcomer is the
error.**  The last is not a collision between equals: a file binding by
`sub` an issuer that another file shows to have immutable ids is the error
wherever it stands, in force or new (taking it out of force removes a
voice, it never adds one).  A newcomer that sorts first by name, or arrives while the gateway runs, never displaces a reviewed
map.  When two files that are both newcomers collide (at start nothing is in
force yet), neither is loaded and both are reported: nothing decides for one
of them but a person.

`resolve` takes, per file, the version in force (or None) and the version on
disk if it validated (or None), and answers, per file, the version to keep in
force and the collisions to report.  No I/O: `CheckmapRegistry` feeds it.

Maps a project's repository published (`gateway.ci.publish`) stay in force
whatever the folder holds: `resolve` takes them as `fixed`, and a file that
clashes with one (its project, a repository, a secret variable, an issuer
bound by sub against one bound by ids, either way) is the error.  A
publication is judged the same way before it comes into force, against
every other project's map in force (`collisions`), and told only what it
may know (`publication_problem`): another project's slug only when the map
names that project under `shared_with`, never a file of the gateway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from gateway.ci.checkmaps.model import CheckMap, Problem
from gateway.ci.providers import PROVIDERS
from gateway.ci.providers.issuers import issuer_system

# Kinds of claim.  Two claims of one value collide when their kinds are in
# COLLIDE: a project or a secret variable is exclusive, and a repository is
# unless both claims consent (`_collide`).  An issuer host bound by id may be
# shared by many files (several projects on GitHub); binding it by subject
# anywhere bars the subject binding (`_barred`).
PROJECT, SECRET, REPOSITORY = "project", "secret variable", "repository"
BY_ID, BY_SUBJECT = "issuer bound by id", "issuer bound by sub"
COLLIDE = {(PROJECT, PROJECT), (SECRET, SECRET), (REPOSITORY, REPOSITORY)}


@dataclass(frozen=True)
class Claim:
    kind: str
    value: str
    line: int
    project: str = ""
    shared_with: tuple[str, ...] = ()  # a repository claim: the projects it consents to share with


def _collide(mine: Claim, theirs: Claim) -> bool:
    if (mine.kind, theirs.kind) not in COLLIDE:
        return False
    if mine.kind == REPOSITORY:
        # Two files of one project already collide as a project.
        consent = theirs.project in mine.shared_with and mine.project in theirs.shared_with
        return mine.project != theirs.project and not consent
    return True


@dataclass(frozen=True)
class Decision:
    keep: CheckMap | None  # the version in force after this resolution
    problems: tuple[Problem, ...] = ()


def claims(checkmap: CheckMap) -> list[Claim]:
    out = [Claim(PROJECT, checkmap.project, checkmap.project_line)]
    for binding in checkmap.bindings:
        for name in binding.secret_names():
            out.append(Claim(SECRET, name, binding.line))
        repository = binding.repository_key()
        if repository is not None:
            out.append(Claim(REPOSITORY, repository, binding.line, checkmap.project, binding.shared_with))
        if binding.issuer and binding.BINDS_BY == "ids":
            out.append(Claim(BY_ID, issuer_system(binding.issuer), binding.line))
        elif binding.issuer and binding.BINDS_BY == "subject":
            out.append(Claim(BY_SUBJECT, issuer_system(binding.issuer), binding.line))
    return out


Held = dict[str, dict[str, list[Claim]]]  # claimed value -> file -> its claims of that value


@dataclass(frozen=True)
class Collision:
    """A claim of a map that a map held beside it (`other`, the first by name) clashes with."""

    mine: Claim
    other: str
    theirs: Claim
    more: int = 0  # how many other maps clash with it too


def _collisions(checkmap: CheckMap, held: Held, me: str = "", clash: Callable[[Claim, Claim], bool] = _collide,
                ) -> list[Collision]:
    """One collision for each claim of `checkmap` that `clash`es with a map of
    `held` other than `me`: bounded by its claims, however many maps clash."""
    found = []
    for claim in dict.fromkeys(claims(checkmap)):  # a claim made twice (on one line) clashes once
        hits = [(f, theirs) for f, claims_of_f in sorted(held.get(claim.value, {}).items()) if f != me
                for theirs in claims_of_f if clash(claim, theirs)]
        if hits:
            found.append(Collision(claim, hits[0][0], hits[0][1], len({f for f, _ in hits}) - 1))
    return found


def _hold(held: Held, name: str, checkmap: CheckMap | None) -> None:
    for value in [v for v, files in held.items() if name in files]:
        del held[value][name]
        if not held[value]:
            del held[value]
    if checkmap is not None:
        for claim in claims(checkmap):
            held.setdefault(claim.value, {}).setdefault(name, []).append(claim)


def _problem(name: str, hit: Collision, *, other_in_force: bool) -> Problem:
    what = clash_text(hit, hit.other, reveal=True)
    if hit.more:
        what += f" (and by {hit.more} other file{'s' if hit.more > 1 else ''})"
    if other_in_force:
        return Problem(name, hit.mine.line, f"not loaded: {what} (that file is in force and stays in force)")
    return Problem(name, hit.mine.line, f"not loaded: {what} (neither file is loaded until one of them changes)")


def _clash(mine: Claim, theirs: Claim) -> bool:
    """Two claims of one value that cannot both be in force: they collide, or
    one binds by sub an issuer the other binds by ids."""
    return _collide(mine, theirs) or {mine.kind, theirs.kind} == {BY_ID, BY_SUBJECT}


def collisions(candidate: CheckMap, staying: dict[str, CheckMap]) -> list[Collision]:
    """What keeps `candidate` out of force beside `staying` (name -> map), maps
    that stay in force whatever comes: one collision per clashing claim."""
    held: Held = {}
    for name, checkmap in staying.items():
        _hold(held, name, checkmap)
    return _collisions(candidate, held, clash=_clash)


def _id_providers() -> str:
    return " or ".join(cls.NAME for cls in PROVIDERS.values() if cls.BINDS_BY == "ids")


def clash_text(hit: Collision, where: str, *, reveal: bool) -> str:
    """What the clash is, naming the other map as `where` and its project only when `reveal`."""
    mine, theirs = hit.mine, hit.theirs
    if mine.kind == REPOSITORY:
        if reveal:
            return (f"{mine.value} is already bound by project {theirs.project} in {where}; one repository's CI speaks "
                    f"for one project unless both maps consent: shared_with: [{theirs.project}] on this binding and "
                    f"shared_with: [{mine.project}] on every binding of it there")
        return (f"{mine.value} is already bound by {where}; one repository's CI speaks for one project unless both maps "
                "consent (shared_with on each side): the gateway's operator can say which project binds it")
    if mine.kind == SECRET:
        return (f"the secret variable {mine.value} is already named by a binding in {where}; one secret is one sender, "
                "and one sender is one voice: give each binding its own variable")
    if mine.kind == BY_SUBJECT:
        return (f"{mine.value} is bound by its immutable ids in {where}; a binding may not bind it by sub: use a "
                f"{_id_providers()} binding")
    if mine.kind == BY_ID:
        return (f"{mine.value} is bound by sub in {where}; binding it by ids here would take that map out of force: "
                "the gateway's operator decides")
    return f"project {mine.value} is already mapped by {where}; one file per project"


def fixed_problem(name: str, hit: Collision) -> Problem:
    """The problem of a folder file that clashes with a published map (which stays)."""
    if hit.mine.kind == PROJECT:
        return Problem(name, hit.mine.line, f"not in force: project {hit.mine.value} keeps {hit.other}; a file of the "
                       "folder no longer displaces it: remove this file (the repository's CI keeps the map current)")
    return Problem(name, hit.mine.line, f"not loaded: {clash_text(hit, hit.other, reveal=True)} (that map stays in "
                   "force)")


def publication_problem(path: str, hit: Collision) -> Problem:
    """The problem of a publication that clashes with another project's map in
    force, told to the publisher: the other project by name only when this map
    shares the repository with it, and never a file of the gateway."""
    reveal = hit.theirs.project in hit.mine.shared_with
    where = f"project {hit.theirs.project}'s map" if reveal else "another project's map in force"
    return Problem(path, hit.mine.line, f"not accepted: {clash_text(hit, where, reveal=reveal)}")


def _barred(name: str, checkmap: CheckMap | None, by_id: dict[str, list[str]]) -> list[Problem]:
    """Problems of a map that binds by sub an issuer host another file binds
    by id (the first of them by name); the file's own versions do not count."""
    if checkmap is None:
        return []
    problems = []
    for claim in claims(checkmap):
        other = next((f for f in by_id.get(claim.value, ()) if f != name), None) if claim.kind == BY_SUBJECT else None
        if other is not None:
            problems.append(Problem(name, claim.line,
                                    f"not loaded: {clash_text(Collision(claim, other, claim), other, reveal=True)}"))
    return problems


def resolve(files: dict[str, tuple[CheckMap | None, CheckMap | None]],
            fixed: dict[str, CheckMap] | None = None) -> dict[str, Decision]:
    """`files` maps a file name to (version in force, valid version on disk);
    `fixed` names the maps that stay in force whatever the files say."""
    if not fixed:
        return _resolve_files(files)
    outside: dict[str, list[Problem]] = {}
    kept: dict[str, tuple[CheckMap | None, CheckMap | None]] = {}
    for name, (in_force, wanted) in files.items():
        # Report what the file on disk says; with no valid version there, what was in force.
        shown = wanted if wanted is not None else in_force
        outside[name] = [fixed_problem(name, hit) for hit in collisions(shown, fixed)] if shown is not None else []
        kept[name] = tuple(v if v is not None and not collisions(v, fixed) else None  # type: ignore[assignment]
                           for v in (in_force, wanted))
    decisions = _resolve_files(kept)
    return {name: Decision(d.keep, tuple(outside[name]) + d.problems) for name, d in decisions.items()}


def _resolve_files(files: dict[str, tuple[CheckMap | None, CheckMap | None]]) -> dict[str, Decision]:
    by_id: dict[str, list[str]] = {}  # issuer host -> the files binding it by ids, by name
    for name in sorted(files):
        for version in files[name]:
            for claim in claims(version) if version is not None else ():
                if claim.kind == BY_ID and name not in by_id.setdefault(claim.value, []):
                    by_id[claim.value].append(name)
    barred: dict[str, list[Problem]] = {}
    checked: dict[str, tuple[CheckMap | None, CheckMap | None]] = {}
    for name, (in_force, wanted) in files.items():
        in_force_barred, wanted_barred = _barred(name, in_force, by_id), _barred(name, wanted, by_id)
        # Report what the file on disk says; with no valid version there, what stays in force.
        barred[name] = wanted_barred if wanted is not None else in_force_barred
        checked[name] = (None if in_force_barred else in_force, None if wanted_barred else wanted)
    decisions = _resolve(checked)
    return {name: Decision(d.keep, tuple(barred[name]) + d.problems) for name, d in decisions.items()}


def _resolve(files: dict[str, tuple[CheckMap | None, CheckMap | None]]) -> dict[str, Decision]:
    held: Held = {}
    for name in sorted(files):
        _hold(held, name, files[name][0])
    decisions: dict[str, Decision] = {}
    # Files in force first: an edit of one of them is judged against the
    # others in force; an edit that collides keeps the version in force.
    # Until no edit is taken: one edit may end the collision of another (a
    # map dropping a repository another map's edit binds).
    edits = []
    for name in sorted(n for n in files if files[n][0] is not None):
        in_force, wanted = files[name]
        decisions[name] = Decision(in_force)
        if wanted is not None and wanted.sha256 != in_force.sha256:  # type: ignore[union-attr]
            edits.append(name)
    taken = True
    while taken:
        taken = False
        for name in list(edits):
            in_force, wanted = files[name]
            assert wanted is not None
            hits = _collisions(wanted, held, name)
            if hits:
                decisions[name] = Decision(in_force, tuple(_problem(name, hit, other_in_force=True) for hit in hits))
                continue
            _hold(held, name, wanted)
            decisions[name] = Decision(wanted)
            edits.remove(name)
            taken = True
    # Newcomers: refused when they collide with a file in force, or with
    # another newcomer (then both are refused).
    newcomers = sorted(n for n in files if files[n][0] is None)
    pending: dict[str, CheckMap] = {}
    for name in newcomers:
        wanted = files[name][1]
        if wanted is None:
            decisions[name] = Decision(None)
            continue
        hits = _collisions(wanted, held, name)
        if hits:
            decisions[name] = Decision(None, tuple(_problem(name, hit, other_in_force=True) for hit in hits))
        else:
            pending[name] = wanted
    among: Held = {}
    for name, wanted in pending.items():
        _hold(among, name, wanted)
    for name, wanted in pending.items():
        hits = _collisions(wanted, among, name)
        if hits:
            decisions[name] = Decision(None, tuple(_problem(name, hit, other_in_force=False) for hit in hits))
        else:
            decisions[name] = Decision(wanted)
    return decisions
