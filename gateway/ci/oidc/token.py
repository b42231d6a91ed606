"""A CI token in two steps: peek, then verify.

`peek` reads the unverified header and the `iss` claim, only to choose the
issuer whose keys and bindings apply.  It refuses, without any network
work, what is plainly not a usable token: not three base64url segments,
header or payload not a JSON object, an algorithm off the allow-list
(`none` and every HMAC included), no usable `kid`.  Nothing read here is
trusted.  Headers such as `jku`, `x5u`, `jwk`, `x5c` are never read: keys
come only from the issuer's discovery document.

`decode` verifies what `peek` parsed, so a token is split, base64url-decoded
and read as JSON once.  The signature is checked by PyJWT through its
documented interface: the issuer's key is a `PyJWK`, parsed once per key
set fetch (`keys.py`), and `PyJWK.Algorithm.verify` checks the signing
input against it, the algorithm being the one the key was built for, never
the one the token names.  The claim rules are written out below (required
claims, iss, aud, sub and jti types, the times against the hub's clock with
a 60 s leeway); `tests/unit/ci/test_oidc_token.py` holds them to
`jwt.PyJWT().decode`'s verdicts on the same tokens.  Handing the token to
`jwt.decode` instead would parse it a second time, and PyJWT 2.15 checks
each segment's alphabet one character at a time in Python: for a
GitHub-shaped token that was half of an attestation's verification time.
"""

from __future__ import annotations

import binascii
import math
from dataclasses import dataclass, field
from typing import Any

import jwt
from jwt import PyJWK
from jwt import exceptions as jwt_errors

from gateway.core import jsonio
from gateway.core.errors import GatewayError, Unauthorized

ALGORITHMS = ("RS256", "ES256")
LEEWAY_SECONDS = 60
MAX_TOKEN_CHARS = 16 * 1024
REQUIRED_CLAIMS = ("iss", "aud", "exp", "iat", "jti")
_MAX_EPOCH = 1e11  # year 5138: anything later is not a time


@dataclass(frozen=True)
class Peeked:
    issuer: str
    kid: str
    alg: str
    # The token peeked and what `decode` verifies of it: nothing here is
    # trusted before the signature over `signing_input` checks out.
    token: str = field(repr=False)
    header: dict[str, Any] = field(repr=False)
    claims: dict[str, Any] = field(repr=False)
    signing_input: bytes = field(repr=False, default=b"")
    signature: bytes = field(repr=False, default=b"")


def _malformed(why: str) -> Unauthorized:
    return Unauthorized(f"the bearer token is not a usable JWT: {why}", code="malformed_token")


_TO_STANDARD = bytes.maketrans(b"-_", b"+/")
_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_VALUE = {char: value for value, char in enumerate(_ALPHABET)}
_SPARE_BITS = {2: 0b1111, 3: 0b11}  # low bits of the last character that encode nothing, by length % 4


def _segment_bytes(segment: str, what: str) -> bytes:
    """Strict base64url: the alphabet, no padding, canonical (PyJWT's rules and stricter).

    Checked in C rather than character by character: the segment is mapped
    to the standard alphabet and decoded with `strict_mode`, which refuses
    any other character; a standard-only character (`+`, `/`, `=`) is
    refused before the mapping could make it look valid; and canonical
    means the bits of the last character that encode nothing are zero (so
    no two strings decode to the same bytes)."""
    try:
        encoded = segment.encode("ascii")
    except UnicodeEncodeError:
        raise _malformed(f"the {what} is not base64url") from None
    spare = len(encoded) % 4
    if not encoded or spare == 1 or b"+" in encoded or b"/" in encoded or b"=" in encoded:
        raise _malformed(f"the {what} is not base64url")
    try:
        raw = binascii.a2b_base64(encoded.translate(_TO_STANDARD) + b"=" * (-spare % 4), strict_mode=True)
    except binascii.Error:
        raise _malformed(f"the {what} is not base64url") from None
    if spare and _VALUE[encoded[-1]] & _SPARE_BITS[spare]:
        raise _malformed(f"the {what} is not canonical base64url")
    return raw


