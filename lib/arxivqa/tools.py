"""The agent's tool environment: keyword_search, semantic_search, read_page, finish.

``ArxivEnv`` is written for TRL's ``GRPOTrainer(environment_factory=ArxivEnv)``: one instance per
rollout, ``reset(**row)`` starts an episode, and every public method is a tool whose JSON schema TRL
reads from the type hints and the Google-style docstring. Everything else is private (``_``).

Per episode:
- **ID obfuscation.** The agent never sees arXiv IDs, only opaque IDs (``P-1a2b3c4d``) derived from a
  per-episode random salt: stable within the episode, different across episodes. ``read_page`` and
  ``finish`` accept only IDs this episode has shown; the environment maps them back for scoring.
- **Recording.** Every call, its arguments, its text result and the real arXiv IDs it returned are
  kept on ``env.episode`` (rewards need all tool results, not only the submission).
- **Repeats are refused.** A search or read identical to one the episode already ran (same tool and
  arguments, ``max_results`` aside) returns ``Error: ... already ran this exact ...`` instead of the same
  hits again (``refuse_repeats``; measured: a 0.5B policy otherwise copies its last call turn after
  turn). The refused call is recorded, so the RLVR duplication gate still counts it.
- **Errors are messages.** Bad input (unknown or malformed ID, >10 IDs, empty or huge query, wrong
  argument types, unknown tool) returns a clear ``Error: ...`` text to the agent; nothing raises
  out of the episode.
- **No machine details.** A missing or unfinished index is reported to the agent as
  ``index_unavailable`` without its folder (the operator gets the full message in the log), and any
  other failure's text has filesystem paths replaced by ``<path>``.
- **Parallel calls.** ``env._run_parallel(calls)`` runs one turn's batch of calls concurrently and
  returns the results in call order (the agent loop uses it; TRL calls the methods itself).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import hmac
import inspect
import json
import logging
import re
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel, Field, ValidationError, validate_call

from .index import Hit as IndexHit
from .index import IndexIncompleteError, SearchIndex, date_int, open_index, snippets
from .records import (
    MAX_SUBMIT,
    SEARCH_TOOLS,
    TOOL_NAMES,
    Hit,
    ToolCallRecord,
    call_key,
    clean_text,
    echo,
)

MAX_QUERY_CHARS = 1000
MAX_ARGUMENT_CHARS = 20000  # a tool call's arguments as JSON text
MAX_RESULTS_CAP = 50
PAGE_CHARS = 2000
ABSTRACT_CHARS = 600  # semantic_search shows this much abstract per hit; read_page shows all
MAX_SNIPPETS = 2
SNIPPET_CHARS = 400


class Episode(BaseModel):
    row: dict[str, Any] = Field(default_factory=dict)
    calls: list[ToolCallRecord] = Field(default_factory=list)
    submitted: list[str] | None = None  # real arXiv IDs, in the order given; None until finish succeeds
    submitted_opaque: list[str] | None = None
    id_map: dict[str, str] = Field(default_factory=dict, description="opaque ID -> arXiv ID")

    @property
    def finished(self) -> bool:
        return self.submitted is not None

    def seen_ids(self) -> set[str]:
        """Every real arXiv ID that any tool result of the episode showed."""
        return {pid for c in self.calls for pid in c.result_ids}


log = logging.getLogger(__name__)
_LOGGED: set[str] = set()
# an absolute (or home-relative) path of two or more parts, not the middle of a word, date or fraction
_PATH = re.compile(r"(?<![\w.:/\\])(?:~|[A-Za-z]:)?(?:[/\\][\w.\-+@%]+){2,}[/\\]?")
EPISODE_OVER = "The episode is over."  # the end of a successful finish's result
FINISHED = "finish has already been called; the episode is over"  # the refusal of any call after it


def ends_episode(result: str) -> bool:
    """Whether a tool result says that the episode is over: a successful ``finish``, or a call after it."""
    text = result.rstrip()
    return text.endswith(EPISODE_OVER) or text.endswith(FINISHED)


INDEX_UNAVAILABLE = ("the search index is not available (it is missing or its build did not finish); "
                     "this is not a problem with your call, and no search can run now")


def no_paths(text: str) -> str:
    """``text`` with filesystem paths replaced by ``<path>``: what the agent may read of an internal error."""
    return _PATH.sub("<path>", text)


def _log_once(message: str) -> None:
    if message not in _LOGGED:
        _LOGGED.add(message)
        log.error(message)


class ToolError(ValueError):
    """A problem with the agent's call, reported back to it as a message; ``code`` names the kind of problem
    (what the record keeps for readers and the judge, who never see the echoed input)."""

    def __init__(self, message: str, code: str = "tool_error") -> None:
        super().__init__(message)
        self.code = code


def _tool(fn):
    """Validate the arguments of a tool call and turn every problem into an ``Error:`` message.

    The wrapper takes the environment positionally only, so an argument the model calls ``self`` is one
    more unknown argument, not a clash; model text is cleaned (``records.clean_value``) on the way in."""
    validated = validate_call(fn)
    signature = inspect.signature(fn)
    params = set(signature.parameters) - {"self"}

    @functools.wraps(fn)
    def wrapper(env, /, *args, **kwargs):
        t0 = time.perf_counter()
        hits: list[Hit] = []
        code = ""
        given = {str(k): v for k, v in kwargs.items()}
        # Small models copy schema keys ("required", "type") into the arguments: drop unknown
        # arguments, run the call, and say so in the result.
        extra = sorted(k for k in given if k not in params)
        note = (f"Note: ignored unknown argument(s) {', '.join(echo(k, 40) for k in extra[:5])}"
                f"{' and more' if len(extra) > 5 else ''} of {fn.__name__}.\n") if extra else ""
        call = {k: _clean_arg(v) for k, v in given.items() if k in params}
        try:
            key = env._check_repeat(fn.__name__, _bound(signature, env, args, call))
            text, hits = validated(env, *args, **call)
            text, error = note + text, False
            if key is not None:
                with env._lock:
                    env._answered.add(key)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors()[:5])
            text, error, code = f"Error: invalid arguments for {fn.__name__}: {clean_text(problems, 500)}", True, "bad_arguments"
        except ToolError as exc:
            text, error, code = f"Error: {clean_text(exc, 500)}", True, exc.code
        except IndexIncompleteError as exc:  # the operator's problem: the folder goes to the log only
            _log_once(f"{fn.__name__}: {exc}")
            text, error, code = f"Error: {INDEX_UNAVAILABLE}", True, "index_unavailable"
        except Exception as exc:  # noqa: BLE001 - an environment bug must not kill the rollout
            text, error, code = (f"Error: {fn.__name__} failed: {type(exc).__name__}: {clean_text(no_paths(str(exc)), 300)}",
                                 True, "tool_failed")
        env._record(fn.__name__, args, given, text, error, hits, time.perf_counter() - t0, code)
        return text

    return wrapper


def _bound(signature: inspect.Signature, env, args: tuple, call: dict) -> dict | None:
    """A call's arguments by name with the defaults filled in (``read_page(pid)`` = ``read_page(paper_id=pid,
    page=1)``); None when they do not bind (validation reports that)."""
    try:
        bound = signature.bind(env, *args, **call)
    except TypeError:
        return None
    bound.apply_defaults()
    return {k: v for k, v in bound.arguments.items() if k != "self"}


def _clean_arg(value, depth: int = 0):
    """Model text made valid (surrogates, NUL) before validation; sizes are checked by the tools. Lists
    are cleaned two levels deep (no tool takes more; validation refuses deeper ones, however deep)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list) and depth < 2:
        return [_clean_arg(v, depth + 1) for v in value[:1000]]
    return value


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """One worker pool for the parallel tool calls of every environment in the process (TRL makes
    one environment per rollout)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="arxivqa-tools")
        return _POOL


class ArxivEnv:
    """Tools over one search index, one episode at a time (see module docstring)."""

    def __init__(self, index: SearchIndex | None = None, index_name: str | None = None, seed: int | None = None,
                 result_cap: int | None = None, abstract_chars: int = ABSTRACT_CHARS,
                 snippet_chars: int = SNIPPET_CHARS, max_snippets: int = MAX_SNIPPETS,
                 refuse_repeats: bool = True) -> None:
        """``result_cap`` (at most this many hits per search, whatever the agent asks), ``abstract_chars``,
        ``snippet_chars`` and ``max_snippets`` shrink what a search shows (0 abstract characters / 0
        snippets: titles only): training on a CPU uses a compact view because tool output counts
        against the completion budget."""
        self._index = index
        self._result_cap, self._abstract_chars = result_cap, abstract_chars
        self._snippet_chars, self._max_snippets = snippet_chars, max_snippets
        self._refuse_repeats = refuse_repeats
        self._index_name = index_name
        self._rng_seed = seed
        self._lock = threading.Lock()
        self._turn: int | None = None
        self._episode_no = 0
        self.reset()

    # -- episode -----------------------------------------------------------------------

    def reset(self, **row) -> str | None:
        """Start a new episode (TRL passes the dataset row's columns)."""
        self._episode_no += 1
        if self._rng_seed is None:
            salt = secrets.token_bytes(16)
        else:
            salt = hashlib.sha256(f"{self._rng_seed}:{self._episode_no}".encode()).digest()
        self._salt = salt
        self.episode = Episode(row=row)
        self._answered: set[str] = set()  # keys of the searches and reads this episode answered
        return None

    @property
    def index(self) -> SearchIndex:
        if self._index is None:
            self._index = open_index(self._index_name)
        return self._index

    def _opaque(self, arxiv_id: str) -> str:
        digest = hmac.new(self._salt, arxiv_id.encode(), hashlib.sha256).hexdigest()
        for width in range(8, len(digest) + 1, 2):
            oid = f"P-{digest[:width]}"
            with self._lock:
                owner = self.episode.id_map.setdefault(oid, arxiv_id)
            if owner == arxiv_id:
                return oid
        raise RuntimeError("opaque ID space exhausted")  # unreachable in practice

    def _resolve(self, opaque_id: str) -> str:
        oid = opaque_id.strip()
        real = self.episode.id_map.get(oid)
        if real is None:
            if not oid.startswith("P-"):
                raise ToolError(f"{echo(opaque_id, 40)} is not a paper ID of this session; use the IDs (they start with P-) that search results show", "unknown_id")
            raise ToolError(f"unknown paper ID {echo(opaque_id, 40)}; use an ID from a search result of this session", "unknown_id")
        return real

    def _record(self, name, args, kwargs, text, error, hits, seconds, code: str = "") -> None:
        arguments = dict(kwargs)
        if args:
            arguments["_positional"] = list(args)
        rec = ToolCallRecord(turn=self._turn, name=name, arguments=arguments, result=text, error=error,
                             error_code=code, hits=list(hits), seconds=seconds)
        local = getattr(_THREAD, "records", None)
        if local is not None:
            local.append(rec)
            return
        with self._lock:
            rec.index = len(self.episode.calls)
            self.episode.calls.append(rec)

    # -- shared checks -----------------------------------------------------------------

    def _check_repeat(self, name: str, arguments: dict | None) -> str | None:
        """Refuse (``refuse_repeats``) a search or read that repeats one this episode already answered: the
        same tool and the same arguments (defaults filled in, ``max_results`` aside: the view caps the hits
        anyway). A small policy that sees its own call and its result in the context tends to copy the
        call again, turn after turn; the refusal tells it so. The refused call is still recorded, so the
        duplication gate of the RLVR reward sees it as before. Returns the call's key (None: not checked)."""
        if not self._refuse_repeats or name == "finish" or arguments is None:
            return None
        key = call_key(name, {k: v for k, v in arguments.items() if k != "max_results"})
        with self._lock:
            seen = key in self._answered
        if seen:
            what = "search" if name in SEARCH_TOOLS else "page"
            raise ToolError(f"this session already ran this exact {name} call; its results are above. "
                            f"Try a different {what}, or call finish with the best IDs found so far",
                            "repeated_call")
        return key

    def _check_open(self) -> None:
        if self.episode.finished:
            raise ToolError(FINISHED, "finished")

    @staticmethod
    def _check_query(query: str) -> str:
        q = " ".join(query.split())
        if not q:
            raise ToolError("the query is empty; give a few descriptive words", "empty_query")
        if len(q) > MAX_QUERY_CHARS:
            raise ToolError(f"the query is {len(q)} characters long; the limit is {MAX_QUERY_CHARS}", "query_too_long")
        return q

    def _check_k(self, max_results: int) -> int:
        if not 1 <= max_results <= MAX_RESULTS_CAP:
            raise ToolError(f"max_results must be between 1 and {MAX_RESULTS_CAP}, got {echo(max_results, 40)}", "bad_arguments")
        return min(max_results, self._result_cap or max_results)

    @staticmethod
    def _check_date(min_date: str | None) -> int | None:
        if min_date is None or not str(min_date).strip():
            return None
        try:
            return date_int(dt.date.fromisoformat(str(min_date).strip()))
        except ValueError:
            raise ToolError(f"min_date must be a date like 2025-01-31, got {echo(min_date, 40)}", "bad_date") from None

    def _format_hits(self, kind: str, query: str, found: list[IndexHit], body) -> tuple[str, list[Hit]]:
        """The hits as records, and the text the agent reads, rendered from them."""
        papers = self.index.docs.get_many([h.arxiv_id for h in found])
        hits, lines = [], []
        for h in found:
            p = papers.get(h.arxiv_id)
            if p is None:  # in an engine but not in the store: an inconsistent index, skip the hit
                continue
            hit = Hit(arxiv_id=p.arxiv_id, id=self._opaque(p.arxiv_id), title=p.title,
                      published=p.published.isoformat(), rank=len(hits) + 1)
            hits.append(hit)
            lines.append(f"[{hit.rank}] id: {hit.id} | published: {hit.published} | title: {hit.title}")
            lines.extend("    " + piece for piece in body(p))
        if not hits:
            return f"No papers found for {json.dumps(query)} ({kind} search).", []
        return "\n".join([f"{len(hits)} papers for {json.dumps(query)} ({kind} search):", *lines]), hits

    # -- tools (public methods: TRL exposes each one to the model) ----------------------

    @_tool
    def keyword_search(self, query: str, max_results: int = 10, min_date: str | None = None) -> str:
        """Search arXiv papers by keywords (BM25 over titles and abstracts); returns paper IDs, dates, titles and matching snippets.

        Args:
            query: Keywords to look for, e.g. "sparse attention long context".
            max_results: How many papers to return (1-50).
            min_date: Only papers published on or after this date, as YYYY-MM-DD.
        """
        self._check_open()
        q, k, since = self._check_query(query), self._check_k(max_results), self._check_date(min_date)
        hits, terms = self.index.keyword_search(q, k, since)
        analyzer = self.index.analyzer
        return self._format_hits(
            "keyword", q, hits,
            lambda p: [f"snippet: {s}" for s in snippets(p.text.replace("\n", ". "), terms, analyzer, self._max_snippets,
                                                             self._snippet_chars)] if self._max_snippets > 0 else [],
        )

    @_tool
    def semantic_search(self, query: str, max_results: int = 10, min_date: str | None = None) -> str:
        """Search arXiv papers by meaning (embedding similarity of abstracts); returns paper IDs, dates, titles and abstracts.

        Args:
            query: A description of the papers wanted, in natural language.
            max_results: How many papers to return (1-50).
            min_date: Only papers published on or after this date, as YYYY-MM-DD.
        """
        self._check_open()
        q, k, since = self._check_query(query), self._check_k(max_results), self._check_date(min_date)
        hits = self.index.semantic_search(q, k, since)

        def body(p):
            a = p.abstract
            n = self._abstract_chars
            if n <= 0:  # a titles-only view
                return []
            return ["abstract: " + (a if len(a) <= n else a[:n].rsplit(" ", 1)[0] + " …")]

        return self._format_hits("semantic", q, hits, body)

    @_tool
    def read_page(self, paper_id: str, page: int = 1) -> str:
        """Read a paper's text (title, authors, date, categories, abstract, comment), one page of about 2,000 characters at a time.

        Args:
            paper_id: The ID of a paper, exactly as a search result of this session showed it.
            page: Page number, starting at 1.
        """
        self._check_open()
        real = self._resolve(paper_id)
        paper = self.index.docs.get(real)
        if paper is None:
            raise ToolError(f"paper '{paper_id}' has no text in the index", "unknown_id")
        text = paper.page_text()
        pages = [text[i : i + PAGE_CHARS] for i in range(0, len(text), PAGE_CHARS)] or [""]
        if not 1 <= page <= len(pages):
            raise ToolError(f"page must be between 1 and {len(pages)} for paper '{paper_id}', got {echo(page, 40)}", "bad_page")
        header = f"Paper {paper_id.strip()} — page {page} of {len(pages)}\n"
        hit = Hit(arxiv_id=real, id=paper_id.strip(), title=paper.title, published=paper.published.isoformat())
        return header + pages[page - 1], [hit]

    @_tool
    def finish(self, paper_ids: list[str]) -> str:
        """Submit the final answer: the IDs of the most relevant papers, best first (at most 10). Ends the episode.

        Args:
            paper_ids: IDs of papers, exactly as search results of this session showed them.
        """
        self._check_open()
        ids = list(dict.fromkeys(i.strip() for i in paper_ids))
        if len(ids) > MAX_SUBMIT:
            raise ToolError(f"at most {MAX_SUBMIT} paper IDs can be submitted, got {len(ids)}", "too_many_ids")
        unknown = [i for i in ids if i not in self.episode.id_map]
        if unknown:
            shown = ", ".join(echo(i, 40) for i in unknown[:3]) + (" and more" if len(unknown) > 3 else "")
            raise ToolError(f"unknown paper IDs {shown}; submit only IDs shown by search results of this session", "unknown_id")
        real = [self.episode.id_map[i] for i in ids]
        with self._lock:
            self.episode.submitted, self.episode.submitted_opaque = real, ids
        return f"Submitted {len(ids)} papers. {EPISODE_OVER}", []

    # -- dispatch (the agent loop's entry points) --------------------------------------

    def _call(self, name: Any, arguments: Any) -> str:
        """Run one tool call given by name and a JSON object of arguments (a dict or a JSON string).
        Never raises: every problem becomes an ``Error:`` result, recorded like any call."""
        def refuse(text: str, code: str) -> str:
            self._record(clean_text(name, 64), (), {"_raw": arguments}, text, True, [], 0.0, code)
            return text

        try:
            if not isinstance(name, str) or name not in TOOL_NAMES:
                return refuse(f"Error: unknown tool {echo(name, 40)}; available tools: {', '.join(TOOL_NAMES)}", "unknown_tool")
            if isinstance(arguments, str):
                if len(arguments) > MAX_ARGUMENT_CHARS:
                    return refuse(f"Error: arguments for {name} are {len(arguments)} characters long; "
                                  f"the limit is {MAX_ARGUMENT_CHARS}", "arguments_too_long")
                try:
                    arguments = json.loads(arguments) if arguments.strip() else {}
                except (ValueError, RecursionError) as exc:
                    reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
                    return refuse(f"Error: arguments for {name} are not valid JSON ({reason}); send a JSON object", "bad_json")
            if not isinstance(arguments, dict):
                return refuse(f"Error: arguments for {name} must be a JSON object, got {type(arguments).__name__}", "bad_arguments")
            return getattr(self, name)(**{str(k): v for k, v in arguments.items()})
        except Exception as exc:  # noqa: BLE001 - the boundary: one bad call never ends the episode
            return refuse(f"Error: {clean_text(name, 64)} failed: {type(exc).__name__}: {clean_text(no_paths(str(exc)), 200)}",
                          "tool_failed")

    def _run_parallel(self, calls: list[tuple[str, Any]], turn: int | None = None) -> list[str]:
        """Run one turn's tool calls concurrently; results keep the call order."""
        return [text for text, _ in self._run_batch(calls, turn)]

    def _run_batch(self, calls: list[tuple[str, Any]], turn: int | None = None) -> list[tuple[str, ToolCallRecord]]:
        """Run one turn's calls: the searches concurrently, then any ``finish`` (so it can submit IDs
        that the same turn's searches showed). Returns (result, record) per call in call order; the
        episode records them in execution order."""
        self._turn = turn
        searches = [i for i, (n, _) in enumerate(calls) if n != "finish"]
        finishes = [i for i, (n, _) in enumerate(calls) if n == "finish"]
        done: dict[int, tuple[str, list[ToolCallRecord]]] = {}
        if len(searches) > 1:
            futures = {i: _pool().submit(self._isolated_call, *calls[i]) for i in searches}
            done = {i: f.result() for i, f in futures.items()}
        else:
            done = {i: self._isolated_call(*calls[i]) for i in searches}
        for i in searches + finishes:
            if i not in done:
                done[i] = self._isolated_call(*calls[i])
            with self._lock:
                for rec in done[i][1]:
                    rec.index = len(self.episode.calls)
                    self.episode.calls.append(rec)
        return [(done[i][0], done[i][1][-1]) for i in range(len(calls))]

    def _isolated_call(self, name: Any, arguments: Any) -> tuple[str, list[ToolCallRecord]]:
        _THREAD.records = []
        try:
            text = self._call(name, arguments)
            if not _THREAD.records:  # defensive: every call leaves a record
                self._record(clean_text(name, 64), (), {"_raw": arguments}, text, True, [], 0.0, "tool_failed")
            return text, _THREAD.records
        finally:
            _THREAD.records = None


class CompactArxivEnv(ArxivEnv):
    """The same tools with terse schemas (the ``tool_schemas="compact"`` view of a run): one required
    argument each, one-line descriptions. Qwen2.5's template renders ``ArxivEnv``'s four schemas as 652
    prompt tokens; every rollout carries them in each turn's prefill, the reference pass, the loss forward
    and the backward, so on a CPU they cost time in proportion. What a call returns is unchanged;
    ``max_results`` / ``min_date`` / ``page`` are gone (a search shows the view's ``result_cap`` hits, a
    read the first page) and, if a model still sends them, are ignored with a note like any unknown
    argument."""

    @_tool
    def keyword_search(self, query: str) -> str:
        """Keyword (BM25) search; returns matching papers.

        Args:
            query: search terms
        """
        return ArxivEnv.keyword_search.__wrapped__(self, query)

    @_tool
    def semantic_search(self, query: str) -> str:
        """Search by meaning (embeddings); returns matching papers.

        Args:
            query: a description of the papers wanted
        """
        return ArxivEnv.semantic_search.__wrapped__(self, query)

    @_tool
    def read_page(self, paper_id: str) -> str:
        """Read a paper's text.

        Args:
            paper_id: a paper ID shown by a search
        """
        return ArxivEnv.read_page.__wrapped__(self, paper_id)

    @_tool
    def finish(self, paper_ids: list[str]) -> str:
        """Submit up to 10 paper IDs, best first; ends the task.

        Args:
            paper_ids: paper IDs shown by searches
        """
        return ArxivEnv.finish.__wrapped__(self, paper_ids)


ENVIRONMENTS: dict[str, type[ArxivEnv]] = {"full": ArxivEnv, "compact": CompactArxivEnv}


def make_env(index: SearchIndex | None = None, schemas: str = "full", **kwargs: Any) -> ArxivEnv:
    """An environment with the tool schemas ``schemas`` ("full": ``ArxivEnv``, "compact":
    ``CompactArxivEnv``); ``kwargs`` go to ``ArxivEnv`` (a run's ``train.tool_view`` gives both)."""
    if schemas not in ENVIRONMENTS:
        raise ValueError(f"unknown tool schemas {schemas!r}; choose one of {sorted(ENVIRONMENTS)}")
    return ENVIRONMENTS[schemas](index, **kwargs)


_THREAD = threading.local()  # a worker of _run_parallel collects its records here
