"""What the serving process asks of glibc's malloc: few arenas, and freed
memory given back after a big read.  Elsewhere (musl, macOS) both do nothing."""

from __future__ import annotations

import ctypes
import os

M_ARENA_MAX = -8  # mallopt's parameter number in glibc's malloc.h
ARENAS = 2


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def cap_arenas(limit: int = ARENAS) -> bool:
    """Let malloc use at most `limit` arenas, unless the operator set
    MALLOC_ARENA_MAX (glibc reads it itself); whether the cap was set.

    glibc gives each thread that allocates its own arena, up to eight per
    core, and memory freed in one arena stays there: every worker thread
    that runs the model or reads a matrix keeps its own high-water mark."""
    libc = _libc()
    if os.environ.get("MALLOC_ARENA_MAX") or libc is None or not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(M_ARENA_MAX, limit))


def give_back() -> None:
    """Return malloc's free pages to the system (after a read of many rows,
    freed at once, that malloc would otherwise keep for later)."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