def _segment_json(segment: str, what: str) -> tuple[bytes, dict[str, Any]]:
    raw = _segment_bytes(segment, what)
    try:
        value = jsonio.loads(raw)
    except ValueError:
        raise _malformed(f"the {what} is not base64url-encoded JSON") from None
    if not isinstance(value, dict):
        raise _malformed(f"the {what} is not a JSON object")
    return raw, value


def peek(token: str) -> Peeked:
    if len(token) > MAX_TOKEN_CHARS:
        raise _malformed(f"it is longer than {MAX_TOKEN_CHARS} characters")
    parts = token.split(".")
    if len(parts) != 3 or not parts[2]:
        raise _malformed("a JWT has three dot-separated parts: header, payload, signature")
    _, header = _segment_json(parts[0], "header")
    alg = header.get("alg")
    if alg not in ALGORITHMS:
        shown = alg if isinstance(alg, str) and len(alg) <= 20 else "missing or invalid"
        raise Unauthorized(
            f"token algorithm {shown!s} is not allowed; CI tokens must be signed with {' or '.join(ALGORITHMS)}",
            code="alg_not_allowed",
        )
    kid = header.get("kid")
    if not isinstance(kid, str) or not 0 < len(kid) <= 256:
        raise Unauthorized("the token header carries no usable kid (key id)", code="unknown_kid")
    signature = _segment_bytes(parts[2], "signature")
    _, claims = _segment_json(parts[1], "payload")
    issuer = claims.get("iss")
    if issuer is None:
        raise Unauthorized("the token has no iss claim", code="missing_claim", extra={"claim": "iss"})
    if not isinstance(issuer, str) or not 0 < len(issuer) <= 512:
        raise _malformed("iss is not a string")
    return Peeked(issuer=issuer, kid=kid, alg=alg, token=token, header=header, claims=claims,
                  signing_input=f"{parts[0]}.{parts[1]}".encode("ascii"), signature=signature)


# Used only to refuse an RFC 7797 header for PyJWT's own reason (see there).
_JWS = jwt.PyJWS()


def decode(token: str, key: PyJWK, *, issuer: str, audience: str, now: float, peeked: Peeked | None = None
           ) -> dict[str, Any]:
    """Verify signature and claims; return the verified claims.

    The claims are those `peek` read with `jsonio`, as every JSON on the
    request path is read (an integer past 64 bits reads as a float, so it
    never starts to satisfy an id binding because a parser changed)."""
    if peeked is None or peeked.token != token:  # a peek of another token says nothing about this one
        peeked = peek(token)
    header = peeked.header
    try:
        if header.get("b64", True) is False:
            _refuse_unencoded_payload(token, key)
    except jwt_errors.PyJWTError as exc:
        raise _refusal(exc, audience) from None
    if "crit" in header:
        # RFC 7515: a critical extension the verifier does not implement
        # refuses the token; a CI token needs none.
        raise Unauthorized("the token header lists critical extensions (crit), which CI tokens do not use",
                           code="invalid_token")
    if peeked.alg != key.algorithm_name:
        raise Unauthorized("the token algorithm does not match its signing key", code="alg_not_allowed")
    try:
        verified = key.Algorithm.verify(peeked.signing_input, key.key, peeked.signature)
    except (TypeError, ValueError):
        verified = False
    if not verified:
        raise Unauthorized("the token signature does not verify with the issuer's key", code="invalid_signature")
    claims = peeked.claims
    check_claims(claims, issuer=issuer, audience=audience)
    check_times(claims, now)
    if not 0 < len(claims["jti"]) <= 256:
        raise Unauthorized("jti must be a string of 1 to 256 characters", code="invalid_claim", extra={"claim": "jti"})
    return claims


