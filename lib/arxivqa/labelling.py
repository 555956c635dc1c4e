"""Labelling: the deep-research labeller, difficulty triage, and the label store with history.

The seed bootstraps gold labels with a deep-research labeller and then re-curates almost every query by
hand. Both halves live here.

**Labeller** (``Labeller.label``), per query:

1. *plan*: the LLM writes sub-queries (different angles on the query); the query itself is always one;
2. *search subagents*: every sub-query runs ``keyword_search`` and ``semantic_search`` over the tools
   environment, all calls in parallel; the result lists are fused by reciprocal rank (RRF);
3. *read*: the top candidates are read with ``read_page`` (what the agent would read);
4. *judge*: one structured verdict per candidate (relevant?, score 0–3, a one-sentence reason), at most
   ``endpoint.concurrency`` LLM calls in flight;
5. *propose*: relevant candidates (score ≥ ``min_score``), best first, at most 10, each with its reason
   and the sub-queries that found it (the evidence).

Runs are appended to a JSONL file (rewritten atomically) and a rerun skips queries already there, so a
query file can be labelled in several sittings; the LLM layer's cache makes repeated calls free.

**Label store** (``LabelStore``): one JSON file; per query the original gold and an append-only history
of events (source ``original`` / ``labeller`` / ``human``, time, reason). The current labels are the
original gold, plus human accepts/adds, minus human rejects/removes; labeller proposals stay *pending*
until a person decides. Every change re-reads the file under a lock, appends, and writes atomically
(temporary file + rename): a crash mid-write leaves the previous file, and a labeller rerun only adds a
``propose`` event, so nothing a person curated is lost. Reads are never stale: ``queries`` re-reads
the file (under the lock) whenever it changed on disk, and ``export`` always re-reads under the lock.
``export`` writes the query-file format the trainer and ``arxivqa.evaluate`` read.

After every successful write the same content goes to ``labels.json.bak`` (the last good copy). A
``labels.json`` that cannot be read (truncated, empty, not the store's format) is a ``LabelStoreError``
naming the file, what is wrong, and the recovery command ``python -m arxivqa.labelling restore
[--store FILE]`` (the broken file is kept as ``labels.json.corrupt-<time>``, the last good copy put back).
Temporary files orphaned by a killed writer are removed at the next write.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd
from pydantic import BaseModel, Field, field_validator

from .config import settings
from .corpus import Difficulty, Query
from .evaluate import rrf
from .files import atomic_write_bytes, atomic_write_json, atomic_write_text
from .llm import LLM, LLMError
from .records import content_words
from .tools import ArxivEnv


def labels_dir() -> Path:
    """Where the label store and the labeller's runs live (setting ``labels_dir``)."""
    return settings().labels_dir


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- structured outputs

PLAN_PROMPT = """You plan a literature search over arXiv AI papers for this research query:
{query}

Write {n} different search queries for it (3-8 words each), each from another angle: the key method, another name for it, a sub-problem, an application. Answer with JSON only: {{"sub_queries": ["...", "..."]}}"""

VERDICT_PROMPT = """Is this paper relevant to the research query?
Research query: {query}

Paper:
{page}

Score 0 = unrelated, 1 = same area but not what the query asks, 2 = relevant, 3 = exactly what the query asks. Answer with JSON only, the reason in one short sentence: {{"score": 0-3, "relevant": true or false, "reason": "..."}}"""

TRIAGE_PROMPT = """Rate how hard it is to find the papers that answer this research query with a search engine over arXiv.
easy: one clear topic, standard terms. medium: several aspects or less common terms. hard: vague, multi-part, or needs specific papers that are hard to name.
Research query: {query}

Answer with JSON: {{"difficulty": "easy" | "medium" | "hard", "reason": "one sentence"}}"""


def _topic_words(text: str) -> set[str]:
    """Content words (``records.content_words``) of 3+ characters, with a crude plural strip."""
    return {w.rstrip("s") for w in content_words(text) if len(w) >= 3}


