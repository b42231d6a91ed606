"""The listening socket of `relayroom serve` and `quickstart`, bound first.

Left to itself uvicorn binds only after the application has started, and on a
taken port it logs the OS error followed by its shutdown lines, so the last
line a person reads is "Application shutdown complete."  Binding here, before
the store is opened or a worker started, makes a taken or forbidden address
one line with the reason and what to do; the bound socket is then handed to
uvicorn, so no other process can take the port in between, and clients that
connect while the gateway starts wait rather than being refused.
"""

from __future__ import annotations

import errno
import resource
import socket


class ListenError(Exception):
    """The address cannot be listened on; the text is the whole reason."""


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host:port`, as uvicorn would bind it itself."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if not 0 <= port <= 65535:
        raise ListenError(f"cannot listen on {where}: a port is a number from 0 to 65535")
    # IPPROTO_TCP spelled out, as getaddrinfo would give it: asyncio turns
    # Nagle's algorithm off (TCP_NODELAY) only on connections whose socket
    # says so, and without it every answer written in two parts waited for
    # the client's delayed ACK (40 ms a request on Linux).
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    # As uvicorn does: a restart may reuse the port while old connections
    # linger in TIME_WAIT (this does not let two servers share the port).
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ListenError(_reason(where, host, exc)) from None
    # Listening now, not when uvicorn starts: a client that connects while the
    # store is migrated and the app built waits in the backlog instead of being
    # refused (uvicorn listens again with its own backlog).
    sock.listen(socket.SOMAXCONN)
    sock.set_inheritable(True)  # the workers of --workers N share it
    return sock


def _reason(where: str, host: str, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{where} is already in use (another relayroom serve or quickstart?): "
            "stop that one, or choose another port with --port"
        )
    if exc.errno == errno.EACCES:
        return f"not allowed to listen on {where} (ports below 1024 need privileges): choose another port with --port"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {where}: {host} is not an address of this machine (--host)"
    if isinstance(exc, socket.gaierror):
        return f"cannot listen on {where}: {host} is not a known host name (--host)"
    return f"cannot listen on {where}: {exc.strerror or exc}"


def raise_descriptor_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit (the
    workers inherit it) and return it.  Every connection is a descriptor: a
    soft limit of 1,024, the usual default, is what a client holding idle
    connections would exhaust first; the hard limit is what the operator
    allows (docs/deployment.md)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # e.g. above the kernel's nr_open: keep what there is
            pass
    return soft
