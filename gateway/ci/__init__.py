"""The CI side: the providers (`providers/`, one module each, listed in one
table), check maps (which CI system may vote for which project, and which
check speaks for which entry), OIDC token verification, webhook signatures,
and the attestation intake that turns a verified voice into supports."""