class Plan(BaseModel):
    sub_queries: list[str] = Field(min_length=1, max_length=10)

    @field_validator("sub_queries")
    @classmethod
    def _non_empty(cls, v: list[str]) -> list[str]:
        v = [" ".join(str(q).split()) for q in v if str(q).strip()]
        if not v:
            raise ValueError("at least one non-empty sub-query is needed")
        return v


class Verdict(BaseModel):
    score: int = Field(ge=0, le=3)
    relevant: bool
    reason: str = ""


class Triage(BaseModel):
    difficulty: Difficulty
    reason: str = ""


# --------------------------------------------------------------------------- the labeller


class Candidate(BaseModel):
    arxiv_id: str
    title: str = ""
    rank: int  # position after RRF fusion, from 1
    found_by: list[str] = Field(default_factory=list, description="'<tool>: <sub-query>' that returned it")
    verdict: Verdict | None = None
    error: str | None = None


class LabellerRun(BaseModel):
    qid: str
    query: str
    difficulty: str | None = None
    gold_in_corpus: list[str] = Field(default_factory=list)
    endpoint: str
    sub_queries: list[str] = Field(default_factory=list)
    candidates: list[Candidate] = Field(default_factory=list)
    proposed: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    llm_calls: int = 0
    llm_failures: int = 0
    seconds: float = 0.0
    time: str = Field(default_factory=_now)

    def reasons(self) -> dict[str, str]:
        return {c.arxiv_id: c.verdict.reason for c in self.candidates if c.verdict is not None}


@dataclass
class LabellerConfig:
    n_sub_queries: int = 3  # planned by the LLM, besides the query itself
    per_search: int = 10  # results per search call
    n_candidates: int = 8  # read and judged per query
    page_chars: int = 800  # of read_page's text shown to the judge (title, date, start of the abstract)
    min_score: int = 2  # a candidate is proposed when relevant and score >= this
    max_proposals: int = 10
    plan_tokens: int = 160
    verdict_tokens: int = 128


