"""The YAML language server (the npm package editors run: VS Code's YAML
extension, and others), driven over stdio the way an editor drives it: open a
document, read the diagnostics it publishes.

scripts/test installs it into .ci-work/ and sets RELAYROOM_TEST_YAML_LS to its
binary (and RELAYROOM_TEST_NODE_BIN to a Node on PATH for it)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

SETTINGS = {"validate": True, "schemaStore": {"enable": False}, "schemas": {}, "format": {"enable": False}}


class YamlLanguageServer:
    def __init__(self, binary: str, env: dict[str, str]) -> None:
        self.process = subprocess.Popen([binary, "--stdio"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, env=env)
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.version = 0
        threading.Thread(target=self._read, daemon=True).start()
        self._send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "processId": os.getpid(), "rootUri": None,
            "capabilities": {"workspace": {"configuration": True}, "textDocument": {"publishDiagnostics": {}}}}})
        self._until(lambda m: m.get("id") == 1, 30)
        self._send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        self._send({"jsonrpc": "2.0", "method": "workspace/didChangeConfiguration", "params": {"settings": {"yaml": SETTINGS}}})

    def diagnostics(self, path: Path, text: str, timeout: float = 20) -> list[tuple[int, str]]:
        """(line, message) of every problem the server finds in `text`, opened as `path`."""
        self.version += 1
        uri = path.resolve().as_uri() + f"?v={self.version}"  # a new document each time
        self._send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {
            "textDocument": {"uri": uri, "languageId": "yaml", "version": 1, "text": text}}})
        message = self._until(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                              and m["params"]["uri"] == uri, timeout)
        self._send({"jsonrpc": "2.0", "method": "textDocument/didClose", "params": {"textDocument": {"uri": uri}}})
        return [(d["range"]["start"]["line"] + 1, d["message"]) for d in message["params"]["diagnostics"]]

    def close(self) -> None:
        self.process.kill()
        self.process.wait(10)

    def _send(self, message: dict[str, Any]) -> None:
        raw = json.dumps(message).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(raw) + raw)
        self.process.stdin.flush()

    def _read(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        while True:
            headers = {}
            while True:
                line = stream.readline()
                if not line:
                    return
                if not line.strip():
                    break
                name, value = line.decode().split(":", 1)
                headers[name.lower()] = value.strip()
            body = stream.read(int(headers["content-length"]))
            try:
                self.messages.put(json.loads(body))
            except ValueError:  # cut short: the server was stopped
                return

    def _until(self, wanted: Any, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                message = self.messages.get(timeout=0.2)
            except queue.Empty:
                if self.process.poll() is not None:
                    raise RuntimeError("the YAML language server exited")
                continue
            if "id" in message and "method" in message:  # a request from the server
                result: Any = None
                if message["method"] == "workspace/configuration":
                    result = [SETTINGS for _ in message["params"]["items"]]
                self._send({"jsonrpc": "2.0", "id": message["id"], "result": result})
            elif wanted(message):
                return message
        raise TimeoutError("the YAML language server did not answer in time")
