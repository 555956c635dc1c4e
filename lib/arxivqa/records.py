"""The vocabulary of an episode: one record per thing, and the measures derived from them, defined once.

Everything downstream of the tools (the agent loop, the trainer's rollout rebuild, rewards, the judge,
diagnostics, evaluation, notebooks) speaks these types and imports them from here; this module loads
no model and imports nothing heavier than pydantic.

- ``Hit``: a paper a tool result showed (its opaque ID in the episode, the real arXiv ID, title, date,
  rank). Tools build their text output *from* hits; nobody parses tool text back.
- ``ToolCall`` (what the model asked for), ``ToolCallRecord`` (what ran: arguments, text result, error
  flag, hits, seconds), ``AssistantTurn`` (one generation), ``Step`` (a turn and its results),
  ``Trajectory`` (an episode), ``Budgets`` (its limits), ``ContextTrim`` (what the context budget trimmed).
- Measures: ``words`` / ``content_words`` (the one tokeniser), ``jaccard``, ``search_queries``,
  ``recall_at_k``, ``search_recall``, ``submission_recall``.
- ``trajectory_view`` (the one structured rendering) with two presentations: ``trajectory_markdown``
  for people (notebooks) and the judge's JSON document (``judge.render_for_judge`` serialises the view).
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

TOOL_NAMES = ("keyword_search", "semantic_search", "read_page", "finish")
SEARCH_TOOLS = ("keyword_search", "semantic_search")
MAX_SUBMIT = 10
# What a record keeps of model-written values: strings cut, containers bounded, nesting flattened.
MAX_STORED_CHARS = 2000
MAX_STORED_ITEMS = 20
MAX_STORED_DEPTH = 4
ECHO_CHARS = 80


# --------------------------------------------------------------------------- text made safe to keep

_BAD_CHARS = re.compile(r"[\ud800-\udfff\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def clean_text(text: Any, max_chars: int | None = None) -> str:
    """``text`` as a valid, storable string: lone surrogates become U+FFFD, NUL and other control
    characters (but tab and newline) are dropped; cut to at most ``max_chars``, marker included (so
    cleaning again, as loading a saved record does, changes nothing)."""
    text = text if isinstance(text, str) else str(text)
    text = _BAD_CHARS.sub(lambda m: "\ufffd" if "\ud800" <= m.group() <= "\udfff" else "", text)
    if max_chars is not None and len(text) > max_chars:
        keep = max_chars
        for _ in range(2):  # the marker's length depends on how much it cuts
            keep = max(0, max_chars - len(f"… [{len(text) - keep} characters cut]"))
        text = text[:keep] + f"… [{len(text) - keep} characters cut]"
    return text


def clean_value(value: Any, max_chars: int = MAX_STORED_CHARS, depth: int = 0) -> Any:
    """A JSON-like value the policy wrote, bounded for storage: strings cleaned and cut, at most
    ``MAX_STORED_ITEMS`` items per container, nesting deeper than ``MAX_STORED_DEPTH`` kept as text."""
    if isinstance(value, str):
        return clean_text(value, max_chars)
    if isinstance(value, int) and value.bit_length() > 3 * max_chars:  # too long to keep (or print) as a number
        return f"(an integer of {value.bit_length()} bits)"
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if depth >= MAX_STORED_DEPTH:
        try:
            text = json.dumps(value, default=str)
        except (ValueError, TypeError, RecursionError):  # TypeError: keys json cannot write (a tuple)
            text = "(nested too deep)"
        return clean_text(text, 200)
    # a cut container keeps MAX_STORED_ITEMS entries, its marker included: cleaning again changes nothing
    keep = MAX_STORED_ITEMS - 1
    if isinstance(value, dict):
        items = list(value.items())
        out = {clean_text(k, 100): clean_value(v, max_chars, depth + 1)
               for k, v in items[: keep if len(items) > MAX_STORED_ITEMS else MAX_STORED_ITEMS]}
        if len(items) > MAX_STORED_ITEMS:
            out["…"] = f"{len(items) - keep} more keys cut"
        return out
    if isinstance(value, (list, tuple)):
        items = list(value)
        out = [clean_value(v, max_chars, depth + 1)
               for v in items[: keep if len(items) > MAX_STORED_ITEMS else MAX_STORED_ITEMS]]
        if len(items) > MAX_STORED_ITEMS:
            out.append(f"… {len(items) - keep} more items cut")
        return out
    return clean_text(repr(value), max_chars)


def echo(value: Any, max_chars: int = ECHO_CHARS) -> str:
    """A short, safe quotation of model input for an error message (never the whole input)."""
    if not isinstance(value, str):
        try:
            value = json.dumps(clean_value(value, max_chars), ensure_ascii=False)
        except (ValueError, TypeError, RecursionError):
            value = type(value).__name__
    value = clean_text(value)
    return repr(value if len(value) <= max_chars else value[:max_chars] + "…")


@dataclass
class Budgets:
    """The limits of one episode."""

    max_turns: int = 10  # alphaXiv's sandbox: MAX_TURNS=10
    max_tool_calls: int = 30
    max_tokens: int = 6000  # completion tokens over the whole episode
    max_new_tokens: int = 384  # per assistant turn

    @classmethod
    def parse(cls, text: str | None) -> Budgets:
        """``"max_turns,max_tool_calls,max_tokens,max_new_tokens"`` (None or empty: the defaults)."""
        if not text:
            return cls()
        try:
            return cls(*[int(x) for x in text.split(",")])
        except (TypeError, ValueError) as exc:
            raise ValueError(f"budgets {text!r}: expected four integers "
                             "max_turns,max_tool_calls,max_tokens,max_new_tokens") from exc


# --------------------------------------------------------------------------- records


class Hit(BaseModel):
    """A paper shown by a tool result."""

    arxiv_id: str
    id: str = ""  # the opaque ID the agent saw
    title: str = ""
    published: str = ""
    rank: int = 0


class _Call(BaseModel):
    """A tool name and its arguments as the model wrote them, cleaned and bounded for storage."""

    name: str
    arguments: Any = Field(default_factory=dict)  # a dict, or the raw string when it was not JSON

    @field_validator("name", mode="before")
    @classmethod
    def _name(cls, v: Any) -> str:
        return clean_text(v, 64)

    @field_validator("arguments", mode="before")
    @classmethod
    def _arguments(cls, v: Any) -> Any:
        return clean_value(v)


class ToolCall(_Call):
    """A call the model asked for."""

    id: str = Field(default_factory=lambda: "call_" + uuid.uuid4().hex[:12])


class ToolCallRecord(_Call):
    """A call as it ran (or was refused): what the agent sent, the text it got back, the papers shown."""

    call_id: str = ""
    index: int = -1  # position in the episode's execution order
    turn: int | None = None
    result: str = ""
    error: bool = False
    error_code: str = ""  # the kind of error (set where it is raised), e.g. "unknown_id", "bad_json"
    hits: list[Hit] = Field(default_factory=list)
    seconds: float = 0.0

    @field_validator("result", mode="before")
    @classmethod
    def _result(cls, v: Any) -> str:
        return clean_text(v, 20000)

    @model_validator(mode="before")
    @classmethod
    def _legacy_ids(cls, data: Any) -> Any:  # records saved before hits existed carried result_ids only
        if isinstance(data, dict) and "result_ids" in data and "hits" not in data:
            data = {**data, "hits": [{"arxiv_id": i} for i in data.get("result_ids") or []]}
        return data

    @property
    def result_ids(self) -> list[str]:
        """The real arXiv IDs the result showed, in order."""
        return [h.arxiv_id for h in self.hits]

    @property
    def query(self) -> str | None:
        """The search query of a keyword/semantic search call (None for other tools or no query)."""
        if self.name in SEARCH_TOOLS and isinstance(self.arguments, dict):
            q = str(self.arguments.get("query") or "").strip()
            return q or None
        return None

    def arguments_text(self) -> str:
        """The arguments as the policy wrote them (a string, or its dict as JSON)."""
        a = self.arguments
        return a if isinstance(a, str) else json.dumps(a, ensure_ascii=False, default=str)


class _Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


class AssistantTurn(_Usage):
    text: str = ""  # reasoning / prose the model wrote (without the tool-call markup)
    raw: str = ""  # the model's raw output (local models) or content (API)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    parse_problems: list[str] = Field(default_factory=list)
    cached_prompt_tokens: int = 0  # of prompt_tokens, how many a KV cache held from the previous turn

    @field_validator("text", "raw", mode="before")
    @classmethod
    def _text(cls, v: Any) -> str:
        return clean_text(v, 50000)

    @field_validator("parse_problems", mode="before")
    @classmethod
    def _problems(cls, v: Any) -> list[str]:
        return [clean_text(p, 500) for p in v or []]


class ContextTrim(BaseModel):
    """What the context budget (``context.fit_context``) did to one turn's request: counts are cumulative
    over the episode (the oldest ``compacted`` tool results reduced to IDs and titles, the oldest
    ``dropped_turns`` turns removed), tokens as the policy counts them."""

    turn: int = 0
    budget: int = 0  # tokens the request may take (context window − max_new_tokens)
    tokens_before: int = 0  # the whole conversation
    tokens_after: int = 0  # what was sent
    compacted: int = 0
    dropped_turns: int = 0
    fits: bool = True

    @property
    def trimmed(self) -> bool:
        return bool(self.compacted or self.dropped_turns)


class Step(BaseModel):
    turn: int
    assistant: AssistantTurn
    results: list[ToolCallRecord] = Field(default_factory=list)


class Trajectory(_Usage):
    qid: str
    query: str
    difficulty: str | None = None
    gold_in_corpus: list[str] = Field(default_factory=list)
    policy: str
    steps: list[Step] = Field(default_factory=list)
    submitted: list[str] | None = None  # real arXiv IDs given to finish
    stop_reason: str = ""
    tool_seconds: float = 0.0
    generation_seconds: float = 0.0
    context_trims: list[ContextTrim] = Field(default_factory=list)  # the turns whose request was trimmed

    @field_validator("query", "stop_reason", mode="before")
    @classmethod
    def _text(cls, v: Any) -> str:
        return clean_text(v, 5000)

    @classmethod
    def start(cls, row: Any, policy: str, **fields: Any) -> Trajectory:
        """An empty trajectory for a query (a ``corpus.Query`` or a dataset row with its columns)."""
        get = row.get if isinstance(row, dict) else lambda k, d=None: getattr(row, k, d)
        return cls(qid=str(get("qid", "")), query=str(get("query", "")), difficulty=get("difficulty") or None,
                   gold_in_corpus=list(get("gold_in_corpus") or []), policy=policy, **fields)

    def add_step(self, assistant: AssistantTurn) -> Step:
        step = Step(turn=len(self.steps) + 1, assistant=assistant)
        self.steps.append(step)
        return step

    @property
    def tool_results(self) -> list[ToolCallRecord]:
        return [r for s in self.steps for r in s.results]

    def seen_ids(self) -> set[str]:
        """Every real arXiv ID that any tool result of the episode showed."""
        return {pid for r in self.tool_results for pid in r.result_ids}

    def titles(self) -> dict[str, str]:
        """Real arXiv ID -> title, as the tool results showed them."""
        out: dict[str, str] = {}
        for r in self.tool_results:
            for h in r.hits:
                if h.title:
                    out.setdefault(h.arxiv_id, h.title)
        return out


def save_trajectories(path, trajectories: Sequence[Trajectory]) -> None:
    from .files import atomic_write_text

    atomic_write_text(path, "".join(t.model_dump_json() + "\n" for t in trajectories))


def load_trajectories(path) -> list[Trajectory]:
    with open(path, encoding="utf-8") as fh:
        return [Trajectory.model_validate_json(line) for line in fh if line.strip()]


# --------------------------------------------------------------------------- words


_WORD = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset(
    "a an the and or of for in on to with by from at as is are was were be been what which who how why when "
    "that this these those it its about into over under between using use used via do does can could should "
    "i me my we our you your any some all more most recent paper papers work works research study studies "
    "find show give list look looking search related approaches approach methods method based their".split())


def words(text: Any) -> list[str]:
    """The one tokeniser: lower-cased alphanumeric words of ``text``, in order."""
    return _WORD.findall(str(text).lower())


def content_words(text: Any) -> list[str]:
    """``words`` minus the stop list (question words, "paper", "method", ...), in order."""
    return [w for w in words(text) if w not in STOPWORDS]


def _normalise(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(value.lower().split())
    if isinstance(value, dict):
        return {str(k): _normalise(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    return value


def call_key(name: str, arguments: Any) -> str:
    """Tool name + normalised arguments (strings lower-cased and whitespace-collapsed, None dropped)."""
    return name + ":" + json.dumps(_normalise(arguments), sort_keys=True, default=str)


def word_set(text: Any) -> frozenset[str]:
    return frozenset(words(text))


def jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    a, b = set(a), set(b)
    return len(a & b) / len(a | b) if a | b else 0.0


# --------------------------------------------------------------------------- measures


def search_queries(traj: Trajectory) -> list[str]:
    """The search queries the rollout emitted, in order (errored calls included: they were emitted)."""
    return [q for r in traj.tool_results if (q := r.query)]


def turn_queries(traj: Trajectory) -> list[list[str]]:
    """The search queries of each turn that emitted at least one."""
    return [qs for s in traj.steps if (qs := [q for r in s.results if (q := r.query)])]


def recall_at_k(ranked: Sequence[str], gold: Iterable[str], k: int | None = None) -> float:
    """Share of ``gold`` found in the first ``k`` of ``ranked`` (all of it when ``k`` is None)."""
    gold = set(gold)
    if not gold:
        raise ValueError("recall is undefined for an empty gold set")
    top = ranked if k is None else ranked[:k]
    return len(gold.intersection(top)) / len(gold)


def search_recall(traj: Trajectory) -> float:
    """Share of the gold papers shown by any tool result of the episode (the seed's R_search); NaN
    without gold (such a query carries no signal: ``corpus.select_queries`` leaves it out)."""
    return recall_at_k(list(traj.seen_ids()), traj.gold_in_corpus) if traj.gold_in_corpus else math.nan


def submission_recall(traj: Trajectory, k: int = 10) -> float:
    """recall@k of the submitted IDs (0 without a submission); NaN without gold."""
    return recall_at_k(list(traj.submitted or []), traj.gold_in_corpus, k) if traj.gold_in_corpus else math.nan


# --------------------------------------------------------------------------- rendering


def policy_strings(value) -> list[str]:
    """Every string the policy wrote in a tool call's arguments (keys and values, nested ones too)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in (*policy_strings(k), *policy_strings(v))]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in policy_strings(v)]
    return []


def arguments_view(arguments, text: Callable[[str], str] = lambda s: s, max_chars: int = 300) -> str:
    """A call's arguments as compact JSON with ``text`` applied to every string in them (each read up to
    ``max_chars``, so a huge argument costs nothing), then cut to ``max_chars``."""
    def clean(v):
        if isinstance(v, str):
            return text(v[:max_chars])
        if isinstance(v, dict):
            return {clean(str(k))[:40]: clean(x) for k, x in list(v.items())[:20]}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in list(v)[:20]]
        return v if isinstance(v, (int, float, bool)) or v is None else clean(str(v))

    cleaned = clean(arguments)
    out = cleaned if isinstance(cleaned, str) else json.dumps(cleaned, ensure_ascii=False, default=str)
    return out[:max_chars]