class Labeller:
    """Deep-research labelling with one LLM endpoint over one search index."""

    def __init__(self, llm: LLM, index, config: LabellerConfig | None = None) -> None:
        self.llm, self.index, self.config = llm, index, config or LabellerConfig()

    def plan(self, query: str) -> tuple[list[str], str | None]:
        c = self.config
        msgs = [{"role": "user", "content": PLAN_PROMPT.format(query=query, n=c.n_sub_queries)}]
        subs, error = [query], None
        try:
            planned = self.llm.structured(msgs, Plan, max_tokens=c.plan_tokens).sub_queries
        except LLMError as exc:
            planned, error = [], f"plan: {exc}"
        seen, topic = {query.lower()}, _topic_words(query)
        dropped = []
        for q in planned:
            if q.lower() in seen or len(subs) > c.n_sub_queries:
                continue
            if not _topic_words(q) & topic:  # shares no content word with the query: off topic or a
                dropped.append(q)  # copied template; small models do both
                continue
            seen.add(q.lower())
            subs.append(q)
        if dropped and error is None:
            error = f"plan: dropped {len(dropped)} sub-queries sharing no word with the query: {dropped}"[:300]
        return subs, error

    def search(self, env: ArxivEnv, sub_queries: Sequence[str]) -> list[Candidate]:
        """Every sub-query through both search tools at once; fused by RRF."""
        calls = [(tool, {"query": q, "max_results": self.config.per_search})
                 for q in sub_queries for tool in ("keyword_search", "semantic_search")]
        batch = env._run_batch(calls)
        rankings, found_by = [], {}
        for (tool, args), (_text, rec) in zip(calls, batch):
            rankings.append(rec.result_ids)
            for pid in rec.result_ids:
                found_by.setdefault(pid, []).append(f"{tool}: {args['query']}")
        fused = rrf(rankings)[: self.config.n_candidates]
        papers = self.index.docs.get_many(fused)
        return [Candidate(arxiv_id=pid, title=papers[pid].title if pid in papers else "", rank=i + 1,
                          found_by=found_by.get(pid, [])) for i, pid in enumerate(fused)]

    def read(self, env: ArxivEnv, candidates: Sequence[Candidate]) -> list[str]:
        opaque = {real: oid for oid, real in env.episode.id_map.items()}
        batch = env._run_batch([("read_page", {"paper_id": opaque[c.arxiv_id]}) for c in candidates])
        return [text[: self.config.page_chars] for text, _rec in batch]

    def judge(self, query: str, candidates: Sequence[Candidate], pages: Sequence[str], desc: str | None = None) -> None:
        reqs = [([{"role": "user", "content": VERDICT_PROMPT.format(query=query, page=page)}], Verdict)
                for page in pages]
        for cand, out in zip(candidates, self.llm.map(reqs, desc=desc, max_tokens=self.config.verdict_tokens)):
            if isinstance(out, LLMError):
                cand.error = str(out)
            else:
                cand.verdict = out

    def label(self, query: Query) -> LabellerRun:
        t0 = time.perf_counter()
        calls0, fails0 = self.llm.stats.calls, self.llm.stats.failures
        run = LabellerRun(qid=query.qid, query=query.query, difficulty=query.difficulty,
                          gold_in_corpus=query.gold_in_corpus, endpoint=self.llm.endpoint.name)
        run.sub_queries, error = self.plan(query.query)
        if error:
            run.errors.append(error)
        env = ArxivEnv(self.index)
        run.candidates = self.search(env, run.sub_queries)
        if run.candidates:
            self.judge(query.query, run.candidates, self.read(env, run.candidates))
        ok = [c for c in run.candidates if c.verdict and c.verdict.relevant and c.verdict.score >= self.config.min_score]
        ok.sort(key=lambda c: (-c.verdict.score, c.rank))
        run.proposed = [c.arxiv_id for c in ok[: self.config.max_proposals]]
        run.errors += [f"{c.arxiv_id}: {c.error}" for c in run.candidates if c.error]
        run.llm_calls = self.llm.stats.calls - calls0
        run.llm_failures = self.llm.stats.failures - fails0
        run.seconds = time.perf_counter() - t0
        return run

    def run(self, queries: Sequence[Query], out: str | Path, store: LabelStore | None = None,
            progress: bool = True) -> list[LabellerRun]:
        """Label ``queries``, resuming from ``out`` (runs already there are kept and skipped); each
        finished query is written at once (atomically) and, with ``store``, recorded as a proposal."""
        from tqdm.auto import tqdm

        out = Path(out)
        runs = load_runs(out) if out.exists() else []
        done = {r.qid for r in runs if r.endpoint == self.llm.endpoint.name}
        todo = [q for q in queries if q.qid not in done]
        for q in tqdm(todo, desc="labelling", disable=not progress):
            run = self.label(q)
            runs.append(run)
            save_runs(out, runs)
            if store is not None:
                store.propose(run)
        wanted = {q.qid for q in queries}
        return [r for r in runs if r.qid in wanted and r.endpoint == self.llm.endpoint.name]


def save_runs(path: str | Path, runs: Sequence[LabellerRun]) -> None:
    atomic_write_text(path, "".join(r.model_dump_json() + "\n" for r in runs))


def load_runs(path: str | Path) -> list[LabellerRun]:
    with open(path, encoding="utf-8") as fh:
        return [LabellerRun.model_validate_json(line) for line in fh if line.strip()]


# --------------------------------------------------------------------------- agreement and triage