def check_claims(claims: dict[str, Any], *, issuer: str, audience: str) -> None:
    """Presence, issuer, audience, and the string-typed claims, in PyJWT's order and with its verdicts,
    then the audience list's own rule."""
    for name in REQUIRED_CLAIMS:
        if claims.get(name) is None:
            raise Unauthorized(f"the token has no {name} claim", code="missing_claim", extra={"claim": name})
    if claims["iss"] != issuer:
        raise Unauthorized("the token's iss is not the configured issuer", code="unknown_issuer")
    aud = claims["aud"]
    if not aud:  # an empty aud ("" or []) is no audience at all
        raise Unauthorized("the token has no aud claim", code="missing_claim", extra={"claim": "aud"})
    audiences = [aud] if isinstance(aud, str) else aud
    if not isinstance(audiences, list) or any(not isinstance(item, str) for item in audiences) \
            or audience not in audiences:
        raise Unauthorized(
            f"the token's aud is not {audience!r}; request the token with audience {audience!r}", code="invalid_audience"
        )
    for name in ("sub", "jti"):
        if name in claims and not isinstance(claims[name], str):
            raise Unauthorized("the token's sub or jti is not a string", code="invalid_claim")
    # Stricter than PyJWT, after its checks (so a token both rules refuse is
    # refused for PyJWT's reason, as it always was): a list audience may hold
    # nothing but ours.
    if any(item != audience for item in audiences):
        raise Unauthorized(
            f"the token's audience list holds more than {audience!r}; request the token with audience {audience!r} only",
            code="invalid_audience",
        )


def _refuse_unencoded_payload(token: str, key: PyJWK) -> None:
    """Refuse a header with `"b64": false` (RFC 7797) for PyJWT's own reason.

    `peek` wants the payload inline, PyJWT wants that form's payload segment
    empty, so such a token never verifies; but which PyJWT rule it breaks
    first (a bad or missing `crit`: invalid_token; else no detached payload:
    malformed_token) is what the caller has always been told.  PyJWS is
    handed the token in that form, with no detached payload: it raises on
    every path, before any signature work."""
    head, _, signature = token.split(".")
    _JWS.decode_complete(f"{head}..{signature}", key=key, algorithms=list(ALGORITHMS),
                         options={"verify_signature": True, "enforce_minimum_key_length": False})
    raise jwt_errors.DecodeError("a payload without base64url encoding is never a CI token")


def _number(claims: dict[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value < _MAX_EPOCH:
        raise Unauthorized(f"{name} must be a time in seconds since the epoch", code="invalid_claim", extra={"claim": name})
    return float(value)


def check_times(claims: dict[str, Any], now: float, leeway: float = LEEWAY_SECONDS) -> None:
    exp = _number(claims, "exp")
    iat = _number(claims, "iat")
    nbf = _number(claims, "nbf")
    if exp is None or iat is None:
        missing = "exp" if exp is None else "iat"
        raise Unauthorized(f"the token has no {missing} claim", code="missing_claim", extra={"claim": missing})
    if exp <= now - leeway:
        raise Unauthorized(f"the token expired {int(now - exp)} s ago; request a fresh one in the CI job", code="token_expired")
    for name, value in (("nbf", nbf), ("iat", iat)):
        if value is not None and value > now + leeway:
            raise Unauthorized(
                f"the token is not valid yet ({name} is {int(value - now)} s ahead of the gateway's clock)",
                code="token_not_yet_valid",
            )


def _refusal(exc: jwt_errors.PyJWTError, audience: str) -> GatewayError:
    if isinstance(exc, jwt_errors.InvalidSignatureError):
        return Unauthorized("the token signature does not verify with the issuer's key", code="invalid_signature")
    if isinstance(exc, jwt_errors.InvalidAlgorithmError):
        return Unauthorized("the token algorithm does not match its signing key", code="alg_not_allowed")
    if isinstance(exc, jwt_errors.MissingRequiredClaimError):
        return Unauthorized(f"the token has no {exc.claim} claim", code="missing_claim", extra={"claim": exc.claim})
    if isinstance(exc, jwt_errors.InvalidAudienceError):
        return Unauthorized(
            f"the token's aud is not {audience!r}; request the token with audience {audience!r}", code="invalid_audience"
        )
    if isinstance(exc, jwt_errors.InvalidIssuerError):
        return Unauthorized("the token's iss is not the configured issuer", code="unknown_issuer")
    if isinstance(exc, (jwt_errors.InvalidSubjectError, jwt_errors.InvalidJTIError)):
        return Unauthorized("the token's sub or jti is not a string", code="invalid_claim")
    if isinstance(exc, jwt_errors.DecodeError):
        return _malformed("it could not be decoded")
    return Unauthorized("the token is not valid", code="invalid_token")
