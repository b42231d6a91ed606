"""One client holding connections that never finish a request head.

    python -m tests.support.idle_holder PORT COUNT

Opens COUNT connections to 127.0.0.1:PORT, sends each the start of a request
head and nothing more, and opens a new one for each the server closes.
Prints `ready` once every one was opened at least once, then, when its
standard input closes, one JSON line: how many it opened and held at most.
A process of its own, as such a client is: the client a test measures does
not share its event loop.
"""

from __future__ import annotations

import asyncio
import json
import sys


async def hold(port: int, count: int) -> dict[str, int]:
    state = {"opened": 0, "held": 0, "most": 0}
    stopping = asyncio.Event()

    async def one() -> None:
        while not stopping.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Never-Ends: ")
            state["opened"] += 1
            state["held"] += 1
            state["most"] = max(state["most"], state["held"])
            if state["opened"] == count:
                print("ready", flush=True)
            try:
                await reader.read()  # until the server closes it
            except OSError:
                pass
            finally:
                state["held"] -= 1
                writer.close()

    tasks = [asyncio.create_task(one()) for _ in range(count)]
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until stdin closes
    stopping.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"opened": state["opened"], "most": state["most"]}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(hold(int(sys.argv[1]), int(sys.argv[2])))), flush=True)