def trajectory_view(traj: Trajectory, max_reasoning_chars: int = 400, max_hits: int = 5, max_arg_chars: int = 300,
                    text: Callable[[str], str] = lambda s: s, hit_ids: bool = True) -> dict:
    """The one structured rendering of an episode: per turn the reasoning and each call (tool, arguments,
    error, the papers shown as ``"ID (date): title"``, or ``"(date): title"`` without ``hit_ids``, or the paper
    read), then the submitted titles. ``text`` is applied to every string the policy wrote (the judge passes
    its sanitiser)."""
    turns = []
    for s in traj.steps:
        calls = []
        for r in s.results:
            item: dict = {"tool": text(r.name[:40]), "arguments": arguments_view(r.arguments, text, max_arg_chars)}
            if r.error:
                item["error"] = r.error_code or "tool_error"
            elif r.name in SEARCH_TOOLS:
                item["results"] = [f"{h.id + ' ' if hit_ids else ''}({h.published}): {h.title[:120]}" for h in r.hits[:max_hits]]
                item["n_results"] = len(r.hits)
            elif r.name == "read_page" and r.hits:
                item["read"] = r.hits[0].title[:160]
            calls.append(item)
        turns.append({"turn": s.turn, "reasoning": text(s.assistant.text.strip()[:max_reasoning_chars]),
                      "calls": calls})
    titles = traj.titles()
    return {"user_query": traj.query, "turns": turns,
            "submitted_titles": [titles.get(pid, "(title not shown)")[:120] for pid in traj.submitted or []],
            "stop": traj.stop_reason.split(":")[0]}


