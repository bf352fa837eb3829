"""A small LSP client over stdio: what an editor does, in JSON-RPC frames."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any


class LspClient:
    def __init__(self, cwd: Path | None = None, root: Path | None = None, env: dict[str, str] | None = None) -> None:
        """`root`: the checkout whose qlower serves (default: this one; the bench compares two); `env`: variables
        set for the server beside the environment's."""
        env = {**os.environ, **(env or {})}
        here = Path(__file__).resolve().parents[2]
        root = Path(root or here).resolve()
        env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
        command = [sys.executable, "-m", "qlower.cli.main", "lsp"]
        if root != here:  # `-m` puts the working directory (this checkout, as tests and benches run) first
            command = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(root)!r}); sys.argv = ['qlower', "
                       "'lsp']; from qlower.cli.main import entry; entry()"]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     cwd=cwd, env=env)
        self._next = 0
        self._inbox: queue.Queue = queue.Queue()
        self.notifications: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            headers = {}
            while True:
                line = out.readline()
                if not line:
                    self._inbox.put(None)
                    return
                line = line.decode("ascii").strip()
                if not line:
                    break
                k, v = line.split(":", 1)
                headers[k.lower()] = v.strip()
            body = out.read(int(headers["content-length"]))
            self._inbox.put(json.loads(body))

    def _send(self, msg: dict) -> None:
        data = json.dumps(msg).encode("utf-8")
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(data) + data)
        self.proc.stdin.flush()

    def notify(self, method: str, params: Any = None) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params: Any = None, timeout: float = 300) -> Any:
        self._next += 1
        rid = self._next
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            msg = self._inbox.get(timeout=timeout)
            if msg is None:
                raise RuntimeError("server closed its output: " + self.proc.stderr.read().decode())
            if msg.get("id") == rid and "method" not in msg:
                if "error" in msg:
                    raise RuntimeError(msg["error"])
                return msg.get("result")
            if "method" in msg and "id" in msg:  # a request from the server (e.g. registerCapability)
                self._send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
            else:
                self.notifications.append(msg)

    def wait_for(self, method: str, uri: str | None = None, timeout: float = 300) -> dict:
        """The next notification `method` (for `uri`), waiting for it to arrive."""
        for i, n in enumerate(self.notifications):
            if n["method"] == method and (uri is None or n["params"].get("uri") == uri):
                return self.notifications.pop(i)
        while True:
            msg = self._inbox.get(timeout=timeout)
            if msg is None:
                raise RuntimeError("server closed its output")
            if msg.get("method") == method and (uri is None or msg["params"].get("uri") == uri):
                return msg
            if "method" in msg and "id" in msg:
                self._send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
            else:
                self.notifications.append(msg)

    def initialize(self, root: Path, capabilities: dict | None = None) -> dict:
        result = self.request("initialize", {"processId": os.getpid(), "rootUri": root.as_uri(),
                                             "capabilities": capabilities or {}})
        self.notify("initialized", {})
        return result

    def shutdown(self, timeout: float = 120) -> int:
        self.request("shutdown")
        self.notify("exit")
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                f.close()
