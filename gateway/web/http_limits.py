"""Limits on the request head and the time to send a body that uvicorn's
httptools parser does not keep.

`relayroom serve` runs uvicorn with httptools (what `uvicorn[standard]`
picks).  httptools buffers a request line and headers of any size until the
blank line (a client streaming one endless header value grows the server
without bound), and a connection that never finishes its head
is held for ever, and so is one whose body arrives a byte at a time (the
64 KiB body cap bounds its memory, not its time).  (h11, the pure-Python
parser, does bound the head through `h11_max_incomplete_event_size`, but
answers 400 in plain text.)

`BoundedHttpToolsProtocol` adds the missing limits and answers them in the
contract's error body, the head limits before any route, token check or
crypto runs.  It wraps uvicorn's protocol rather than subclassing it: it
frames the bytes with its own httptools parser and learns what the server is
doing from what the inner protocol does to the transport (pausing reading,
writing) and from the app's calls, never from uvicorn's private state, so a
uvicorn release that reorganises its protocol cannot silently switch a limit
off (the tests of tests/http/test_limits.py would fail first).

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

- open connections, at most `connection_cap()` (the process's descriptor
  limit less a reserve for the store, the log and the accept loop): past it,
  each new connection sheds the one that has waited longest for a request
  head (408 `request_timeout`, then closed), so a client holding idle
  connections keeps no one else out.  A connection whose request is being
  answered is never shed.

The finer limits (an Authorization header over 16 KiB, all headers over
64 KiB) stay in `GuardMiddleware`, which every server path passes through.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import resource
import time
import typing
import weakref
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.core.connections import connection_cap

log = logging.getLogger("relayroom.connections")

MAX_HEAD_BYTES = 128 * 1024  # the same bound `relayroom serve` gives h11
HEAD_TIMEOUT = 20.0
BODY_TIMEOUT = 20.0  # from the end of the head; a 64 KiB body takes well under a second on any link
SHED_NOTE_SECONDS = 60.0  # at most one log line a minute about shed connections


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


SHED = error_bytes(
    408, "Request Timeout", "request_timeout",
    "the request headers did not arrive before the server needed the connection for another client "
    "(it is at its limit of open connections); send the request again",
)


class Connections:
    """The open connections of one server, oldest first, and which of them
    wait for a request head (idle: nothing of theirs is being answered)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.open: dict["BoundedHttpToolsProtocol", None] = {}
        self.idle: dict["BoundedHttpToolsProtocol", None] = {}
        self.shed = 0
        self._told = -SHED_NOTE_SECONDS

    def opened(self, connection: "BoundedHttpToolsProtocol") -> None:
        self.open[connection] = None
        self.idle[connection] = None
        while len(self.open) > self.cap:
            oldest = next(iter(self.idle), None)
            if oldest is None or oldest is connection:
                return  # every other connection is being answered: none is shed
            oldest.shed()
            self.shed += 1
            self._tell()

    def _tell(self) -> None:
        now = time.monotonic()
        if now - self._told >= SHED_NOTE_SECONDS:
            self._told = now
            log.warning("at the limit of %d open connections: %d shed so far, each the one that waited longest "
                        "for a request head (a client holding idle connections, or the limit is too low: "
                        "docs/deployment.md)", self.cap, self.shed)

    def closed(self, connection: "BoundedHttpToolsProtocol") -> None:
        self.open.pop(connection, None)
        self.idle.pop(connection, None)


# One per uvicorn server (its server_state), made with the first connection.
_CONNECTIONS: "weakref.WeakKeyDictionary[Any, Connections]" = weakref.WeakKeyDictionary()