def agreement(runs: Sequence[LabellerRun]) -> pd.DataFrame:
    """Per query: the labeller's proposals against the given gold (``gold_in_corpus``). ``candidate_recall``
    is the share of gold its searches surfaced at all (so search misses and judging misses separate)."""
    rows = []
    for r in runs:
        gold, prop = set(r.gold_in_corpus), set(r.proposed)
        cands = {c.arxiv_id for c in r.candidates}
        hit = len(gold & prop)
        rows.append({"qid": r.qid, "difficulty": r.difficulty or "unlabelled", "n_gold": len(gold),
                     "n_candidates": len(cands), "n_proposed": len(prop), "hits": hit,
                     "precision": hit / len(prop) if prop else float("nan"),
                     "recall": hit / len(gold) if gold else float("nan"),
                     "candidate_recall": len(gold & cands) / len(gold) if gold else float("nan"),
                     "judged_relevant_share": (sum(bool(c.verdict and c.verdict.relevant) for c in r.candidates)
                                               / len(cands)) if cands else float("nan"),
                     "llm_failures": r.llm_failures, "seconds": r.seconds})
    return pd.DataFrame(rows)


def agreement_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Means per difficulty and overall (precision over queries with ≥1 proposal, recall over queries with gold)."""
    metrics = ["precision", "recall", "candidate_recall", "judged_relevant_share", "n_proposed", "seconds"]
    groups = [("all", frame)] + [(d, g) for d, g in frame.groupby("difficulty", sort=False)]
    rows = [{"difficulty": name, "n": len(g), **{m: g[m].mean() for m in metrics}} for name, g in groups]
    return pd.DataFrame(rows)


def triage(llm: LLM, queries: Sequence[Query], desc: str | None = None) -> pd.DataFrame:
    """The LLM's easy/medium/hard rating of each query, next to the given difficulty where there is one."""
    reqs = [([{"role": "user", "content": TRIAGE_PROMPT.format(query=q.query)}], Triage) for q in queries]
    rows = []
    for q, out in zip(queries, llm.map(reqs, desc=desc, max_tokens=96)):
        ok = not isinstance(out, LLMError)
        rows.append({"qid": q.qid, "query": q.query, "given": q.difficulty,
                     "predicted": out.difficulty if ok else None, "reason": out.reason if ok else str(out)})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- the label store

Source = Literal["original", "labeller", "human"]
Action = Literal["gold", "propose", "accept", "reject", "add", "remove", "difficulty"]
_INCLUDE, _EXCLUDE = {"accept", "add"}, {"reject", "remove"}


class LabelEvent(BaseModel):
    time: str = Field(default_factory=_now)
    source: Source
    action: Action
    ids: list[str] = Field(default_factory=list)
    reason: str = ""
    by: str = ""  # the endpoint for the labeller, the person for a human
    difficulty: Difficulty | None = None
    reasons: dict[str, str] = Field(default_factory=dict, description="per-ID reasons (labeller proposals)")


class QueryLabels(BaseModel):
    qid: str
    query: str
    reference_answer: str | None = None
    difficulty: Difficulty | None = None  # as given
    gold_in_corpus: list[str] = Field(default_factory=list)  # as given
    history: list[LabelEvent] = Field(default_factory=list)

    def original(self) -> list[str]:
        return next((e.ids for e in self.history if e.action == "gold"), [])

    def labels(self, include_pending: bool = False) -> list[str]:
        """The current gold: original, + human accept/add, − human reject/remove (in history order)."""
        out = list(self.original())
        for e in self.history:
            if e.source != "human":
                continue
            if e.action in _INCLUDE:
                out += [i for i in e.ids if i not in out]
            elif e.action in _EXCLUDE:
                out = [i for i in out if i not in e.ids]
        if include_pending:
            out += [i for i in self.pending() if i not in out]
        return out

    def decided(self) -> set[str]:
        return {i for e in self.history if e.source == "human" and e.action in _INCLUDE | _EXCLUDE for i in e.ids}

    def latest_proposal(self) -> LabelEvent | None:
        return next((e for e in reversed(self.history) if e.action == "propose"), None)

    def pending(self) -> list[str]:
        """The latest labeller proposals nobody has decided on yet (and not already labels)."""
        prop = self.latest_proposal()
        if prop is None:
            return []
        decided, current = self.decided(), set(self.labels())
        return [i for i in prop.ids if i not in decided and i not in current]

    def current_difficulty(self) -> Difficulty | None:
        human = [e.difficulty for e in self.history if e.action == "difficulty" and e.source == "human"]
        return human[-1] if human else self.difficulty

    def triaged_difficulty(self) -> Difficulty | None:
        auto = [e.difficulty for e in self.history if e.action == "difficulty" and e.source == "labeller"]
        return auto[-1] if auto else None

    def known_in_corpus(self) -> set[str]:
        """IDs known to be in the corpus: the original gold_in_corpus and every ID a tool returned."""
        return set(self.gold_in_corpus) | {i for e in self.history if e.action != "gold" for i in e.ids}


