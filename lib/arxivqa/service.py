"""The search backend as a service: many rollout workers share one index.

    python -m arxivqa.service serve [--index demo] [--port 8765] [--chroma-port 8766]   # make serve-search
    python -m arxivqa.service bench [--index demo] [--clients 1,4,16]                   # -> results/bench_service.json

- **Semantic store**: chromadb's own server (``chroma run --path <index>/chroma``), read through
  ``chromadb.HttpClient`` by ``HttpSemanticIndex``, a ``SemanticIndex`` whose collection lives in that
  server. The query is embedded by the client (the embedder the service names); by default the search
  is chromadb's HNSW query, run by the server (``exact`` would copy every vector into each client).
- **Keyword engine + document store**: a small FastAPI app (``make_app``) over an opened ``SearchIndex``,
  served by uvicorn: ``POST /keyword_search``, ``POST /papers``, ``GET /info``.
- **Client**: ``ServiceIndex(url)`` has what ``ArxivEnv`` and training call on an index
  (``keyword_search``, ``semantic_search``, ``analyzer``, ``docs.get``, ``docs.get_many``), so
  ``ArxivEnv(ServiceIndex("http://127.0.0.1:8765"))`` works unchanged. A service that does not answer
  raises ``ServiceUnreachable`` (an ``IndexIncompleteError``: inside a rollout the agent reads
  ``index_unavailable`` and the operator's log gets the address).

``serve`` binds to loopback only: the service has no authentication, so another host is refused unless
``--allow-remote`` says so. ``SearchService`` starts ``serve`` as a child process on free loopback
ports (tests, the benchmark) and stops it (and its chroma server) again.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import ipaddress
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Self
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from . import config
from .corpus import Paper
from .embed import Embedder, get_embedder
from .index import Analyzer, Hit, IndexIncompleteError, SearchIndex, SemanticIndex, open_index

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_CHROMA_PORT = 8766
START_HINT = "start it with `make serve-search` (python -m arxivqa.service serve)"
MAX_IDS = 1000  # papers one /papers request may ask for


class ServiceUnreachable(IndexIncompleteError, ConnectionError):
    """The search service (or its chroma server) does not answer; the message names the address and how
    to start it."""


class ServiceError(RuntimeError):
    """The service answered with an error."""


class RemoteBindRefused(ValueError):
    """A non-loopback bind without ``allow_remote``."""


# --------------------------------------------------------------------------- records


class HitRecord(BaseModel):
    arxiv_id: str
    score: float


class KeywordQuery(BaseModel):
    query: str
    k: int = Field(10, ge=1, le=1000)
    min_date: int | None = None


class KeywordAnswer(BaseModel):
    hits: list[HitRecord]
    terms: list[str]  # the query's stems (snippets mark them)


class PapersQuery(BaseModel):
    ids: list[str] = Field(max_length=MAX_IDS)


class PapersAnswer(BaseModel):
    papers: dict[str, Paper]


class ServiceInfo(BaseModel):
    index: str  # the index folder's name
    docs: int
    keyword_engine: str
    embedder: str
    chroma_port: int  # the chroma server, on the service's host


# --------------------------------------------------------------------------- binding


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind_host(host: str, allow_remote: bool = False) -> str:
    """``host`` when it is a loopback address, or when ``allow_remote``; ``RemoteBindRefused`` otherwise."""
    if is_loopback(host) or allow_remote:
        return host
    raise RemoteBindRefused(f"refusing to serve the search index on {host!r}: the service has no authentication, "
                            f"so it binds to loopback only (127.0.0.1, ::1, localhost); pass --allow-remote to "
                            f"serve other machines on a network you trust")


# --------------------------------------------------------------------------- the semantic store over chroma's server


def chroma_client(host: str, port: int):
    """A ``chromadb.HttpClient``; ``ServiceUnreachable`` when no chroma server answers there."""
    import chromadb
    from chromadb.config import Settings

    try:
        return chromadb.HttpClient(host=host, port=port, settings=Settings(anonymized_telemetry=False))
    except Exception as exc:  # noqa: BLE001 - chromadb reports a dead server as a ValueError or an httpx error
        raise ServiceUnreachable(f"no chroma server answers at http://{host}:{port} ({type(exc).__name__}: {exc}); "
                                 f"{START_HINT}") from None


class HttpSemanticIndex(SemanticIndex):
    """``SemanticIndex`` over a chroma server: the same collection (``abstracts-<embedder>``), read through
    ``chromadb.HttpClient`` instead of a ``PersistentClient`` on the folder; ``search``, ``search_vector``
    and ``len`` are the in-process ones. ``search_mode`` ``hnsw`` (default) runs the query in the server."""

    def __init__(self, host: str, port: int, embedder: Embedder, search_mode: str = "hnsw") -> None:
        if search_mode not in self.SEARCH_MODES:
            raise ValueError(f"unknown semantic search mode {search_mode!r}; choose one of {self.SEARCH_MODES}")
        self.search_mode, self.embedder = search_mode, embedder
        self.address = f"http://{host}:{port}"
        self.client = chroma_client(host, port)
        name = f"abstracts-{embedder.name}"
        try:
            self.collection = self.client.get_collection(name, embedding_function=None)
        except Exception as exc:  # noqa: BLE001 - chromadb raises NotFoundError (or a transport error)
            raise self._unreachable(exc) if _is_transport_error(exc) else IndexIncompleteError(
                f"the chroma server at {self.address} has no collection {name!r}: the index it serves was not "
                f"built with the embedder {embedder.name!r}") from None
        self._lock = threading.Lock()
        self._matrix = None

    def _unreachable(self, exc: Exception) -> ServiceUnreachable:
        return ServiceUnreachable(f"the chroma server at {self.address} stopped answering "
                                  f"({type(exc).__name__}: {exc}); {START_HINT}")

    def __len__(self) -> int:
        try:
            return super().__len__()
        except Exception as exc:
            if _is_transport_error(exc):
                raise self._unreachable(exc) from None
            raise

    def search_vector(self, vector, k: int, min_date: int | None = None) -> list[Hit]:
        try:
            return super().search_vector(vector, k, min_date)
        except Exception as exc:
            if _is_transport_error(exc):
                raise self._unreachable(exc) from None
            raise


def _is_transport_error(exc: BaseException) -> bool:
    import httpx

    return isinstance(exc, (httpx.TransportError, ConnectionError)) or "Could not connect" in str(exc)


# --------------------------------------------------------------------------- the service


def make_app(index: SearchIndex, chroma_port: int):
    """The FastAPI app answering keyword searches and paper look-ups from ``index`` (opened in this process)."""
    from fastapi import FastAPI

    app = FastAPI(title="arxivqa search service", version="1")
    info = ServiceInfo(index=index.folder.name, docs=len(index.docs), keyword_engine=index.keyword_engine_name,
                       embedder=index.embedder.name, chroma_port=chroma_port)

    @app.get("/info")
    def get_info() -> ServiceInfo:
        return info

    @app.post("/keyword_search")
    def keyword_search(q: KeywordQuery) -> KeywordAnswer:
        hits, terms = index.keyword_search(q.query, q.k, q.min_date)
        return KeywordAnswer(hits=[HitRecord(arxiv_id=h.arxiv_id, score=h.score) for h in hits], terms=sorted(terms))

    @app.post("/papers")
    def papers(q: PapersQuery) -> PapersAnswer:
        return PapersAnswer(papers=index.docs.get_many(q.ids))

    return app


class ChromaServer:
    """``chroma run`` over an index's ``chroma/`` folder, as a child process that dies with its parent;
    ``start()`` waits for its heartbeat."""

    def __init__(self, path: Path, host: str, port: int) -> None:
        self.path, self.host, self.port = Path(path), host, port
        self.proc: subprocess.Popen | None = None
        self._log = tempfile.TemporaryFile()

    def start(self, timeout: float = 120.0) -> None:
        import httpx

        from .llm import die_with_parent

        cli = Path(sys.executable).with_name("chroma")
        cmd = [str(cli), "run", "--path", str(self.path), "--host", self.host, "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        url, deadline = f"http://{_url_host(self.host)}:{self.port}/api/v2/heartbeat", time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"`{' '.join(cmd)}` exited with code {self.proc.returncode}: {self.log_tail()}")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"the chroma server did not answer at {url} within {timeout:.0f} s")
            time.sleep(0.5)

    def log_tail(self, chars: int = 2000) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-chars:]

    def stop(self) -> None:
        from .llm import stop_process

        stop_process(self.proc)


def _url_host(host: str) -> str:
    """A host as it goes into a URL (IPv6 in brackets); a wildcard bind is reached on loopback."""
    if host in ("0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def serve(index_spec: str | None = None, embedder: str | None = None, host: str = DEFAULT_HOST,
          port: int = DEFAULT_PORT, chroma_port: int = DEFAULT_CHROMA_PORT, allow_remote: bool = False,
          log_level: str = "warning") -> None:
    """Serve an index in the foreground until interrupted: its chroma server on ``chroma_port``, the
    keyword engine and document store on ``port``. The index must be complete for the embedder."""
    import uvicorn

    check_bind_host(host, allow_remote)
    folder = Path(index_spec) if index_spec and Path(index_spec).exists() else None
    index = open_index(None if folder else index_spec, folder=folder, embedder=embedder)  # refuses a partial index
    index.keyword  # noqa: B018 - load the keyword engine now, not on the first request
    chroma = ChromaServer(index.folder / "chroma", host, chroma_port)
    chroma.start()
    try:
        print(f"search service for {index.folder} ({len(index.docs)} papers, {index.keyword_engine_name}, "
              f"{index.embedder.name}): http://{_url_host(host)}:{port} (keyword + documents), "
              f"chroma on port {chroma_port} (semantic); use ArxivEnv(ServiceIndex('http://{_url_host(host)}:{port}'))",
              flush=True)
        uvicorn.run(make_app(index, chroma_port), host=host, port=port, log_level=log_level)
    finally:
        chroma.stop()


# --------------------------------------------------------------------------- the client


class RemoteDocStore:
    """The document store's look-ups (``get``, ``get_many``) through the service."""

    def __init__(self, service: ServiceIndex) -> None:
        self._service = service

    def get_many(self, ids: Sequence[str]) -> dict[str, Paper]:
        ids = list(dict.fromkeys(ids))
        out: dict[str, Paper] = {}
        for i in range(0, len(ids), MAX_IDS):
            answer = self._service._post("/papers", PapersQuery(ids=ids[i : i + MAX_IDS]), PapersAnswer)
            out.update(answer.papers)
        return out

    def get(self, arxiv_id: str) -> Paper | None:
        return self.get_many([arxiv_id]).get(arxiv_id)


