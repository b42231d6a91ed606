"""Limits on the request head that uvicorn's httptools parser does not keep.

`relayroom serve` runs uvicorn with httptools (what `uvicorn[standard]`
picks).  httptools buffers a request line and headers of any size until the
blank line: a client streaming 150 MB of one header value without a line
break grew the server by 210 MB, and a connection that never finishes its head
is held for ever.  (h11, the pure-Python parser, does bound the head through
`h11_max_incomplete_event_size`, but answers 400 in plain text.)

`BoundedHttpToolsProtocol` adds the two missing limits and answers both in the
contract's error body, before any route, token check or crypto runs:

- a request head (request line and headers) over MAX_HEAD_BYTES: 431
  `header_too_large`;
- a head not complete HEAD_TIMEOUT seconds after the connection opened (or
  after the previous response): 408 `request_timeout`;
- a request httptools cannot parse (including a request target over 64 KiB,
  past what its URL parser can address): 400 `malformed_request`, where
  uvicorn would answer in plain text.

The finer limits (an Authorization header over 16 KiB, all headers over
64 KiB) stay in `GuardMiddleware`, which every server path passes through.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 128 * 1024  # the same bound `relayroom serve` gives h11
HEAD_TIMEOUT = 20.0


def error_bytes(status: int, reason: str, code: str, message: str) -> bytes:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    ).encode("ascii")
    return head + body


TOO_LARGE = error_bytes(
    431, "Request Header Fields Too Large", "header_too_large",
    f"the request line and headers are over the {MAX_HEAD_BYTES // 1024} KiB limit",
)
MALFORMED = error_bytes(
    400, "Bad Request", "malformed_request",
    "the request is not valid HTTP/1.1 (a request target over 64 KiB cannot be parsed either)",
)
TIMED_OUT = error_bytes(
    408, "Request Timeout", "request_timeout",
    f"the request headers did not arrive within {HEAD_TIMEOUT:g} s; send the request again",
)


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """httptools with a bounded head: bytes counted while a head is open."""

    max_head_bytes = MAX_HEAD_BYTES
    head_timeout = HEAD_TIMEOUT

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_open = True
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing() or not self._head_open:
            return
        # Still inside a head after this chunk: every byte of it (at most one
        # chunk of the previous request's body too) is head, held in memory.
        self._head_bytes += len(data)
        if self._head_bytes > self.max_head_bytes:
            self._refuse(TOO_LARGE)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_open = True
        self._head_bytes = 0
        self._arm_head_timer()

    def on_headers_complete(self) -> None:
        self._head_open = False
        self._cancel_head_timer()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        # uvicorn's own answer to a request httptools cannot parse is plain
        # text; the contract wants its error body from whoever refuses.
        self._refuse(MALFORMED)

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        timer: Any = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        busy = self.cycle is not None and not self.cycle.response_complete
        if self._head_open and not busy and not self.transport.is_closing():
            self._refuse(TIMED_OUT)

    def _refuse(self, response: bytes) -> None:
        self._head_open = False
        self._cancel_head_timer()
        self.transport.write(response)
        self.transport.close()