def connections_of(server_state: Any, cap: int | None) -> Connections:
    found = _CONNECTIONS.get(server_state)
    if found is None:
        if cap is None:
            cap = connection_cap(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        found = _CONNECTIONS[server_state] = Connections(cap)
    return found


def body_timed_out(seconds: float) -> bytes:
    return error_bytes(
        408, "Request Timeout", "request_timeout",
        f"the request body did not arrive within {seconds:g} s of its headers; send the request again",
    )


class _ConfigView:
    """uvicorn's config as the inner protocol reads it, with the app swapped
    for this connection's wrapper (how the limits learn that an answer is under
    way or complete, without reading the protocol's state)."""

    def __init__(self, config: Any, app: Any) -> None:
        self._config = config
        self.loaded_app = app

    def __getattr__(self, name: str) -> Any:
        return getattr(self._config, name)


class _TransportView:
    """The connection's transport as the inner protocol uses it, telling the
    limits when the server holds reading back and when it writes."""

    def __init__(self, transport: asyncio.Transport, limits: "BoundedHttpToolsProtocol") -> None:
        self._transport = transport
        self._limits = limits

    def pause_reading(self) -> None:
        self._limits._server_paused = True
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._limits._server_paused = False
        self._transport.resume_reading()

    def write(self, data: bytes) -> None:
        self._limits._wrote = True
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class BoundedHttpToolsProtocol(asyncio.Protocol):
    """uvicorn's httptools protocol, wrapped: the same bytes are framed by a
    second httptools parser (its public callback API) to know where each head
    and body begins and ends, and the limits act on the connection before the
    inner protocol sees the bytes.  uvicorn is used only through what a
    protocol class passed as `http=` receives and does: its constructor
    arguments and the asyncio protocol methods.  Framing every request
    twice costs a small fraction of any real request (docs/decisions/0007)."""

    max_head_bytes = MAX_HEAD_BYTES
    head_timeout = HEAD_TIMEOUT
    body_timeout = BODY_TIMEOUT
    max_connections: int | None = None  # None: from the descriptor limit (gateway.core.connections)

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        if not config.loaded:
            config.load()
        self._app = config.loaded_app
        self._inner = HttpToolsProtocol(_ConfigView(config, self._answering), server_state, app_state, _loop)  # type: ignore[arg-type]
        self._loop = _loop or asyncio.get_event_loop()
        self._parser = httptools.HttpRequestParser(self)
        with contextlib.suppress(AttributeError):  # what uvicorn's own parser allows (httptools >= 0.6.3)
            self._parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self._transport: asyncio.Transport | None = None
        self._passthrough = False  # after an upgrade the bytes are not HTTP/1.1 requests
        self._head_open = True
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_open = False
        self._body_held = False
        self._body_timer: asyncio.TimerHandle | None = None
        self._url = b""
        self._expect_continue = False
        self._server_paused = False
        self._wrote = False  # since the last head completed (a `100 Continue` is written by uvicorn, not the app)
        self._heads = 0  # heads completed on this connection
        self._starts = 0  # answers the app began
        self._answers = 0  # requests the app is done with
        self._connections = connections_of(server_state, self.max_connections)

    # -- the app, wrapped per connection ---------------------------------------------------------

    async def _answering(self, scope: Any, receive: Any, send: Any) -> None:
        async def counted(message: Any) -> None:
            if message["type"] == "http.response.start":
                self._starts += 1
            await send(message)

        try:
            await self._app(scope, receive, counted)
        finally:  # raised or returned, the request is done with (uvicorn answers a 500 itself)
            self._answers += 1
            if self._answers >= self._heads and not self._closing():
                self._connections.idle[self] = None  # waits for its next request: the newest idle

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A TCP transport (uvloop's does not subclass asyncio.Transport).
        self._transport = typing.cast(asyncio.Transport, transport)
        self._inner.connection_made(_TransportView(self._transport, self))  # type: ignore[arg-type]
        self._arm_head_timer()
        self._connections.opened(self)

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        assert transport is not None
        if self._passthrough:
            self._inner.data_received(data)
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._passthrough = True
            self._cancel_timers()
        except httptools.HttpParserError:
            # uvicorn's own answer is plain text; the contract wants its error
            # body from whoever refuses.
            self._refuse(MALFORMED)
            return
        if self._head_open and not self._passthrough:
            # Still inside a head after this chunk: every byte of it (at most
            # one chunk of the previous request's body too) is head, held in
            # memory by both parsers.
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head_bytes:
                self._refuse(TOO_LARGE)
                return
        self._inner.data_received(data)
        if transport.is_closing() or not self._body_open:
            return
        if self._body_timer is None:
            # This read ended inside a body: the rest has BODY_TIMEOUT to
            # come.  A body that came with its head never gets here.
            self._arm_body_timer()
        elif self._server_paused:  # the app has not taken what arrived: the server is behind, not the client
            self._body_held = True

    def eof_received(self) -> None:
        self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.closed(self)
        self._cancel_timers()
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    # -- the framing parser's callbacks ----------------------------------------------------------

    def on_message_begin(self) -> None:
        self._head_open = True
        self._head_bytes = 0
        self._url = b""
        self._expect_continue = False
        self._arm_head_timer()

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"expect" and value.lower() == b"100-continue":
            self._expect_continue = True

    def on_headers_complete(self) -> None:
        # What uvicorn does next; a target it cannot parse (one over 64 KiB
        # included) raises here, so the refusal is ours and in the contract's body.
        httptools.parse_url(self._url)
        self._head_open = False
        self._connections.idle.pop(self, None)
        self._heads += 1
        self._wrote = False
        self._cancel_head_timer()
        # Until on_message_complete, called in the same read when there is no body.
        self._body_open = True

    def on_message_complete(self) -> None:
        self._body_open = False
        self._cancel_body_timer()

    # -- timers ----------------------------------------------------------------------------------

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self._loop.call_later(self.head_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _cancel_timers(self) -> None:
        self._cancel_head_timer()
        self._cancel_body_timer()

    def _closing(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._head_open or self._closing():
            return
        if self._server_paused or self._answers < self._heads:
            # An earlier request is still being answered (a 408 now would land
            # inside its answer), or the server holds reading back: the
            # client's clock starts again.
            self._arm_head_timer()
            return
        self._refuse(TIMED_OUT)

    def _arm_body_timer(self) -> None:
        self._body_held = self._server_holds_body()
        self._body_timer = self._loop.call_later(self.body_timeout, self._body_timed_out)

    def _server_holds_body(self) -> bool:
        """The body waits for the server, not the client: reading is paused
        (the app is behind, or this request waits behind a pipelined one), or
        the client was told to wait for a `100 Continue` not sent yet."""
        return self._server_paused or (self._expect_continue and not self._wrote) or self._answers < self._heads - 1

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if not self._body_open or self._closing():
            return
        if self._body_held or self._server_holds_body():
            # Held up by the server at some point of this period (or still):
            # the client gets a whole period from now.
            self._arm_body_timer()
            return
        self._body_open = False
        if self._starts >= self._heads:
            # The app has answered, or is answering: nothing more can be said.
            # Closing tells it what uvicorn tells it of a client gone away:
            # receive() answers http.disconnect.
            assert self._transport is not None
            self._transport.close()
        else:
            self._refuse(body_timed_out(self.body_timeout))

    def shed(self) -> None:
        """Make room for a new connection: this one waited longest for a head."""
        self._connections.closed(self)
        self._refuse(SHED)

    def _refuse(self, response: bytes) -> None:
        self._head_open = False
        self._body_open = False
        self._cancel_timers()
        assert self._transport is not None
        self._transport.write(response)
        self._transport.close()
