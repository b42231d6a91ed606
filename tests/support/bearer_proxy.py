"""A loopback HTTP proxy that adds `Authorization: Bearer <token>` and changes
nothing else.

For MCP clients that cannot send a header, such as the conformance suite's
`server --url`: every byte of the request (method, path, body, `Host` and
`Origin` included, so the gateway's own DNS-rebinding check is what answers)
goes to the gateway, and the answer comes back as the gateway sent it,
streamed.  Runs under uvicorn in a thread, like tests/conftest.py's live
server.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import uvicorn

from tests.conftest import free_port

# Hop-by-hop headers belong to one connection, not to the message.
_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"upgrade", b"proxy-connection", b"content-length"}


class BearerProxy:
    def __init__(self, upstream: str, token: str, port: int | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.token = token
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.client: httpx.AsyncClient | None = None
        self.server = uvicorn.Server(
            uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off",
                           interface="asgi3", proxy_headers=False,
                           timeout_graceful_shutdown=1)
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def app(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if self.client is None:
            # No kept-alive connections to the gateway: the live server's
            # shutdown would wait for them.
            self.client = httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_keepalive_connections=0))
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP and k.lower() != b"authorization"]
        headers.append((b"authorization", f"Bearer {self.token}".encode()))
        path = scope["raw_path"].decode() + (("?" + scope["query_string"].decode()) if scope["query_string"] else "")
        request = self.client.build_request(scope["method"], self.upstream + path, headers=headers, content=body)
        response = await self.client.send(request, stream=True)
        try:
            out = [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP]
            await send({"type": "http.response.start", "status": response.status_code, "headers": out})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    def __enter__(self) -> "BearerProxy":
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the bearer proxy did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(10)
