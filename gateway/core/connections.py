"""How many connections one gateway process keeps open.

Every connection is a file descriptor.  A client holding connections that
never finish a request head would otherwise use up the process's descriptor
limit, and then asyncio stops accepting for a whole second at a time while
everyone else waits.  So a process keeps at most `connection_cap` of its
limit for connections, and the HTTP door (gateway/web/http_limits.py) sheds
the connection that has waited longest for a request head when a new one
would pass it.
"""

from __future__ import annotations

# How many connections the event loop accepts in one pass: uvicorn's
# `backlog`, which asyncio uses for the listen queue's length too.
ACCEPT_BATCH = 128
# Descriptors the process needs besides its connections: the store's files
# and connections, the log, the event loop's own, the model's files.
OWN_DESCRIPTORS = 96


def connection_cap(descriptor_limit: int) -> int:
    """Connections kept open under a soft limit of `descriptor_limit` files:
    the limit less the process's own descriptors and two accept passes (the
    connections the loop accepted but has not counted yet, and those shed
    but not closed yet: each is a pass of the loop behind)."""
    return max(1, descriptor_limit - OWN_DESCRIPTORS - 2 * ACCEPT_BATCH)
