"""The LLM layer: named endpoints, structured output, retries, a persistent cache, accounting.

Used by the labeller (``labelling``) and by the rubric judge. One code path for every endpoint:
**instructor over the ``openai`` client** with pydantic response models.

Endpoints are named in ``configs/endpoints.toml`` (or the file in ``ARXIVQA_ENDPOINTS``)::

    [local]                      # the offline default: no base_url -> the project serves `model` itself
    model = "qwen2.5-coder-0.5b-instruct"
    mode = "md_json"

    [vllm-qwen3-8b]              # a vLLM server you started on a GPU (`vllm serve Qwen/Qwen3-8B`)
    base_url = "http://127.0.0.1:8000/v1"
    model = "Qwen/Qwen3-8B"
    mode = "json"
    concurrency = 16

    ["openai-gpt-4.1-mini"]      # a hosted API; the key is read from the named environment variable
    base_url = "https://api.openai.com/v1"
    model = "gpt-4.1-mini"
    api_key_env = "OPENAI_API_KEY"
    mode = "tools"

An endpoint without ``base_url`` is **local**: ``open_llm`` starts ``transformers serve`` (the
transformers library's own OpenAI-compatible server) on a free loopback port, serving the packaged
model (prepared offline by ``arxivqa.models``), and stops it on ``close()``/exit. To share one server
between notebooks, run ``make serve`` and set ``ARXIVQA_LOCAL_LLM_URL`` to the URL it prints.

- **Structured output**: ``LLM.structured(messages, ResponseModel)``; instructor validates the answer
  against the pydantic model and re-asks with the validation error (``max_retries`` attempts, with
  exponential backoff); transport errors are retried by the ``openai`` client (``transport_retries``).
  When every attempt fails, ``LLMError`` is raised and counted (``LLM.stats.failures``).
- **Cache**: sqlite under ``data/cache/`` (``ARXIVQA_CACHE_DIR``), keyed by (endpoint, model, prompt,
  response schema, sampling settings). A rerun returns cached answers without calling the endpoint, so
  reruns are free and reproducible. Failures are not cached.
- **Accounting**: every call is recorded (``LLM.calls``: tokens, seconds, attempts, cached, ok) and
  summed in ``LLM.stats``.
- **Secrets**: the API key is read from the environment variable the endpoint names, at client
  construction; it is never part of a cache key, a record, a log line or a result. A server may echo
  the key in an error body (a 401 "Incorrect API key provided: ...", a 500 that echoes headers), so
  every error text is passed through ``scrub`` (the key, ``Bearer ...`` and ``sk-...``-shaped tokens
  removed) before it is stored, logged or raised, and ``LLMError`` does not chain the original exception.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import tomllib
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field

from .config import Settings, offline_environment, secret, settings

T = TypeVar("T", bound=BaseModel)

# instructor logs every failed parse at ERROR level; here a failure is an LLMError, counted in
# LLM.stats and kept in LLM.calls, so its own log lines would only be noise in notebooks.
logging.getLogger("instructor").setLevel(logging.CRITICAL)

DEFAULT_ENDPOINT = "local"
MODES = {"md_json": "MD_JSON", "json": "JSON", "json_schema": "JSON_SCHEMA", "tools": "TOOLS"}


# --------------------------------------------------------------------------- configuration


class Endpoint(BaseModel):
    """One named LLM endpoint. ``base_url=None`` means: the project serves ``model`` locally."""

    name: str
    model: str
    base_url: str | None = None
    api_key_env: str | None = Field(None, description="name of the environment variable holding the key")
    mode: Literal["md_json", "json", "json_schema", "tools"] = "md_json"
    concurrency: int = Field(1, ge=1)
    timeout: float = Field(300.0, gt=0)
    max_retries: int = Field(3, ge=1, description="attempts at a valid structured answer")
    transport_retries: int = Field(4, ge=0, description="openai-client retries of failed requests")
    temperature: float = 0.0
    max_tokens: int = 512
    context_window: int | None = Field(None, ge=1, description="the served model's context window in tokens "
                                       "(default: what the server reports, see served_context_window)")
    engine: Literal["transformers", "llamacpp"] = Field(
        "transformers", description="what serves a local endpoint (no base_url): `transformers serve`, or llama.cpp's "
        "server on the model's packaged GGUF (make setup-llamacpp)")

    @property
    def local(self) -> bool:
        return self.base_url is None


def endpoints_file() -> Path:
    return settings().endpoints


def load_endpoints(path: str | Path | None = None) -> dict[str, Endpoint]:
    """Every endpoint of the configuration file, by name (``local`` is always defined)."""
    path = Path(path) if path else endpoints_file()
    table: dict[str, dict] = {}
    if path.exists():
        with open(path, "rb") as fh:
            table = tomllib.load(fh)
    elif path != Settings.model_fields["endpoints"].default:
        raise FileNotFoundError(f"endpoint configuration {path} does not exist (ARXIVQA_ENDPOINTS)")
    table.setdefault(DEFAULT_ENDPOINT, {"model": "qwen2.5-coder-0.5b-instruct"})
    out = {}
    for name, spec in table.items():
        try:
            out[name] = Endpoint(name=name, **spec)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"endpoint [{name}] in {path} is not valid (quote names that contain dots): {exc}") from exc
    return out


OPENAI_URL = "https://api.openai.com/v1"


class UnknownLLMError(KeyError, ValueError):
    """A name that is neither a configured endpoint nor an inline ``local:``/``openai:`` spec."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


