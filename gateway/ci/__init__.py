"""The CI side: check maps (which CI system may vote for which project, and
which check speaks for which entry), OIDC token verification with one
module per provider (`oidc/github.py`, `oidc/gitlab.py`, `oidc/generic.py`),
webhook signatures, and the attestation intake that turns a verified voice
into supports (`intake`).  A new CI provider is one module in `oidc/`."""
