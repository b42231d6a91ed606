"""The serving process holds glibc's malloc to a few arenas.

Checked in a child process (an arena, once made, lives as long as the
process): threads that each allocate, then glibc's own malloc_stats(),
which prints one "Arena N:" block per arena to stderr."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="the arenas are glibc's"
)

CHILD = """
import ctypes, sys, threading
from gateway.core.allocator import cap_arenas
capped = cap_arenas() if sys.argv[1] == "cap" else None
held, go = [], threading.Barrier(8)
def work():
    go.wait()
    held.append(bytearray(100_000))  # under the mmap threshold: from the thread's arena
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(capped, flush=True)
ctypes.CDLL(None).malloc_stats()
"""


def arenas(mode: str, **env: str) -> tuple[str, int]:
    clean = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True,
                         env={**clean, **env})
    return out.stdout.strip(), out.stderr.count("Arena ")


def test_threads_share_two_arenas_once_capped() -> None:
    assert arenas("cap") == ("True", 2)


def test_without_the_cap_each_thread_would_get_its_own() -> None:
    # The control: the check above can fail.
    _, count = arenas("none")
    assert count > 2


def test_an_operators_malloc_arena_max_is_left_alone() -> None:
    assert arenas("cap", MALLOC_ARENA_MAX="3") == ("False", 3)


GIVE_BACK = """
import sys
from gateway.core.allocator import give_back
def rss():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) // 1024
blocks = [bytearray(100_000) for _ in range(400)]  # 40 MB from the heap, under the mmap threshold
pin = bytearray(100_000)  # above them: the heap's top cannot shrink past it
del blocks
before = rss()
if sys.argv[1] == "give_back":
    give_back()
print(before - rss())
"""


def freed_mb(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", GIVE_BACK, mode], capture_output=True, text=True, check=True)
    return int(out.stdout)


def test_give_back_returns_freed_pages_to_the_system() -> None:
    assert freed_mb("give_back") >= 30
    assert freed_mb("keep") < 5  # the control: malloc keeps them otherwise