def get_endpoint(name: str | Endpoint | None = None) -> Endpoint:
    """The one way to name an LLM, for the labeller, the judges and the agent's policies alike (default:
    the setting ``llm``, else ``local``):

    - a name configured in ``configs/endpoints.toml`` (``local``, ``local-smollm2``, ``vllm-qwen3-8b``, ...);
    - ``local:<model>``: a packaged model name, local folder or hub ID, served by the project;
    - ``openai:<model>[@<base_url>]``: any OpenAI-compatible server (default the OpenAI API, key in
      ``OPENAI_API_KEY``).
    """
    if isinstance(name, Endpoint):
        return name
    name = name or settings().llm or DEFAULT_ENDPOINT
    eps = load_endpoints()
    if name in eps:
        return eps[name]
    kind, _, rest = name.partition(":")
    if kind == "local" and rest:
        return eps[DEFAULT_ENDPOINT].model_copy(update={"name": name, "model": rest})
    if kind == "openai" and rest:
        model, _, base = rest.partition("@")
        if model:
            return Endpoint(name=name, model=model, base_url=base or OPENAI_URL, api_key_env="OPENAI_API_KEY",
                            mode="tools")
    raise UnknownLLMError(f"unknown LLM {name!r}: use an endpoint of {endpoints_file()} ({', '.join(sorted(eps))}), "
                   "'local:<model>' or 'openai:<model>[@<base_url>]'")


# --------------------------------------------------------------------------- reachability


class EndpointUnreachable(RuntimeError):
    """An endpoint that does not answer (or refuses the key) before a run starts; the message names the
    URL and the setting that chose it."""


def endpoint_source(ep: Endpoint) -> str:
    """Where an endpoint's URL comes from, in the words a user would look for."""
    if ep.name.startswith("openai:"):
        return f"the URL in the LLM name {ep.name!r}"
    return f"base_url of [{ep.name}] in {endpoints_file()} ({Settings.env_var('endpoints')})"


def _get_json(url: str, api_key_env: str | None, timeout: float) -> Any:
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    key = secret(api_key_env)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body = r.read(1_000_000)
    try:
        return json.loads(body)
    except ValueError:
        return None


def check_reachable(base_url: str, *, name: str, chosen_by: str, api_key_env: str | None = None,
                    timeout: float = 5.0) -> Any:
    """One request (``GET <base_url>/models``) before a run: raises ``EndpointUnreachable`` naming the URL
    and ``chosen_by`` (the setting or option that chose it) when nothing answers there, or when the server
    refuses the key (HTTP 401/403). Any other answer, an HTTP error included, means a server is there.
    Returns the parsed answer (None when it was not JSON)."""
    import urllib.error

    url = base_url.rstrip("/") + "/models"
    try:
        return _get_json(url, api_key_env, timeout)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            where = f" (the key comes from ${api_key_env})" if api_key_env else ""
            raise EndpointUnreachable(f"the LLM endpoint {name!r} at {base_url} refused the request with HTTP "
                                      f"{exc.code}{where}; fix the key, or choose another endpoint with "
                                      f"{chosen_by}") from None
        return None
    except (OSError, ValueError) as exc:  # URLError, refused, timeout, a malformed URL
        reason = getattr(exc, "reason", None) or exc
        raise EndpointUnreachable(f"cannot reach the LLM endpoint {name!r} at {base_url} ({reason}); start the "
                                  f"server there, or choose another endpoint with {chosen_by}") from None


