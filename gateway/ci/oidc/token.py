"""A CI token in two steps: peek, then verify.

`peek` reads the unverified header and the `iss` claim, only to choose the
issuer whose keys and bindings apply.  It refuses, without any network
work, what is plainly not a usable token: not three base64url segments,
header or payload not a JSON object, an algorithm off the allow-list
(`none` and every HMAC included), no usable `kid`.  Nothing read here is
trusted.  Headers such as `jku`, `x5u`, `jwk`, `x5c` are never read: keys
come only from the issuer's discovery document.

`decode` verifies with PyJWT's public API only (`jwt.PyJWT().decode`, every
option written out), so that a PyJWT release cannot change what is checked
without its documented interface changing too; it then checks the time
claims against the hub's clock (PyJWT reads the wall clock, which tests and
the store's notion of "now" do not share) with the same 60 s leeway.  PyJWT
splits and parses the token again after `peek`: that second parse is the
price of not reaching into its internals (bench/README.md has the figure).
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
    # The token peeked, its header and its claims as `jsonio` reads them:
    # `decode` returns these claims once PyJWT has verified that very token
    # (see there why).
    token: str = field(repr=False)
    header: dict[str, Any] = field(repr=False)
    claims: dict[str, Any] = field(repr=False)


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
    _segment_bytes(parts[2], "signature")
    _, claims = _segment_json(parts[1], "payload")
    issuer = claims.get("iss")
    if issuer is None:
        raise Unauthorized("the token has no iss claim", code="missing_claim", extra={"claim": "iss"})
    if not isinstance(issuer, str) or not 0 < len(issuer) <= 512:
        raise _malformed("iss is not a string")
    return Peeked(issuer=issuer, kid=kid, alg=alg, token=token, header=header, claims=claims)


# One instance for every token: options are passed per call, so it holds no
# per-token state and is safe to share between threads.
_VERIFIER = jwt.PyJWT()
_JWS = jwt.PyJWS()


def decode(token: str, key: PyJWK, *, issuer: str, audience: str, now: float, peeked: Peeked | None = None
           ) -> dict[str, Any]:
    """Verify signature and claims; return the verified claims.

    The claims returned are the ones `peek` read with `jsonio`, as every
    JSON on the request path is read, once PyJWT has verified this very
    token: the two readers differ only on an integer past 64 bits (orjson
    reads a float, `json` an int), which must not start to satisfy an id
    binding because the verifier changed.  PyJWT's checks come out the same
    on either reading: they test presence and strings."""
    if peeked is None or peeked.token != token:  # a peek of another token says nothing about this one
        peeked = peek(token)
    try:
        if peeked.header.get("b64", True) is False:
            _refuse_unencoded_payload(token, key)
        _VERIFIER.decode(
            token,
            key=key,
            algorithms=list(ALGORITHMS),
            audience=audience,
            issuer=issuer,
            leeway=LEEWAY_SECONDS,
            options={
                "verify_signature": True,
                "require": list(REQUIRED_CLAIMS),
                "verify_iss": True,
                "verify_aud": True,
                # A list audience is allowed only when it holds nothing but
                # ours: checked below, since strict mode refuses every list.
                "strict_aud": False,
                # Time claims are checked below against the hub's clock.
                "verify_exp": False,
                "verify_nbf": False,
                "verify_iat": False,
                "verify_sub": True,
                "verify_jti": True,
                # PyJWT's default, written out: a short issuer key is a
                # warning in the log, not a refusal.
                "enforce_minimum_key_length": False,
            },
        )
    except jwt_errors.PyJWTError as exc:
        raise _refusal(exc, audience) from None
    except (TypeError, ValueError, OverflowError, RecursionError):
        raise _malformed("its claims could not be read") from None
    claims = peeked.claims
    aud = claims.get("aud")
    if isinstance(aud, list) and any(item != audience for item in aud):
        raise Unauthorized(
            f"the token's audience list holds more than {audience!r}; request the token with audience {audience!r} only",
            code="invalid_audience",
        )
    check_times(claims, now)
    jti = claims.get("jti")
    if not isinstance(jti, str) or not 0 < len(jti) <= 256:
        raise Unauthorized("jti must be a string of 1 to 256 characters", code="invalid_claim", extra={"claim": "jti"})
    return claims


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
