"""A hostile OIDC issuer on 127.0.0.1: it answers discovery and JWKS with
real documents (the keys of an `OidcIssuer`), but as slowly as a test asks:
one byte at a time, headers and all, or not at all.

It runs on the test's own event loop (asyncio streams), so the gateway under
test, in-process, is held by it exactly as it would be by a remote server.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from tests.support.oidc_issuer import OidcIssuer

DISCOVERY = "/.well-known/openid-configuration"
JWKS = "/.well-known/jwks"

# How a path is answered:
#   ok           at once
#   drip_body    headers at once, then the body one byte per `interval`
#   drip_headers the status line and headers one byte per `interval`
#   silent       accept the connection, read the request, never answer
#   huge_slow    a body far over the size cap, in chunks, each after `interval`
MODES = ("ok", "drip_body", "drip_headers", "silent", "huge_slow")


@dataclass
class DripIssuer:
    keys_from: OidcIssuer
    modes: dict[str, str] = field(default_factory=dict)  # path -> mode; missing means "ok"
    interval: float = 0.2
    hits: dict[str, int] = field(default_factory=dict)
    url: str = ""
    host: str = ""
    _server: Any = None
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    async def __aenter__(self) -> "DripIssuer":
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.host = f"127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def token(self, now: float, **claims: Any) -> str:
        """A GitHub-shaped token whose `iss` is this hostile issuer, signed with real keys."""
        return self.keys_from.mint(self.keys_from.github_claims(now, iss=self.url, **claims))

    def _document(self, path: str) -> bytes:
        if path == DISCOVERY:
            return json.dumps({"issuer": self.url, "jwks_uri": self.url + JWKS}).encode()
        if path == JWKS:
            return json.dumps({"keys": [k.public_jwk() for k in self.keys_from.keys]}).encode()
        return b'{"error": "not found"}'

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._answer(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the gateway gave up on us: that is the point
        except asyncio.CancelledError:
            pass  # the test is over; ending quietly keeps asyncio's stream callback from logging it
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request_line = (await reader.readline()).decode("latin-1")
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass
        path = request_line.split(" ")[1] if request_line.count(" ") >= 2 else "/"
        self.hits[path] = self.hits.get(path, 0) + 1
        mode = self.modes.get(path, "ok")
        body = self._document(path)
        if mode == "huge_slow":
            body = b'{"keys": [], "padding": "' + b"x" * (400 * 1024) + b'"}'
        headers = ["HTTP/1.1 200 OK", "Content-Type: application/json", "Connection: close"]
        if mode != "huge_slow":  # a huge body declares no length, so only the count of bytes read can stop it
            headers.append(f"Content-Length: {len(body)}")
        head = ("\r\n".join(headers) + "\r\n\r\n").encode()
        if mode == "silent":
            await asyncio.sleep(3600)
        if mode == "drip_headers":
            await self._drip(writer, head, 1)
        else:
            writer.write(head)
            await writer.drain()
        if mode == "drip_body":
            await self._drip(writer, body, 1)
        elif mode == "huge_slow":
            await self._drip(writer, body, 16 * 1024)
        else:
            writer.write(body)
            await writer.drain()

    async def _drip(self, writer: asyncio.StreamWriter, data: bytes, size: int) -> None:
        for start in range(0, len(data), size):
            writer.write(data[start : start + size])
            await writer.drain()
            await asyncio.sleep(self.interval)