def served_context_window(base_url: str, model: str | None = None, api_key_env: str | None = None,
                          models: Any = None, timeout: float = 5.0) -> int | None:
    """The context window an OpenAI-compatible server reports: llama.cpp's ``/props``
    (``default_generation_settings.n_ctx``, the context it runs with), else a ``/v1/models`` entry's
    ``max_model_len`` (vLLM), ``context_length``/``context_window``, or ``meta.n_ctx``/``n_ctx_train``
    (llama.cpp). ``models`` is an answer of ``/models`` already fetched. None when the server says nothing."""
    root = base_url.rstrip("/")
    root = root[: -len("/v1")] if root.endswith("/v1") else root
    try:
        props = _get_json(root + "/props", api_key_env, timeout)
        n = ((props or {}).get("default_generation_settings") or {}).get("n_ctx") if isinstance(props, dict) else None
        if isinstance(n, int) and n > 0:
            return n
    except (OSError, ValueError):
        pass
    if models is None:
        try:
            models = _get_json(base_url.rstrip("/") + "/models", api_key_env, timeout)
        except (OSError, ValueError):
            return None
    entries = models.get("data") if isinstance(models, dict) else None
    if not isinstance(entries, list):
        return None
    entries = [e for e in entries if isinstance(e, dict)]
    mine = [e for e in entries if model is not None and e.get("id") == model] or entries[:1]
    for e in mine:
        meta = e.get("meta") if isinstance(e.get("meta"), dict) else {}
        for v in (e.get("max_model_len"), e.get("context_length"), e.get("context_window"), meta.get("n_ctx"),
                  meta.get("n_ctx_train")):
            if isinstance(v, int) and v > 0:
                return v
    return None


# --------------------------------------------------------------------------- the local server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc: subprocess.Popen | None, timeout: float = 20.0) -> None:
    """End a child server: SIGTERM, then SIGKILL if it has not exited within ``timeout`` seconds."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def die_with_parent() -> None:
    """For ``Popen(preexec_fn=...)``: on Linux the child gets SIGTERM when the process that started it
    dies (``prctl(PR_SET_PDEATHSIG)``), so a command killed from outside never leaves a model server
    holding gigabytes of memory (seen: a killed benchmark's server kept running beside a training run).
    Elsewhere it does nothing; ``stop()`` still ends the server on a normal exit."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class LocalServer:
    """``transformers serve`` on loopback; ``start()`` waits until it answers. Pinned to ``model``
    (preloaded), or with ``model=""`` serving any local model a request names (loaded on demand)."""

    def __init__(self, model: str | None = None, port: int | None = None, log_path: str | Path | None = None) -> None:
        from .models import resolve_model

        self.path = resolve_model(model) if model != "" else ""
        self._process(port, log_path)

    def _process(self, port: int | None, log_path: str | Path | None) -> None:
        """The state of the server process every engine has: its port, log and (once started) process."""
        self.port = port or _free_port()
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    ready_path = "/health"  # answers 200 once the server can take requests

    def command(self) -> list[str]:
        cli = Path(sys.executable).with_name("transformers")
        return [str(cli), "serve", *([self.path] if self.path else ["--model-timeout", "86400"]),
                "--host", "127.0.0.1", "--port", str(self.port)]

    def start(self, startup_timeout: float = 300.0) -> str:
        cmd = self.command()
        env = offline_environment()
        self._log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent)
        deadline = time.monotonic() + startup_timeout
        while True:
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"`{' '.join(cmd)}` exited with code {self.proc.returncode} before it was ready")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{self.ready_path}", timeout=2) as r:
                    if r.status == 200:
                        return self.base_url
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"local server not ready after {startup_timeout:.0f} s")
            time.sleep(1.0)

    def stop(self) -> None:
        stop_process(self.proc)
        if self._log not in (None, subprocess.DEVNULL):
            self._log.close()
        self._log = None