class ServiceIndex:
    """What ``ArxivEnv`` (and training's query filter) call on a ``SearchIndex``, answered by a running
    service: keyword searches and papers over HTTP, semantic searches through its chroma server."""

    def __init__(self, url: str = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}", timeout: float = 30.0,
                 search_mode: str = "hnsw") -> None:
        import httpx

        self.url = url.rstrip("/")
        self.search_mode = search_mode
        self._http = httpx.Client(base_url=self.url, timeout=timeout,
                                  limits=httpx.Limits(max_connections=64, max_keepalive_connections=64))
        self.info = ServiceInfo.model_validate(self._request("GET", "/info").json())
        self.keyword_engine_name = self.info.keyword_engine
        self.analyzer = Analyzer()  # stemming for snippets: local, the same as the service's
        self.docs = RemoteDocStore(self)

    @cached_property
    def embedder(self) -> Embedder:
        return get_embedder(self.info.embedder)

    @cached_property
    def semantic(self) -> HttpSemanticIndex:
        host = urlsplit(self.url).hostname or DEFAULT_HOST
        return HttpSemanticIndex(host, self.info.chroma_port, self.embedder, self.search_mode)

    def keyword_search(self, query: str, k: int = 10, min_date: int | None = None) -> tuple[list[Hit], set[str]]:
        answer = self._post("/keyword_search", KeywordQuery(query=query, k=k, min_date=min_date), KeywordAnswer)
        return [Hit(h.arxiv_id, h.score) for h in answer.hits], set(answer.terms)

    def semantic_search(self, query: str, k: int = 10, min_date: int | None = None) -> list[Hit]:
        return self.semantic.search(query, k, min_date)

    def close(self) -> None:
        self._http.close()

    def _post(self, path: str, body: BaseModel, answer: type[BaseModel]):
        return answer.model_validate_json(self._request("POST", path, body.model_dump(mode="json")).content)

    def _request(self, method: str, path: str, body: dict | None = None):
        import httpx

        try:
            r = self._http.request(method, path, json=body)
        except httpx.TransportError as exc:
            raise ServiceUnreachable(f"the search service at {self.url} is not reachable "
                                     f"({type(exc).__name__}: {exc}); {START_HINT}") from None
        if r.status_code != 200:
            raise ServiceError(f"the search service at {self.url} answered {method} {path} with HTTP "
                               f"{r.status_code}: {r.text[:500]}")
        return r


