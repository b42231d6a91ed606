"""A real OIDC issuer for the tests: an HTTP server on 127.0.0.1, in a thread.

It serves `/.well-known/openid-configuration` and a JWKS of real RSA-2048
and P-256 keys, can rotate keys, can fail in several ways (an outage switch:
HTTP 500, bad JSON, an empty key set, a discovery document naming another
issuer or a jwks_uri on another host), counts every request it answers, and
mints tokens with the claim shapes GitHub Actions and GitLab CI really use.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

_KEY_POOL: dict[str, list[Any]] = {"RS256": [], "ES256": []}
_POOL_LOCK = threading.Lock()
_POOL_SIZE = 16
_next_key = {"RS256": 0, "ES256": 0}


def _new_private_key(alg: str) -> Any:
    if alg == "RS256":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def pooled_key(alg: str) -> Any:
    """Keys are expensive to make, so tests draw them in turn from a pool of
    16 per algorithm: the keys drawn within one test are all different."""
    with _POOL_LOCK:
        pool = _KEY_POOL[alg]
        index = _next_key[alg] % _POOL_SIZE
        _next_key[alg] += 1
        while len(pool) <= index:
            pool.append(_new_private_key(alg))
        return pool[index]


@dataclass
class SigningKey:
    kid: str
    alg: str
    private: Any

    def public_jwk(self) -> dict[str, Any]:
        algorithm = RSAAlgorithm if self.alg == "RS256" else ECAlgorithm
        jwk = json.loads(algorithm.to_jwk(self.private.public_key()))
        jwk.update({"kid": self.kid, "use": "sig", "alg": self.alg})
        return jwk


@dataclass
class Outage:
    """How the issuer misbehaves; None fields mean normal service."""

    status: int | None = None  # e.g. 500 for both endpoints
    bad_json: bool = False
    empty_keys: bool = False
    wrong_issuer: bool = False
    foreign_jwks_uri: bool = False
    huge_jwks: bool = False  # a JWKS over the gateway's 256 KiB cap


@dataclass
class OidcIssuer:
    """Start with `with OidcIssuer() as issuer:`; `issuer.url` is its `iss`."""

    keys: list[SigningKey] = field(default_factory=list)
    outage: Outage = field(default_factory=Outage)
    hits: dict[str, int] = field(default_factory=dict)
    mint_requests: list[dict[str, str]] = field(default_factory=list)  # the headers of each /mint/ request

    port_wanted: int = 0

    def __post_init__(self) -> None:
        if not self.keys:
            self.keys = [self.new_key("RS256"), self.new_key("ES256")]
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                issuer._serve(self)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port_wanted), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.host = f"127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    # -- lifecycle -----------------------------------------------------------

    def __enter__(self) -> "OidcIssuer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- keys ------------------------------------------------------------------

    def new_key(self, alg: str = "RS256") -> SigningKey:
        private = pooled_key(alg)
        return SigningKey(kid=uuid.uuid4().hex, alg=alg, private=private)

    def rotate(self, alg: str = "RS256", *, drop_old: bool = False) -> SigningKey:
        key = self.new_key(alg)
        self.keys = ([] if drop_old else list(self.keys)) + [key]
        return key

    def key(self, alg: str = "RS256") -> SigningKey:
        return next(k for k in self.keys if k.alg == alg)

    @property
    def fetches(self) -> int:
        return sum(self.hits.values())

    # -- HTTP --------------------------------------------------------------------

    def _serve(self, request: BaseHTTPRequestHandler) -> None:
        path = request.path.split("?", 1)[0] if request.path.startswith("/mint/") else request.path
        self.hits[path] = self.hits.get(path, 0) + 1
        if self.outage.status is not None:
            self._answer(request, self.outage.status, b'{"error": "down"}')
            return
        if path == "/.well-known/openid-configuration":
            document = {
                "issuer": self.url + ("/other" if self.outage.wrong_issuer else ""),
                "jwks_uri": ("http://127.0.0.2:9/keys" if self.outage.foreign_jwks_uri else self.url + "/.well-known/jwks"),
                "response_types_supported": ["id_token"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256", "ES256"],
            }
            self._answer(request, 200, json.dumps(document).encode())
        elif path.startswith("/mint/"):
            self._mint(request)
        elif path == "/.well-known/jwks":
            if self.outage.bad_json:
                self._answer(request, 200, b"{not json")
                return
            keys = [] if self.outage.empty_keys else [k.public_jwk() for k in self.keys]
            document: dict[str, Any] = {"keys": keys}
            if self.outage.huge_jwks:
                document["padding"] = "x" * (300 * 1024)
            self._answer(request, 200, json.dumps(document).encode())
        else:
            self._answer(request, 404, b'{"error": "not found"}')

    def _mint(self, request: BaseHTTPRequestHandler) -> None:
        """`GET /mint/github?audience=relayroom&ref=...` (or /mint/gitlab): a
        fresh token in the shape of GitHub's token request endpoint,
        `{"count": 1, "value": TOKEN}`, for trying the gateway by hand.
        `lifetime=S` makes it expire S seconds from now; any other query
        parameter than `audience` overrides that claim."""
        from urllib.parse import parse_qsl, urlsplit

        parts = urlsplit(request.path)
        query = dict(parse_qsl(parts.query))
        audience = query.pop("audience", "relayroom")
        query.pop("api-version", None)
        now = time.time()
        self.mint_requests.append(dict(request.headers))
        if "lifetime" in query:
            query["exp"] = int(now) + int(query.pop("lifetime"))  # type: ignore[assignment]
        if parts.path == "/mint/github":
            token = self.github_token(now, audience=audience, **query)
        elif parts.path == "/mint/gitlab":
            token = self.gitlab_token(now, audience=audience, **query)
        else:
            self._answer(request, 404, b'{"error": "use /mint/github or /mint/gitlab"}')
            return
        self._answer(request, 200, json.dumps({"count": 1, "value": token}).encode())

    @staticmethod
    def _answer(request: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    # -- tokens ------------------------------------------------------------------

    def mint(
        self,
        claims: dict[str, Any],
        *,
        key: SigningKey | None = None,
        headers: dict[str, Any] | None = None,
    ) -> str:
        signing = key or self.keys[0]
        claims = {name: value for name, value in claims.items() if value is not None}  # None: leave the claim out
        header = {"kid": signing.kid, "typ": "JWT"}
        header.update(headers or {})
        return jwt.encode(claims, signing.private, algorithm=signing.alg, headers=header)

    def github_claims(self, now: float, *, audience: str = "relayroom", **overrides: Any) -> dict[str, Any]:
        """The claims of a GitHub Actions OIDC token for a push to main."""
        repository = overrides.pop("repository", "acme/api")
        ref = overrides.pop("ref", "refs/heads/main")
        workflow = overrides.pop("workflow_path", ".github/workflows/ci.yml")
        owner = repository.split("/")[0]
        claims: dict[str, Any] = {
            "jti": str(uuid.uuid4()),
            "sub": f"repo:{repository}:ref:{ref}",
            "aud": audience,
            "ref": ref,
            "sha": "1f3e8a7c2b9d4e6f8a0b1c2d3e4f5a6b7c8d9e0f",
            "repository": repository,
            "repository_owner": owner,
            "repository_owner_id": "7890",
            "repository_visibility": "private",
            "repository_id": "123456",
            "run_id": "8812345678",
            "run_number": "42",
            "run_attempt": "1",
            "runner_environment": "github-hosted",
            "actor": "octocat",
            "actor_id": "583231",
            "workflow": "CI",
            "workflow_ref": f"{repository}/{workflow}@{ref}",
            "workflow_sha": "1f3e8a7c2b9d4e6f8a0b1c2d3e4f5a6b7c8d9e0f",
            "job_workflow_ref": f"{repository}/{workflow}@{ref}",
            "job_workflow_sha": "1f3e8a7c2b9d4e6f8a0b1c2d3e4f5a6b7c8d9e0f",
            "head_ref": "",
            "base_ref": "",
            "event_name": "push",
            "ref_type": "tag" if ref.startswith("refs/tags/") else "branch",  # as GitHub derives it from ref
            "ref_protected": "true",
            "iss": self.url,
            "nbf": int(now) - 5,
            "exp": int(now) + 300,
            "iat": int(now) - 5,
        }
        claims.update(overrides)
        return claims

    def gitlab_claims(self, now: float, *, audience: str = "relayroom", **overrides: Any) -> dict[str, Any]:
        """The claims of a GitLab CI id_token for a branch pipeline on main."""
        path = overrides.pop("project_path", "acme/api")
        ref = overrides.pop("ref", "main")
        ref_type = overrides.pop("ref_type", "branch")
        claims: dict[str, Any] = {
            "namespace_id": "72",
            "namespace_path": path.split("/")[0],
            "project_id": "42",
            "project_path": path,
            "user_id": "1",
            "user_login": "maintainer",
            "user_email": "maintainer@example.com",
            "user_access_level": "maintainer",
            "pipeline_id": "574",
            "pipeline_source": "push",
            "job_id": "302",
            "ref": ref,
            "ref_type": ref_type,
            "ref_path": f"refs/{'heads' if ref_type == 'branch' else 'tags'}/{ref}",
            "ref_protected": "true",
            "runner_id": 1,
            "runner_environment": "gitlab-hosted",
            "sha": "714a629c0b401fdce83e847fc9589983fc6f46bc",
            "project_visibility": "private",
            "ci_config_ref_uri": f"{self.host}/{path}//.gitlab-ci.yml@refs/heads/{ref}",
            "ci_config_sha": "714a629c0b401fdce83e847fc9589983fc6f46bc",
            "jti": str(uuid.uuid4()),
            "iat": int(now) - 5,
            "nbf": int(now) - 10,
            "exp": int(now) + 300,
            "iss": self.url,
            "sub": f"project_path:{path}:ref_type:{ref_type}:ref:{ref}",
            "aud": audience,
        }
        claims.update(overrides)
        return claims

    def github_token(self, now: float, *, key: SigningKey | None = None, headers: dict[str, Any] | None = None,
                     **overrides: Any) -> str:
        return self.mint(self.github_claims(now, **overrides), key=key, headers=headers)

    def gitlab_token(self, now: float, *, key: SigningKey | None = None, **overrides: Any) -> str:
        return self.mint(self.gitlab_claims(now, **overrides), key=key)


def main() -> None:
    """`python -m tests.support.oidc_issuer --port 9101`: a local test issuer, for
    trying the gateway by hand (docs/ci-attestations.md)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    with OidcIssuer(port_wanted=args.port) as issuer:
        print(f"test OIDC issuer at {issuer.url}  (tokens: {issuer.url}/mint/github, {issuer.url}/mint/gitlab)", flush=True)
        try:
            issuer._thread.join()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