LLAMACPP_EXTRA = "make setup-llamacpp (requirements-llamacpp.txt: llama-cpp-python[server] built with the AMX kernels off)"


def llamacpp_installed() -> bool:
    """Whether llama.cpp's OpenAI-compatible server (``llama_cpp.server``, an optional extra) is installed."""
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("uvicorn") is not None


class LlamaCppServer(LocalServer):
    """llama.cpp's OpenAI-compatible server (``python -m llama_cpp.server`` of llama-cpp-python[server], an
    optional extra) on loopback, serving a packaged model's GGUF file as it ships (no conversion), with a
    context window of ``n_ctx`` tokens and the chat template stored in the GGUF (Qwen2.5's has tools; the
    server returns the model's ``<tool_call>`` blocks as text, which ``OpenAIPolicy`` reads). The server
    reports neither its context nor tool support, so callers pass ``n_ctx`` on as the policy's
    ``context_window``. Requests are served one at a time, each reusing the cached prefix of the last."""

    ready_path = "/v1/models"

    def __init__(self, model: str | None = None, port: int | None = None, log_path: str | Path | None = None,
                 n_ctx: int = 8192, threads: int | None = None) -> None:
        from .models import DEFAULT_MODEL, gguf_file

        if not llamacpp_installed():
            raise ImportError(f"llama.cpp's server is not installed; run {LLAMACPP_EXTRA}")
        self.model = model or DEFAULT_MODEL
        self.gguf = gguf_file(self.model)
        self.n_ctx = n_ctx
        self.threads = threads or os.cpu_count() or 1
        self._process(port, log_path)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "llama_cpp.server", "--model", str(self.gguf), "--model_alias", self.model,
                "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
                "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads)]


SERVER_ENGINES: dict[str, type[LocalServer]] = {"transformers": LocalServer, "llamacpp": LlamaCppServer}


@contextlib.contextmanager
def local_server(model: str | None = None, port: int | None = None, startup_timeout: float = 300.0,
                 log_path: str | Path | None = None, engine: str = "transformers", **kwargs: Any) -> Iterator[str]:
    """Serve ``model`` (a packaged name, local folder or hub ID) at ``http://127.0.0.1:<port>/v1``;
    yields that base URL. ``engine``: ``transformers`` (``transformers serve``) or ``llamacpp``
    (``LlamaCppServer``, a packaged model's GGUF; ``kwargs``: ``n_ctx``, ``threads``). The server's output
    goes to ``log_path`` (default: discarded)."""
    if engine not in SERVER_ENGINES:
        raise ValueError(f"unknown server engine {engine!r}: {' or '.join(SERVER_ENGINES)}")
    server = SERVER_ENGINES[engine](model, port, log_path, **kwargs)
    try:
        yield server.start(startup_timeout)
    finally:
        server.stop()


# --------------------------------------------------------------------------- cache and accounting


def cache_dir() -> Path:
    return settings().cache_dir


