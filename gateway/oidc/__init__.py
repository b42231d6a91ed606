"""Verifying CI OIDC tokens: discovery and keys per issuer, two-step token
verification with PyJWT, and one small module per CI provider."""

from gateway.oidc.fetch import JsonFetcher
from gateway.oidc.keys import KeyCache
from gateway.oidc.verifier import Credential, TokenVerifier

__all__ = ["Credential", "JsonFetcher", "KeyCache", "TokenVerifier"]
