"""Verifying CI OIDC tokens: discovery and keys per issuer, two-step token
verification with PyJWT, and one small module per CI provider."""

from gateway.ci.oidc.fetch import JsonFetcher
from gateway.ci.oidc.keys import KeyCache
from gateway.ci.oidc.verifier import Credential, TokenVerifier

__all__ = ["Credential", "JsonFetcher", "KeyCache", "TokenVerifier"]