class SearchService:
    """``python -m arxivqa.service serve`` as a child process on free loopback ports (or the ones given);
    ``start()`` waits until it answers and returns its URL, ``stop()`` ends it and its chroma server."""

    def __init__(self, index: str | Path | None = None, embedder: str | None = None, port: int | None = None,
                 chroma_port: int | None = None) -> None:
        from .llm import _free_port

        self.index, self.embedder = index, embedder
        self.port, self.chroma_port = port or _free_port(), chroma_port or _free_port()
        self.proc: subprocess.Popen | None = None
        self._log = tempfile.TemporaryFile()

    @property
    def url(self) -> str:
        return f"http://{DEFAULT_HOST}:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "arxivqa.service", "serve", "--port", str(self.port),
               "--chroma-port", str(self.chroma_port)]
        cmd += ["--index", str(self.index)] if self.index else []
        return cmd + (["--embedder", self.embedder] if self.embedder else [])

    def start(self, timeout: float = 180.0) -> str:
        import httpx

        from .llm import die_with_parent

        from .config import child_environment

        env = child_environment(str(Path(__file__).resolve().parents[1]))
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=die_with_parent)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the search service exited with code {self.proc.returncode}: {self.log_tail()}")
            try:
                if httpx.get(self.url + "/info", timeout=2).status_code == 200:
                    return self.url
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"the search service did not answer at {self.url} within {timeout:.0f} s: "
                                   f"{self.log_tail()}")
            time.sleep(0.5)

    def log_tail(self, chars: int = 3000) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-chars:]

    def stop(self) -> None:
        from .llm import stop_process

        stop_process(self.proc, timeout=40)  # uvicorn shuts down, then serve stops its chroma server

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# --------------------------------------------------------------------------- the benchmark


