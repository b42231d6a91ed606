"""Limits on the request head and the time to send a body that uvicorn's
httptools parser does not keep.

`relayroom serve` runs uvicorn with httptools (what `uvicorn[standard]`
picks).  httptools buffers a request line and headers of any size until the
blank line: a client streaming 150 MB of one header value without a line
break grew the server by 210 MB, and a connection that never finishes its head
is held for ever, and so is one whose body arrives a byte at a time (the
64 KiB body cap bounds its memory, not its time).  (h11, the pure-Python
parser, does bound the head through `h11_max_incomplete_event_size`, but
answers 400 in plain text.)

`BoundedHttpToolsProtocol` adds the missing limits and answers them in the
contract's error body, the head limits before any route, token check or
crypto runs:

- a request head (request line and headers) over MAX_HEAD_BYTES: 431
  `header_too_large`;
- a head not complete HEAD_TIMEOUT seconds after the connection opened (or
  after the previous response): 408 `request_timeout`;
- a body not complete BODY_TIMEOUT seconds after its head: 408
  `request_timeout` if no response has started, and the connection is closed
  either way (the app sees the client disconnect).  Only the client's delay
  counts: when the server held the body up during a period (reading paused
  because the app has not taken what arrived or the request waits behind a
  pipelined one, or a `100 Continue` still owed), the client gets a whole new
  period.  It costs one timer per request whose body spans more than one
  read (plus one per period the server held it up), none for the others;
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
BODY_TIMEOUT = 20.0  # from the end of the head; a 64 KiB body takes well under a second on any link


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


def body_timed_out(seconds: float) -> bytes:
    return error_bytes(
        408, "Request Timeout", "request_timeout",
        f"the request body did not arrive within {seconds:g} s of its headers; send the request again",
    )


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """httptools with a bounded head (bytes counted while a head is open) and
    a body that must be complete in time (one timer, armed only when a read
    ends inside a body)."""

    max_head_bytes = MAX_HEAD_BYTES
    head_timeout = HEAD_TIMEOUT
    body_timeout = BODY_TIMEOUT

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_open = True
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_open = False
        self._body_held = False
        self._body_timer: asyncio.TimerHandle | None = None
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing():
            return
        if self._body_open:
            if self._body_timer is None:
                # This read ended inside a body: the rest has BODY_TIMEOUT to
                # come.  A body that came with its head never gets here.
                self._arm_body_timer()
            elif self.flow.read_paused:  # on_body paused reading: the app is behind, not the client
                self._body_held = True
        if not self._head_open:
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
        # Until on_message_complete (called in the same read when there is no
        # body).  An upgrade hands the connection to another protocol.
        self._body_open = not (self.parser.should_upgrade() and self._should_upgrade())

    def on_message_complete(self) -> None:
        self._body_open = False
        self._cancel_body_timer()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        self._cancel_body_timer()
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

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _arm_body_timer(self) -> None:
        self._body_held = self._server_holds_body()
        self._body_timer = self.loop.call_later(self.body_timeout, self._body_timed_out)

    def _server_holds_body(self) -> bool:
        """The body waits for the server, not the client."""
        cycle = self.cycle
        return (self.flow.read_paused or cycle.waiting_for_100_continue
                or any(waiting is cycle for waiting, _ in self.pipeline))

    def _body_timed_out(self) -> None:
        self._body_timer = None
        cycle = self.cycle
        if not self._body_open or cycle is None or self.transport.is_closing():
            return
        if self._body_held or self._server_holds_body():
            # Held up by the server at some point of this period (or still):
            # the client gets a whole period from now.
            self._arm_body_timer()
            return
        self._body_open = False
        started = cycle.response_started
        # What uvicorn does when the client goes away: the app's receive()
        # answers http.disconnect and whatever it sends is dropped.
        cycle.disconnected = True
        cycle.message_event.set()
        if started:  # the app has answered, or is answering: nothing more can be said
            self.transport.close()
        else:
            self._refuse(body_timed_out(self.body_timeout))

    def _refuse(self, response: bytes) -> None:
        self._head_open = False
        self._body_open = False
        self._cancel_head_timer()
        self._cancel_body_timer()
        self.transport.write(response)
        self.transport.close()
