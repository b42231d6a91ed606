"""Verifying CI OIDC tokens: discovery and keys per issuer (`fetch`, `keys`),
two-step token verification with PyJWT (`token`), and the verifier that binds
a verified token to one project through the check maps (`verifier`).  What a
provider's tokens carry is its class's business (`gateway.ci.providers`)."""
