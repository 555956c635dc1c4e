"""LLM endpoints. For now: the offline default endpoint, a local OpenAI-compatible server.

``local_server()`` starts ``transformers serve`` (the transformers library's own OpenAI-compatible
server, ``/v1/chat/completions`` with tools) on a free loopback port, serving a packaged chat model
(default: Qwen2.5-Coder-0.5B-Instruct, prepared by ``arxivqa.models``), waits until it answers, and
stops it on exit. The same client code then talks to a local vLLM server on a GPU or a hosted API.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def local_server(model: str | None = None, port: int | None = None, startup_timeout: float = 300.0,
                 log_path: str | Path | None = None) -> Iterator[str]:
    """Serve ``model`` (a packaged name, local folder or hub ID) at ``http://127.0.0.1:<port>/v1``;
    yields that base URL. The server's output goes to ``log_path`` (default: discarded)."""
    from .models import resolve_model

    path = resolve_model(model)
    port = port or _free_port()
    cli = Path(sys.executable).with_name("transformers")
    cmd = [str(cli), "serve", path, "--host", "127.0.0.1", "--port", str(port)]
    env = dict(os.environ, HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"))
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"`{' '.join(cmd)}` exited with code {proc.returncode} before it was ready")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"local server not ready after {startup_timeout:.0f} s")
            time.sleep(1.0)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        if log is not subprocess.DEVNULL:
            log.close()