class LatencyRow(BaseModel):
    blas_threads: int | None = None  # the calling process's BLAS thread limit (None: the library's default)
    setup: str
    tool: str
    clients: int
    requests: int
    p50_ms: float
    p95_ms: float
    mean_ms: float
    throughput_rps: float


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile, linear between the closest ranks (numpy's default)."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def measure(index, tool: str, queries: Sequence[str], clients: int, per_client: int, env_kwargs: dict,
            setup: str = "", blas_threads: int | None = None) -> LatencyRow:
    """``clients`` threads, each with its own ``ArxivEnv`` over ``index``, call ``tool`` ``per_client`` times
    back to back (a fresh episode per call), all starting together; the latency of every call."""
    from .tools import make_env

    latencies: list[float] = []
    errors: list[str] = []
    lock, barrier = threading.Lock(), threading.Barrier(clients + 1)

    def client(c: int) -> None:
        env = make_env(index, **env_kwargs)
        barrier.wait()
        for i in range(per_client):
            env.reset()
            q = queries[(c * per_client + i) % len(queries)]
            t0 = time.perf_counter()
            text = getattr(env, tool)(query=q, max_results=10)
            dt_ms = 1000 * (time.perf_counter() - t0)
            with lock:
                latencies.append(dt_ms)
                if text.startswith("Error:"):
                    errors.append(text[:300])

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} of {len(latencies)} {tool} calls failed, e.g. {errors[0]}")
    return LatencyRow(blas_threads=blas_threads, setup=setup, tool=tool, clients=clients,
                      requests=len(latencies),
                      p50_ms=round(percentile(latencies, 50), 2), p95_ms=round(percentile(latencies, 95), 2),
                      mean_ms=round(statistics.fmean(latencies), 2), throughput_rps=round(len(latencies) / wall, 1))