FORMAT = "arxivqa-labels/1"


class LabelStoreError(ValueError):
    """The label store's file cannot be read; the message names it and says how to recover."""


class LabelStore:
    """Labels with history in one JSON file; every change is locked, re-read, appended, written atomically."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else labels_dir() / "labels.json"
        self._queries: dict[str, QueryLabels] = {}
        self._seen: tuple | None = None  # (inode, mtime, size) of the file self._queries was read from
        self.refresh()

    @property
    def backup_path(self) -> Path:
        """The last good copy of the store, beside it."""
        return self.path.with_name(self.path.name + ".bak")

    @property
    def queries(self) -> dict[str, QueryLabels]:
        """The current labels: re-read (under the lock) whenever the file changed on disk since the last
        read, so a view never misses what another store object or process wrote."""
        if self._signature() != self._seen:
            self.refresh()
        return self._queries

    def refresh(self) -> dict[str, QueryLabels]:
        """Re-read the file under the lock."""
        with self._locked():
            self._queries, self._seen = self._read(), self._signature()
        return self._queries

    @classmethod
    def open(cls, path: str | Path | None = None, queries: Iterable[Query] = ()) -> LabelStore:
        """Open (or create) the store; queries not in it yet are added with their original gold."""
        store = cls(path)
        new = {}
        for q in queries:
            if q.qid not in store.queries:
                ev = LabelEvent(source="original", action="gold", ids=list(q.gold or q.gold_in_corpus),
                                reason="as given in the query file", by=q.source or "")
                new[q.qid] = QueryLabels(qid=q.qid, query=q.query, reference_answer=q.reference_answer,
                                         difficulty=q.difficulty, gold_in_corpus=list(q.gold_in_corpus),
                                         history=[ev])
        if new:
            store._commit(new_queries=new)
        return store

    # -- reading and writing ---------------------------------------------------------------

    def _signature(self) -> tuple | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    @staticmethod
    def parse(path: Path) -> dict[str, QueryLabels]:
        """The queries of a store file; ``LabelStoreError`` (a ValueError) naming the file and the problem."""
        try:
            text = path.read_text(encoding="utf-8")
            if not text.strip():
                raise ValueError("the file is empty")
            data = json.loads(text)
            if not isinstance(data, dict) or not isinstance(data.get("queries"), dict):
                raise ValueError("not a label store: expected a JSON object whose 'queries' is an object "
                                 f"(format {FORMAT})")
            out = {}
            for qid, v in data["queries"].items():
                try:
                    out[qid] = QueryLabels.model_validate(v)
                except ValueError as exc:
                    raise ValueError(f"query {qid!r} is not valid: {str(exc)[:300]}") from None
            return out
        except UnicodeDecodeError as exc:
            raise LabelStoreError(f"{path}: not UTF-8 text (byte {exc.start})") from None
        except json.JSONDecodeError as exc:
            raise LabelStoreError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}; "
                                  "truncated?)") from None
        except ValueError as exc:
            raise LabelStoreError(f"{path}: {exc}") from None

    def _read(self) -> dict[str, QueryLabels]:
        if not self.path.exists():
            return {}
        try:
            return self.parse(self.path)
        except LabelStoreError as exc:
            bak = self.backup_path
            try:
                good = self.parse(bak) if bak.exists() else None
            except LabelStoreError:
                good = None
            if good is not None:
                how = (f"the last good copy is {bak} ({len(good)} queries, "
                       f"{sum(len(q.history) for q in good.values())} events); restore it with: "
                       f"python -m arxivqa.labelling restore --store {self.path}")
            else:
                how = ("there is no readable backup beside it; restore the file from version control or "
                       "recreate the store")
            raise LabelStoreError(f"the label store cannot be read: {exc}. Nothing was changed; {how}") from None

    @classmethod
    def restore(cls, path: str | Path | None = None) -> tuple[bool, Path | None]:
        """Put the last good copy (``.bak``) back in place of a broken store file, which is kept as
        ``<name>.corrupt-<time>``. Returns (restored?, where the broken file went); a readable store is
        left alone: (False, None)."""
        store = cls.__new__(cls)  # not __init__: it would refuse the broken file
        store.path = Path(path) if path else labels_dir() / "labels.json"
        store._queries, store._seen = {}, None
        with store._locked():
            try:
                if store.path.exists():
                    cls.parse(store.path)
                    return False, None
            except LabelStoreError:
                pass
            if not store.backup_path.exists():
                raise LabelStoreError(f"{store.path}: no backup {store.backup_path} to restore from")
            cls.parse(store.backup_path)  # refuses a broken backup, naming it
            moved = None
            if store.path.exists():
                moved = store.path.with_name(f"{store.path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
                store.path.rename(moved)
            atomic_write_bytes(store.path, store.backup_path.read_bytes())
        return True, moved

    def _remove_orphans(self) -> None:
        """Temporary files of writers killed between writing and renaming (called under the lock)."""
        for p in self.path.parent.glob(f".{self.path.name}.*.tmp"):
            p.unlink(missing_ok=True)

    @contextlib.contextmanager
    def _locked(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _commit(self, events: Sequence[tuple[str, LabelEvent]] = (),
                new_queries: dict[str, QueryLabels] | None = None) -> None:
        """Re-read the file (another process may have written), apply, write atomically; the in-memory
        state changes only after the write succeeded."""
        with self._locked():
            state = self._read()
            for qid, ql in (new_queries or {}).items():
                state.setdefault(qid, ql)
            for qid, ev in events:
                if qid not in state:
                    raise KeyError(f"query {qid!r} is not in the label store {self.path}")
                state[qid] = state[qid].model_copy(update={"history": [*state[qid].history, ev]})
            payload = {"format": FORMAT, "updated": _now(),
                       "queries": {qid: ql.model_dump(mode="json") for qid, ql in state.items()}}
            self._remove_orphans()
            atomic_write_json(self.path, payload)
            self._queries, self._seen = state, self._signature()
            atomic_write_bytes(self.backup_path, self.path.read_bytes())  # the last good copy

    def record(self, qid: str, event: LabelEvent) -> None:
        self._commit([(qid, event)])

    # -- the operations ---------------------------------------------------------------------

    def propose(self, run: LabellerRun) -> None:
        reasons = run.reasons()
        self.record(run.qid, LabelEvent(source="labeller", action="propose", ids=run.proposed, by=run.endpoint,
                                        reason=f"{len(run.candidates)} candidates judged, {len(run.proposed)} proposed",
                                        reasons={i: reasons.get(i, "") for i in run.proposed}))

    def decide(self, qid: str, action: Literal["accept", "reject", "add", "remove"], ids: Sequence[str],
               reason: str = "", by: str = "human") -> None:
        if not ids:
            return
        self.record(qid, LabelEvent(source="human", action=action, ids=list(ids), reason=reason, by=by))

    def set_difficulty(self, qid: str, difficulty: Difficulty, reason: str = "", source: Source = "human",
                       by: str = "") -> None:
        self.record(qid, LabelEvent(source=source, action="difficulty", difficulty=difficulty, reason=reason, by=by))

    def export(self, path: str | Path, include_pending: bool = False,
               in_corpus: Callable[[str], bool] | None = None) -> list[Query]:
        """Write the current labels in the query-file format (``queries_train.jsonl``'s fields), as the
        file holds them now (re-read under the lock: another store object or process may have written)."""
        out = []
        for ql in self.refresh().values():
            gold = ql.labels(include_pending)
            known = ql.known_in_corpus()
            in_c = [i for i in gold if (in_corpus(i) if in_corpus else i in known)]
            out.append(Query(qid=ql.qid, query=ql.query, reference_answer=ql.reference_answer, gold=gold,
                             gold_in_corpus=in_c, difficulty=ql.current_difficulty(), source="arxivqa-label-store"))
        atomic_write_text(path, "".join(q.model_dump_json() + "\n" for q in out))
        return out


# --------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> None:
    """``python -m arxivqa.labelling run --split train --limit 10`` labels queries with the endpoint
    (default ``local``), records proposals in the label store, and writes the agreement with the given
    gold; ``export --out FILE`` writes the curated query file."""
    import argparse

    from .config import results_dir
    from .corpus import load_queries, select_queries
    from .index import open_index_spec
    from .llm import open_llm
    from .plots import save_table

    p = argparse.ArgumentParser(prog="python -m arxivqa.labelling", description=main.__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--queries", default=None, help="query file (default: the data folder's queries_train.jsonl)")
    r.add_argument("--split", choices=["train", "dev", "all"], default="train")
    r.add_argument("--limit", type=int, default=10)
    r.add_argument("--endpoint", default=None)
    r.add_argument("--index", default=None, help="index name or folder (default: the scale's index)")
    r.add_argument("--candidates", type=int, default=LabellerConfig.n_candidates)
    r.add_argument("--runs", default=None, help="runs file (default: data/labels/runs-<endpoint>.jsonl)")
    r.add_argument("--store", default=None)
    r.add_argument("--out", default=None, help="where the agreement tables go (default: results/labelling)")
    e = sub.add_parser("export")
    e.add_argument("--out", required=True)
    e.add_argument("--store", default=None)
    e.add_argument("--include-pending", action="store_true")
    rs = sub.add_parser("restore", help="put the last good copy (labels.json.bak) back in place of a broken store")
    rs.add_argument("--store", default=None)
    args = p.parse_args(argv)

    if args.cmd == "restore":
        restored, moved = LabelStore.restore(args.store)
        where = args.store or labels_dir() / "labels.json"
        print(f"restored {where} from its last good copy" + (f"; the broken file is kept as {moved}" if moved else "")
              if restored else f"{where} is readable; nothing to restore")
        return
    if args.cmd == "export":
        qs = LabelStore(args.store).export(args.out, include_pending=args.include_pending)
        print(f"wrote {len(qs)} queries to {args.out}")
        return
    from .llm import EndpointUnreachable

    try:  # one reachability check before anything starts
        llm = open_llm(args.endpoint, chosen_by="--endpoint (default ARXIVQA_LLM)")
    except EndpointUnreachable as exc:
        raise SystemExit(f"error: {exc}") from None
    queries = select_queries(args.queries, args.split, args.limit).queries
    index = open_index_spec(args.index)
    store = LabelStore.open(args.store, load_queries(args.queries))
    with llm:
        runs_path = Path(args.runs or labels_dir() / f"runs-{llm.endpoint.name}.jsonl")
        labeller = Labeller(llm, index, LabellerConfig(n_candidates=args.candidates))
        t0 = time.perf_counter()
        runs = labeller.run(queries, runs_path, store=store)
        wall = time.perf_counter() - t0
        stats = llm.stats.as_dict()
    out = Path(args.out) if args.out else results_dir() / "labelling"
    frame = agreement(runs)
    summary = agreement_summary(frame)
    save_table(frame, f"agreement-{llm.endpoint.name}-per-query", out)
    save_table(summary, f"agreement-{llm.endpoint.name}", out)
    atomic_write_json(out / f"agreement-{llm.endpoint.name}.json",
                      {"endpoint": llm.endpoint.name, "model": llm.endpoint.model, "queries": len(runs),
                       "wall_seconds_this_run": wall, "llm": stats, "summary": summary.to_dict("records")})
    print(summary.to_string(index=False))


if __name__ == "__main__":
    main()