def trajectory_markdown(traj: Trajectory, reward: float | None = None, max_reasoning_chars: int = 300) -> str:
    """The view for people: one line per turn and per call, gold papers marked."""
    view = trajectory_view(traj, max_reasoning_chars=max_reasoning_chars)
    gold = set(traj.gold_in_corpus)
    head = [f"**Query:** {traj.query}", f"stop `{view['stop']}` · {len(traj.steps)} turns · "
            f"{len(traj.tool_results)} tool calls · search recall {search_recall(traj):.2f}"
            + (f" · reward {reward:.3f}" if reward is not None else "")]
    lines = ["  \n".join(head), ""]
    for s, t in zip(traj.steps, view["turns"]):
        if t["reasoning"]:
            lines.append(f"- **turn {t['turn']}** thinks: {t['reasoning']}")
        for r, c in zip(s.results, t["calls"]):
            n_gold = len(set(r.result_ids) & gold)
            outcome = (f"error `{c['error']}`" if "error" in c else
                       f"{len(r.hits)} papers, {n_gold} gold" if r.name in SEARCH_TOOLS else
                       f"read: {c.get('read', '')}" if r.name == "read_page" else "submitted")
            lines.append(f"- turn {t['turn']} `{c['tool']}({c['arguments']})` → {outcome}")
    if view["submitted_titles"]:
        lines.append("")
        lines.append("**Submitted:** " + "; ".join(
            ("✓ " if pid in gold else "") + title for pid, title in zip(traj.submitted or [], view["submitted_titles"])))
    return "\n".join(lines)