def bench_queries(index: SearchIndex, n: int = 200) -> list[str]:
    """Query texts: the training queries when the query file is there, else the index's paper titles."""
    from .corpus import load_queries, queries_path

    try:
        texts = [q.query for q in load_queries(queries_path())]
    except (OSError, ValueError):
        texts = []
    texts = list(dict.fromkeys(texts)) or [p.title for p in index.docs.iter_papers()]
    return texts[:n]


def machine_info() -> dict:
    import chromadb
    import fastapi
    import httpx
    import uvicorn

    def proc_field(path: str, key: str) -> str | None:
        try:
            with open(path) as fh:
                return next((line.split(":", 1)[1].strip() for line in fh if line.startswith(key)), None)
        except OSError:
            return None

    cpu = proc_field("/proc/cpuinfo", "model name") or ""
    mem_kb = proc_field("/proc/meminfo", "MemTotal")
    mem_gib = round(int(mem_kb.split()[0]) / 2**20, 1) if mem_kb else None
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "memory_gib": mem_gib, "python": platform.python_version(),
            "chromadb": chromadb.__version__, "fastapi": fastapi.__version__, "uvicorn": uvicorn.__version__,
            "httpx": httpx.__version__}


def _hnsw_index(index: SearchIndex) -> SearchIndex:
    """The same index with its semantic side in chromadb's HNSW mode (what the service's chroma runs)."""
    other = SearchIndex(index.folder, keyword_engine=index.keyword_engine_name, embedder=index.embedder)
    other.__dict__["semantic"] = SemanticIndex(index.folder / "chroma", index.embedder, search_mode="hnsw")
    return other


def check_same_index(info: ServiceInfo, index: SearchIndex) -> None:
    """A benchmark compares like with like: the service must serve the index measured in process."""
    here = (index.folder.name, len(index.docs), index.keyword_engine_name, index.embedder.name)
    there = (info.index, info.docs, info.keyword_engine, info.embedder)
    if here != there:
        raise ValueError(f"the service serves {there} (index, papers, keyword engine, embedder), "
                         f"the benchmark's index is {here}")


def blas_limit(threads: int | None):
    """BLAS threads of this process limited to ``threads`` for a block (None: left as they are). Measured:
    16 threads each calling numpy's multi-threaded OpenBLAS oversubscribe 2 cores many times over."""
    if threads is None:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=threads, user_api="blas")