class ResponseCache:
    """Validated structured answers in sqlite, keyed by a hash of (endpoint, model, prompt, schema, settings)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else cache_dir() / "llm.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        with self._connect() as db:
            db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, endpoint TEXT, model TEXT, "
                       "response TEXT, prompt_tokens INTEGER, completion_tokens INTEGER, created REAL)")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    @staticmethod
    def key(endpoint: Endpoint, messages: Sequence[dict], schema: dict, **settings: Any) -> str:
        payload = {"endpoint": endpoint.name, "model": endpoint.model, "messages": list(messages),
                   "schema": schema, "settings": settings}
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()

    def get(self, key: str) -> tuple[str, int, int] | None:
        with self._lock, contextlib.closing(self._connect()) as db:
            row = db.execute("SELECT response, prompt_tokens, completion_tokens FROM responses WHERE key = ?",
                             (key,)).fetchone()
        return tuple(row) if row else None

    def put(self, key: str, endpoint: Endpoint, response: str, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock, contextlib.closing(self._connect()) as db, db:
            db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (key, endpoint.name, endpoint.model, response, prompt_tokens, completion_tokens, time.time()))

    def __len__(self) -> int:
        with contextlib.closing(self._connect()) as db:
            return db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]


class CallRecord(BaseModel):
    endpoint: str
    model: str
    response_model: str
    ok: bool
    cached: bool
    attempts: int = 0  # HTTP requests sent, transport retries included (0 for a cache hit)
    parse_errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    error: str = ""


@dataclass
class Stats:
    calls: int = 0
    cache_hits: int = 0
    requests: int = 0
    parse_errors: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def add(self, rec: CallRecord) -> None:
        self.calls += 1
        self.cache_hits += rec.cached
        self.requests += rec.attempts
        self.parse_errors += rec.parse_errors
        self.failures += not rec.ok
        self.prompt_tokens += rec.prompt_tokens
        self.completion_tokens += rec.completion_tokens
        self.seconds += rec.seconds

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


class LLMError(RuntimeError):
    """Every attempt at a valid structured answer failed (the message says why; it never holds the key)."""


REDACTED = "[redacted]"
# Credentials a server may echo: "Bearer <token>" (an Authorization header) and OpenAI-style keys.
_TOKEN_PATTERNS = (re.compile(r"(?i)\b(bearer)\s+[^\s\"',;}\]]+"), re.compile(r"\bsk-[A-Za-z0-9_\-*.]{6,}"),
                   re.compile(r"(?i)(api[_-]?key[\"']?\s*[:=]\s*[\"']?)[^\s\"',;}\]]{6,}"))


def scrub(text: object, secrets: Sequence[str | None] = ()) -> str:
    """``text`` without any of ``secrets`` (each at least 4 characters) and without ``Bearer ...``,
    ``sk-...`` or ``api_key=...``-shaped tokens: what an error message may keep."""
    out = str(text)
    for key in sorted({k for k in secrets if k and len(k) >= 4}, key=len, reverse=True):
        out = out.replace(key, REDACTED)
    out = _TOKEN_PATTERNS[0].sub(lambda m: f"{m.group(1)} {REDACTED}", out)
    out = _TOKEN_PATTERNS[1].sub(REDACTED, out)
    return _TOKEN_PATTERNS[2].sub(lambda m: m.group(1) + REDACTED, out)


_CURRENT = threading.local()  # the CallRecord of the structured() call running in this thread


# --------------------------------------------------------------------------- the client


@dataclass
class LLM:
    """A structured-output client for one endpoint. Build with ``open_llm``."""

    endpoint: Endpoint
    base_url: str | None = None
    cache: ResponseCache | None = None
    calls: list[CallRecord] = field(default_factory=list)
    stats: Stats = field(default_factory=Stats)
    _server: LocalServer | None = None

    def __post_init__(self) -> None:
        import instructor
        from openai import DefaultHttpxClient, OpenAI

        ep = self.endpoint
        key = secret(ep.api_key_env)
        if ep.api_key_env and not key:
            raise LLMError(f"endpoint {ep.name!r} needs an API key in the environment variable {ep.api_key_env}")
        self.base_url = self.base_url or ep.base_url
        self._secrets = (key,) if key else ()
        # every HTTP request sent (transport retries included) counts as an attempt of the running call
        http = DefaultHttpxClient(event_hooks={"request": [_count_request]})
        raw = OpenAI(base_url=self.base_url, api_key=key or "no-key-needed-for-a-local-server",
                     timeout=ep.timeout, max_retries=ep.transport_retries, http_client=http)
        self._client = instructor.from_openai(raw, mode=getattr(instructor.Mode, MODES[ep.mode]))
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"{self.endpoint.name} ({self.endpoint.model})"

    def structured(self, messages: Sequence[dict], response_model: type[T], *, max_tokens: int | None = None,
                   temperature: float | None = None, use_cache: bool = True) -> T:
        """One validated answer of type ``response_model``; from the cache when this exact request was
        answered before. Raises ``LLMError`` when every attempt fails."""
        from instructor.core.hooks import Hooks
        from tenacity import Retrying, stop_after_attempt, wait_exponential

        ep = self.endpoint
        max_tokens = max_tokens or ep.max_tokens
        temperature = ep.temperature if temperature is None else temperature
        key = ResponseCache.key(ep, messages, response_model.model_json_schema(), max_tokens=max_tokens,
                                temperature=temperature, mode=ep.mode)
        rec = CallRecord(endpoint=ep.name, model=ep.model, response_model=response_model.__name__, ok=True,
                         cached=False)
        t0 = time.perf_counter()
        if use_cache and self.cache is not None and (hit := self.cache.get(key)) is not None:
            rec.cached, rec.prompt_tokens, rec.completion_tokens = True, hit[1], hit[2]
            self._record(rec, t0)
            return response_model.model_validate_json(hit[0])

        hooks = Hooks()
        invalid: set[int] = set()  # attempts whose output could not become a response_model

        def on_response(resp: Any) -> None:
            usage = getattr(resp, "usage", None)
            rec.prompt_tokens += getattr(usage, "prompt_tokens", 0) or 0
            rec.completion_tokens += getattr(usage, "completion_tokens", 0) or 0
            choices = getattr(resp, "choices", None) or []
            # output cut at max_tokens: instructor raises IncompleteOutputException without a parse hook
            if choices and getattr(choices[0], "finish_reason", None) == "length":
                invalid.add(rec.attempts)
                rec.parse_errors = len(invalid)

        def on_parse_error(_exc: Exception) -> None:
            invalid.add(rec.attempts)
            rec.parse_errors = len(invalid)

        hooks.on("completion:response", on_response)
        hooks.on("parse:error", on_parse_error)
        retrying = Retrying(stop=stop_after_attempt(ep.max_retries), wait=wait_exponential(multiplier=0.5, max=8),
                            reraise=True)
        _CURRENT.rec = rec
        try:
            out = self._client.chat.completions.create(model=self._served_model(), messages=list(messages),
                                                       response_model=response_model, max_retries=retrying,
                                                       max_tokens=max_tokens, temperature=temperature, hooks=hooks)
        except Exception as exc:  # noqa: BLE001 - reported as LLMError, counted
            # scrubbed before it is cut (a cut could split the key), and not chained: the original
            # exception's text and body may hold the key, and a traceback would print them
            rec.ok, rec.error = False, scrub(f"{type(exc).__name__}: {exc}", self._secrets)[:300]
            self._record(rec, t0)
            raise LLMError(f"{ep.name}: no valid {response_model.__name__} after {rec.attempts} request(s): "
                           f"{rec.error}") from None
        finally:
            _CURRENT.rec = None
        if self.cache is not None:
            self.cache.put(key, ep, out.model_dump_json(), rec.prompt_tokens, rec.completion_tokens)
        self._record(rec, t0)
        return out

    def map(self, requests: Sequence[tuple[Sequence[dict], type[T]]], desc: str | None = None,
            **kwargs: Any) -> list[T | LLMError]:
        """Many ``structured`` calls with at most ``endpoint.concurrency`` in flight; results in request
        order, an ``LLMError`` in place of each failed one (never dropped)."""
        from tqdm.auto import tqdm

        def one(req: tuple[Sequence[dict], type[T]]) -> T | LLMError:
            try:
                return self.structured(req[0], req[1], **kwargs)
            except LLMError as exc:
                return exc

        with ThreadPoolExecutor(self.endpoint.concurrency) as pool:
            it = pool.map(one, requests)
            return list(tqdm(it, total=len(requests), desc=desc, disable=desc is None, leave=False))

    def _served_model(self) -> str:
        if self.endpoint.local:  # transformers serve names the model by the folder it loads
            from .models import resolve_model

            return resolve_model(self.endpoint.model)
        return self.endpoint.model

    def _record(self, rec: CallRecord, t0: float) -> None:
        rec.seconds = time.perf_counter() - t0
        with self._lock:
            self.calls.append(rec)
            self.stats.add(rec)

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _count_request(_request: Any) -> None:
    rec = getattr(_CURRENT, "rec", None)
    if rec is not None:
        rec.attempts += 1


def open_llm(endpoint: str | Endpoint | None = None, *, cache: ResponseCache | None | Literal[False] = None,
             log_path: str | Path | None = None, check: bool = True, chosen_by: str | None = None) -> LLM:
    """A client for the named endpoint (default ``ARXIVQA_LLM`` or ``local``). A local endpoint gets a
    server: the one at ``ARXIVQA_LOCAL_LLM_URL`` if set, else one started now and stopped by
    ``close()`` (use ``with open_llm() as llm:``). ``cache=False`` turns the cache off.

    With ``check`` (default), a server that the project does not start itself is asked once whether it
    is there (``check_reachable``): an unreachable one raises ``EndpointUnreachable`` now, naming its URL
    and ``chosen_by`` (the option or setting that named the endpoint) and the setting that holds the URL,
    instead of every request failing after its retries."""
    import atexit

    ep = get_endpoint(endpoint)
    cache = None if cache is False else (cache or ResponseCache())
    server = None
    base_url = ep.base_url
    chosen_by = chosen_by or f"the LLM name (default {Settings.env_var('llm')})"
    if ep.local:
        base_url = settings().local_llm_url
        if base_url and check:
            check_reachable(base_url, name=ep.name, chosen_by=f"{Settings.env_var('local_llm_url')} (or unset it to "
                            "start a local server)")
        if not base_url:
            server = SERVER_ENGINES[ep.engine](ep.model, log_path=log_path)
            base_url = server.start()
            atexit.register(server.stop)
    llm = LLM(ep, base_url=base_url, cache=cache)  # a missing key is reported first
    if not ep.local and check:
        check_reachable(base_url, name=ep.name, chosen_by=f"{chosen_by}, or change {endpoint_source(ep)}",
                        api_key_env=ep.api_key_env)
    llm._server = server
    return llm


def main(argv: list[str] | None = None) -> None:
    """``python -m arxivqa.llm serve [--endpoint local] [--port N]`` — run the local server in the
    foreground (share it with ``ARXIVQA_LOCAL_LLM_URL``); ``python -m arxivqa.llm list``."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m arxivqa.llm", description=main.__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--endpoint", default=None)
    s.add_argument("--port", type=int, default=8321)
    s.add_argument("--engine", choices=tuple(SERVER_ENGINES), default="transformers",
                   help="transformers serve (every local model), or llama.cpp's server (one packaged model's GGUF)")
    s.add_argument("--model", default=None, help="llamacpp: the packaged model (default qwen2.5-coder-0.5b-instruct)")
    s.add_argument("--n-ctx", type=int, default=8192, help="llamacpp: the context window in tokens")
    sub.add_parser("list")
    args = p.parse_args(argv)
    if args.cmd == "list":
        for ep in load_endpoints().values():
            where = ep.base_url or "local (served by the project)"
            key = f", key from ${ep.api_key_env}" if ep.api_key_env else ""
            print(f"{ep.name:24s} {ep.model:32s} {where}{key}")
        return
    if args.engine == "llamacpp":
        try:
            server = LlamaCppServer(args.model, port=args.port, n_ctx=args.n_ctx)
        except (ImportError, ValueError) as exc:
            raise SystemExit(f"error: {exc}") from None
        url = server.start()
        print(f"llama.cpp serving {server.model} ({server.gguf.name}, context {server.n_ctx}) at {url}\n"
              f"policy: --policy openai:{server.model}@{url} --context-window {server.n_ctx}", flush=True)
    else:
        ep = get_endpoint(args.endpoint)
        if not ep.local:
            raise SystemExit(f"endpoint {ep.name!r} is remote ({ep.base_url}); nothing to serve")
        server = LocalServer("", port=args.port)  # not pinned: serves every local endpoint's model
        url = server.start()
        print(f"serving the local models (first: {ep.model}) at {url}\nexport ARXIVQA_LOCAL_LLM_URL={url}", flush=True)
    try:
        server.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()


__all__ = ["Endpoint", "EndpointUnreachable", "LLM", "LLMError", "check_reachable", "served_context_window", "scrub", "LocalServer", "ResponseCache", "CallRecord", "Stats", "open_llm",
           "local_server", "load_endpoints", "get_endpoint"]

