"""Measuring the gateway from outside, the way a user runs it.

- `Server`: `relayroom serve` in a process of its own, at the shipped defaults
  (log level `info`, the access log on, one worker): the only settings the
  benchmarks pass are where the store and the check maps are, the port, and
  the loopback test issuer's permission.  Its stderr is a pipe that a thread
  of this process drains, as a service manager or a container runtime would.
- `wrk_run`: the load, from `wrk` (Debian package `wrk`) in another process,
  over loopback keep-alive connections, with `bench/load.lua` sending each
  request of a file exactly once (CI tokens are single use).  Latency is what
  wrk sees: from the request written to the answer read.
- `compare`: a route against `GET /healthz` of the same server, alternating
  for a number of rounds; the figure is the median of the per-round ratios,
  with the spread (min-max), so a neighbour's burst on a shared machine skews
  one round, not the result.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "bench" / "load.lua"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int, *, system_only: bool = False) -> float:
    """User + system CPU time of a process (or its system time alone: what
    the kernel spent on its behalf, the log's page writes and the sockets) (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[12]) if system_only else int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def settle(pid: int, *, window_s: float = 0.05, busy_s: float = 0.002, limit_s: float = 10.0) -> float:
    """Wait until the server's CPU clock stops moving (under `busy_s` in a
    `window_s`); the seconds waited.

    wrk stops a run with up to one request in flight per connection, and the
    gateway finishes each of them (a client that hangs up does not cancel a
    recall or an attestation).  At 64 connections that is 60-130 ms of work,
    and whatever ran next measured it.  A `/healthz` baseline shared the CPU
    with it.  A sequential round's first request waited 20-50 ms behind it
    (its write and read, traced in wrk: every other request took 1-6 ms),
    and wrk's correction for coordinated omission (`stats_correct`, which
    adds the requests a client at the run's mean rate would have sent
    during a slow one) made that one wait 10-25 samples: the 10k-entry p99
    read 12-54 ms instead of 3.5-4."""
    # /proc counts CPU time in clock ticks (10 ms where SC_CLK_TCK is 100):
    # with the defaults, "still" means not one tick in a window.
    started = time.monotonic()
    before = cpu_seconds(pid)
    if math.isnan(before):  # no /proc (not Linux): nothing to wait on
        return 0.0
    while time.monotonic() - started < limit_s:
        time.sleep(window_s)
        now = cpu_seconds(pid)
        if now - before < busy_s:
            break
        before = now
    return time.monotonic() - started


def machine_ticks() -> tuple[int, int]:
    """(idle, all) CPU ticks of the whole machine since boot, every core
    summed (Linux's /proc/stat; (0, 0) elsewhere).  Two readings give the
    share of the machine left idle between them: `idle_share`."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    # idle and iowait are the ticks no process used.
    return fields[3] + fields[4], sum(fields[:8])


def idle_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    idle, total = after[0] - before[0], after[1] - before[1]
    return idle / total if total > 0 else float("nan")


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


@dataclass
class Server:
    """One `relayroom serve` at the shipped defaults; `env` adds only what a
    deployment must say anyway (store, check maps, port)."""

    env: dict[str, str]
    cwd: Path
    port: int = field(default_factory=free_port)
    command: Sequence[str] | None = None
    process: subprocess.Popen[bytes] | None = None
    log_lines: int = 0
    log_bytes: int = 0
    _drain: threading.Thread | None = None
    _tail: list[bytes] = field(default_factory=list)

    def __enter__(self) -> "Server":
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYROOM_")}
        env.update(self.env)
        env["RELAYROOM_PORT"] = str(self.port)
        command = list(self.command or [sys.executable, "-m", "gateway", "serve"]) + ["--port", str(self.port)]
        self.process = subprocess.Popen(command, env=env, cwd=self.cwd, stderr=subprocess.PIPE)
        self._drain = threading.Thread(target=self._read_log, daemon=True)
        self._drain.start()
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _read_log(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        for line in self.process.stderr:
            self.log_lines += 1
            self.log_bytes += len(line)
            self._tail = (self._tail + [line])[-20:]

    def _wait_ready(self) -> None:
        import httpx

        assert self.process is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit("the gateway exited during start:\n" + b"".join(self._tail).decode(errors="replace"))
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise SystemExit("the gateway did not become ready")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def __exit__(self, *exc: Any) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self._drain is not None:
            self._drain.join(5)


def request_line(method: str, path: str, bearer: str = "", body: str = "") -> str:
    assert "\t" not in path + bearer + body and "\n" not in path + bearer + body
    return f"{method}\t{path}\t{bearer}\t{body}"


def wrk_binary() -> str:
    found = shutil.which("wrk")
    if not found:
        raise SystemExit("wrk is not installed: apt-get install -y wrk (Debian/Ubuntu), or brew install wrk")
    return found


def wrk_run(port: int, lines: Sequence[str], connections: int, *, threads: int = 1, timeout_s: int = 120,
            server_pid: int | None = None) -> dict[str, Any]:
    """Send every line once over `connections` keep-alive connections; wrk's figures (ms, req/s)."""
    connections = max(connections, threads)
    per_thread = len(lines) // threads
    # Stop early enough that no connection needs a line beyond its thread's share.
    stop_after = per_thread - (connections // threads)
    if stop_after < connections:
        raise ValueError(f"{len(lines)} requests are too few for {connections} connections")
    folder = Path(tempfile.mkdtemp(prefix="relayroom-wrk-"))
    path = folder / "requests"
    path.write_text("\n".join(lines) + "\n")
    done_prefix = folder / "done"
    try:
        if server_pid:
            settle(server_pid)
        before = cpu_seconds(server_pid) if server_pid else float("nan")
        before_sys = cpu_seconds(server_pid, system_only=True) if server_pid else float("nan")
        wrk = subprocess.Popen(
            [wrk_binary(), f"-t{threads}", f"-c{connections}", f"-d{timeout_s}s", "--timeout", "10s",
             "-s", str(LUA), f"http://127.0.0.1:{port}", "--", str(path), str(stop_after), str(threads),
             str(done_prefix)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        # wrk's main thread sleeps for -d whatever its threads do; once every
        # thread has had its share, SIGINT ends the run (wrk then reports).
        while wrk.poll() is None and len(list(folder.glob("done.*"))) < threads:
            time.sleep(0.002)
        if wrk.poll() is None:
            wrk.send_signal(signal.SIGINT)
        stdout, stderr = wrk.communicate(timeout=30)
        after = cpu_seconds(server_pid) if server_pid else float("nan")
        after_sys = cpu_seconds(server_pid, system_only=True) if server_pid else float("nan")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if wrk.returncode != 0:
        raise SystemExit(f"wrk failed ({wrk.returncode}):\n{stdout}\n{stderr}")
    line = next((x for x in stdout.splitlines() if x.startswith("WRKJSON ")), None)
    if line is None:
        raise SystemExit(f"wrk printed no figures:\n{stdout}\n{stderr}")
    raw = json.loads(line[len("WRKJSON "):])
    seconds = raw["duration_us"] / 1e6
    return {
        "requests": raw["requests"],
        "per_second": raw["requests"] / seconds,
        "p50_ms": raw["p50_us"] / 1000, "p90_ms": raw["p90_us"] / 1000, "p99_ms": raw["p99_us"] / 1000,
        "max_ms": raw["max_us"] / 1000, "mean_ms": raw["mean_us"] / 1000,
        "statuses": {int(k): v for k, v in raw["statuses"].items()},
        "errors": {k: v for k, v in raw["errors"].items() if v and k != "status"},
        "server_cpu_us": (after - before) / max(1, raw["requests"]) * 1e6,
        "server_sys_us": (after_sys - before_sys) / max(1, raw["requests"]) * 1e6,
    }


def show(name: str, row: dict[str, Any]) -> None:
    errors = f"   socket errors {row['errors']}" if row.get("errors") else ""
    print(f"{name:<26} {row['per_second']:>8.0f} req/s   p50 {row['p50_ms']:6.2f} ms   p99 {row['p99_ms']:6.2f} ms   "
          f"server CPU {row['server_cpu_us']:5.0f} us/req ({row.get('server_sys_us', float('nan')):.0f} system)   "
          f"statuses {row['statuses']}{errors}", flush=True)


def spread(values: Sequence[float], fmt: str = "{:.3f}") -> str:
    """`median (min-max)` of a run's rounds."""
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def compare(server: Server, name: str, batches: Sequence[Sequence[str]], connections: int, *,
            baseline_requests: int | None = None, threads: int = 1) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """For each batch (one a round): /healthz with the same load, then the batch; the rows of each round."""
    rounds = []
    for number, batch in enumerate(batches, 1):
        print(f"-- round {number} of {len(batches)}, load average {load_average()}", file=sys.stderr, flush=True)
        health = wrk_run(server.port, [request_line("GET", "/healthz")] * (baseline_requests or len(batch)),
                         connections, threads=threads, server_pid=server.pid)
        show("GET /healthz", health)
        row = wrk_run(server.port, batch, connections, threads=threads, server_pid=server.pid)
        show(name, row)
        rounds.append((health, row))
    return rounds


def ratios(rounds: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> list[float]:
    return [row["per_second"] / health["per_second"] for health, row in rounds]


@contextlib.contextmanager
def workdir(prefix: str = "relayroom-bench-") -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