def bench_service(index_spec: str | None = None, embedder: str | None = None, clients: Sequence[int] = (1, 4, 16),
                  requests: int = 96, out: Path | None = None, note: str = "", url: str | None = None,
                  blas_threads: Sequence[int | None] = (None, 1), progress: Callable[[str], None] = print) -> dict:
    """p50/p95 of ``keyword_search`` and ``semantic_search`` (as ``ArxivEnv`` calls them: search + papers +
    formatting) in process (exact and HNSW semantic search) and through the service, under each number of
    concurrent clients; ``requests`` calls per cell (at least 4 a client); once per BLAS thread limit of the
    calling process in ``blas_threads``. The service is the one at ``url`` (it must serve the same index)
    or, without one, started here and stopped after. Written to ``out``."""
    from threadpoolctl import threadpool_info

    from .train import preset, tool_view

    folder = Path(index_spec) if index_spec and Path(index_spec).exists() else None
    local = open_index(None if folder else index_spec, folder=folder, embedder=embedder)
    queries = bench_queries(local)
    view = tool_view(preset("paper"))  # the seed's view: 10 hits, abstracts, snippets
    rows: list[LatencyRow] = []

    def run(setup: str, index, tools: Sequence[str], limit: int | None) -> None:
        for tool in tools:
            measure(index, tool, queries[:4], 1, 4, view)  # warm: engines, vectors, connections loaded
            for n in clients:
                row = measure(index, tool, queries, n, max(4, requests // n), view, setup, limit)
                rows.append(row)
                progress(f"BLAS {limit or 'default':7} {setup:16s} {tool:16s} {n:3d} clients: "
                         f"p50 {row.p50_ms:8.2f} ms  p95 {row.p95_ms:8.2f} ms")

    hnsw = _hnsw_index(local)
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        started_here = url is None
        if started_here:
            url = stack.enter_context(SearchService(local.folder, local.embedder.name)).url
        start_s = round(time.perf_counter() - t0, 1) if started_here else None
        remote = ServiceIndex(url)
        stack.callback(remote.close)
        check_same_index(remote.info, local)
        for limit in blas_threads:
            with blas_limit(limit):
                run("in_process", local, ("keyword_search", "semantic_search"), limit)
                run("in_process_hnsw", hnsw, ("semantic_search",), limit)
                run("service", remote, ("keyword_search", "semantic_search"), limit)
    result = {
        "what": "latency of the agent's two search tools (ArxivEnv.keyword_search / semantic_search: search, "
                "papers, formatting) in process vs through the search service (keyword engine + documents over "
                "FastAPI/uvicorn, semantic store in chromadb's server queried with chromadb.HttpClient, HNSW)",
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "index": {"folder": str(local.folder.relative_to(config.REPO_ROOT)) if local.folder.is_relative_to(config.REPO_ROOT)
                  else local.folder.name, "docs": len(local.docs), "keyword_engine": local.keyword_engine_name,
                  "embedder": local.embedder.name, "in_process_semantic_mode": config.settings().semantic_search},
        "clients": "threads of one process, each with its own ArxivEnv (one per rollout, as TRL makes them), all "
                   "sharing one index object (in process) or one HTTP connection pool (service); calls back to back",
        "setups": {"in_process": "the index opened in the calling process (shared read-only files)",
                   "in_process_hnsw": "the same, semantic search by chromadb's HNSW query in process",
                   "service": "ServiceIndex: keyword + papers over HTTP, semantic through the chroma server (HNSW)"},
        "tool_view": view, "queries": len(queries), "requests_per_cell": requests,
        "service_started_by_bench_s": start_s,
        "blas_default": [{k: i.get(k) for k in ("internal_api", "num_threads", "version")} for i in threadpool_info()
                         if i.get("user_api") == "blas"],
        "machine": machine_info(), "conditions": note,
        "results": [r.model_dump() for r in rows],
    }
    if out is not None:
        from .files import atomic_write_json

        atomic_write_json(out, result)
    return result


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m arxivqa.service", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="serve an index (keyword + documents over HTTP, semantic through chroma's server)")
    s.add_argument("--index", default=None, help="index name or folder (default: the scale's index)")
    s.add_argument("--embedder", default=None, help="the semantic side (default: the setting `embedder`)")
    s.add_argument("--host", default=DEFAULT_HOST, help="address to bind (loopback unless --allow-remote)")
    s.add_argument("--port", type=int, default=DEFAULT_PORT, help="keyword + documents (FastAPI)")
    s.add_argument("--chroma-port", type=int, default=DEFAULT_CHROMA_PORT, help="the chroma server (semantic)")
    s.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host (no authentication!)")
    b = sub.add_parser("bench", help="p50/p95 of both search tools in process vs through the service")
    b.add_argument("--index", default=None, help="index name or folder (default: the scale's index)")
    b.add_argument("--embedder", default=None)
    b.add_argument("--clients", default="1,4,16", help="numbers of concurrent clients")
    b.add_argument("--requests", type=int, default=96, help="calls per tool, setup and number of clients")
    b.add_argument("--out", default=None, help="default: <results>/bench_service.json")
    b.add_argument("--note", default="", help="the conditions of the measurement, recorded in the JSON")
    b.add_argument("--url", default=None, help="a running service of the same index (default: start one)")
    b.add_argument("--blas-threads", default="default,1",
                   help="one pass per BLAS thread limit of the calling process ('default': the library's own)")
    a = p.parse_args(argv)
    if a.cmd == "serve":
        try:
            serve(a.index, a.embedder, a.host, a.port, a.chroma_port, a.allow_remote)
        except (RemoteBindRefused, IndexIncompleteError) as exc:
            raise SystemExit(f"error: {exc}") from None
        return
    out = Path(a.out) if a.out else config.results_dir() / "bench_service.json"
    limits = [None if x == "default" else int(x) for x in a.blas_threads.split(",")]
    bench_service(a.index, a.embedder, [int(x) for x in a.clients.split(",")], a.requests, out, a.note, a.url, limits)
    print(out)


if __name__ == "__main__":
    main()
