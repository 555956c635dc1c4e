"""Warm start (cold-start SFT): demonstrations in the exact chat/tool format of GRPO rollouts, and LoRA SFT.

A policy too weak to finish an episode gives GRPO nothing to learn from (every reward gated to 0, zero
variance). The standard fix is a short supervised warm start on demonstrations of the task:

    python -m arxivqa.sft demos --limit 0          # data/sft/demos-<tag>.jsonl from the train split
    python -m arxivqa.sft train --demos data/sft/demos-....jsonl --out data/models/<model>-sft

**The scripted teacher** (``teacher_episode``) runs the real tools of ``ArxivEnv`` with the compact tool
view the trainer uses, so a demonstration's tool messages are exactly what a GRPO rollout shows. It
reads only the user query and what the tools return — never the gold — and varies its shape (1 to 4
search rounds, 2 to 8 calls) so that RL has behaviours to choose among and a collapse can be seen:

- round 1: the query's content words by keyword and the query itself by meaning, in parallel;
- later rounds: sub-queries of salient phrases of the query (adjacent content words), and a refinement
  from words frequent in the titles returned so far but absent from the query;
- ``read_page`` on an uncertain candidate (one that only one tool found) in some episodes;
- ``finish`` with the reciprocal-rank fusion of every ranking, best first (at most 10).

**Rejection sampling and distillation** (``policy_demos``, ``python -m arxivqa.sft demos --policy <name>``):
any policy ``agent.make_policy`` knows — the policy itself (``local:<model>``, sampled at a temperature:
rejection sampling) or a stronger endpoint (``openai:<model>@<url>``, an endpoint of
``configs/endpoints.toml``, a vLLM server: distillation) — plays the train queries with the rollout view of
a training preset (its prompt, user message, tool view and budgets), and its episodes are written in the
same chat format, kept by the same selection. ``python -m arxivqa.sft finish`` completes a policy's episodes
that searched but could not end well (``teacher_finish``): its readable search turns, replayed, then the
teacher's ``finish`` — a mix of the two sources for a policy that searches but cannot yet submit.

Gold labels select demonstrations (finished, search recall > 0 on the training split, every turn readable
and no tool call refused), they never choose an action.

**SFT** (``train_sft``): TRL's ``SFTTrainer`` with LoRA on ``{"messages", "tools"}`` rows, loss on the
assistant tokens only (TRL's training chat template for Qwen2.5 adds the generation markers); the adapter
is merged and saved as a plain model folder, which GRPO then starts from (``TrainConfig.model``).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from .corpus import Query, select_queries
from .evaluate import rrf
from .files import atomic_write_text
from .records import SEARCH_TOOLS, AssistantTurn, ToolCall, Trajectory, content_words, search_recall

SHAPES = ((1, 2), (2, 4), (3, 6), (4, 8))  # (search rounds, calls) — the teacher's repertoire


class Demo(BaseModel):
    """One demonstration: the chat as the trainer renders it, and the episode behind it."""

    qid: str
    source: str  # "teacher" | "policy:<name>"
    shape: str  # e.g. "3 rounds, 6 calls, read"
    messages: list[dict]
    trajectory: Trajectory
    selected: bool = False  # finished with search recall > 0
    reason: str = ""

    def row(self, tools: list[dict], system_prompt: str | None = None, user_template: str | None = None,
            call_format: CallFormat = "template") -> dict:
        """The trainer's row; ``system_prompt`` and ``user_template`` replace the recorded system and first
        user message (a demonstration file made before the run's prompt changed still teaches what
        rollouts will see); ``call_format`` is how the assistant's calls are written (``calls_as_text``)."""
        messages = list(self.messages)
        if system_prompt is not None and messages and messages[0].get("role") == "system":
            messages[0] = {**messages[0], "content": system_prompt}
        if user_template is not None and len(messages) > 1 and messages[1].get("role") == "user":
            messages[1] = {**messages[1], "content": user_template.format(query=self.trajectory.query)}
        messages = schema_arguments(messages, tools)[0]
        return {"messages": calls_as_text(messages) if call_format == "text" else messages, "tools": tools}


CallFormat = Literal["template", "text"]
CALL_FORMATS = get_args(CallFormat)


def calls_as_text(messages: list[dict]) -> list[dict]:
    """``messages`` with each assistant turn's calls written into its text, one JSON object
    (``{"name": ..., "arguments": ...}``) a line after the reasoning, instead of as ``tool_calls`` that the chat
    template wraps in its call markers. The packaged 0.5B writes its calls that way (bare or fenced JSON: it
    never writes Qwen2.5's ``<tool_call>``, a token whose output row a LoRA cannot move — and TRL's
    ``SFTTrainer`` refuses an adapter on ``lm_head``); the agent loop reads them (``agent.parse_tool_calls``),
    so does GRPO (the training setting ``tolerant_tool_calls``), and a GRPO rollout keeps the tokens the
    policy wrote, so its context holds them in this form too."""
    out = []
    for m in messages:
        if m.get("role") == "assistant" and m.get("tool_calls"):
            calls = [json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]},
                                ensure_ascii=False) for c in m["tool_calls"]]
            text, body = (m.get("content") or "").strip(), "\n".join(calls)
            m = {k: v for k, v in m.items() if k != "tool_calls"}
            m["content"] = f"{text}\n\n{body}" if text else body
        out.append(m)
    return out


def schema_arguments(messages: list[dict], tools: list[dict]) -> tuple[list[dict], int]:
    """``messages`` with each assistant call's arguments cut to those its tool's schema in ``tools`` declares,
    and how many were dropped. The environment ignores an unknown argument (with a note), so the episode is
    the same without it; a demonstration that kept one would teach it. The packaged 0.5B sometimes copies the
    schema's ``"required"`` list into its arguments (10 of 90 calls of its 20 greedy dev episodes), the
    warm starts trained on its episodes did so in every call (112 of 112 for ``-rsf``), and in the compact
    view, where ``required`` names the query or the IDs, that doubles a ``finish`` turn and cuts it off."""
    allowed = {t["function"]["name"]: set(t["function"].get("parameters", {}).get("properties", {}))
               for t in tools if "function" in t}
    out, dropped = [], 0
    for m in messages:
        if m.get("role") == "assistant" and m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = c.get("function", {})
                args, keep = fn.get("arguments"), allowed.get(fn.get("name"))
                if isinstance(args, dict) and keep is not None:
                    dropped += sum(1 for k in args if k not in keep)
                    c = {**c, "function": {**fn, "arguments": {k: v for k, v in args.items() if k in keep}}}
                calls.append(c)
            m = {**m, "tool_calls": calls}
        out.append(m)
    return out, dropped


# --------------------------------------------------------------------------- the teacher's queries


def _phrases(query: str, size: int = 3) -> list[str]:
    """Windows of adjacent content words of the query (the salient phrases), longest content first."""
    w = list(dict.fromkeys(content_words(query)))
    if len(w) <= size:
        return [" ".join(w)] if w else []
    return [" ".join(w[i:i + size]) for i in range(0, len(w) - size + 1, max(1, size - 1))]


def _refinement(query: str, titles: Sequence[str], n: int = 3) -> str | None:
    """Words frequent in the titles seen so far but not in the query, with the query's first content
    words: a query that follows the results rather than rephrasing the question."""
    mine = set(content_words(query))
    # each title's words once, in their order (a set's order changes with PYTHONHASHSEED, and with it which
    # of the words tied in count most_common returns: the teacher's refinement differed between processes)
    counts = Counter(t for title in titles for t in dict.fromkeys(content_words(title)) if t not in mine and len(t) > 2)
    new = [w for w, c in counts.most_common(n) if c >= 2]
    if not new:
        return None
    return " ".join(new + content_words(query)[:2])


def _plan(query: str, rng: random.Random) -> tuple[int, int, bool]:
    rounds, calls = SHAPES[rng.randrange(len(SHAPES))]
    return rounds, calls, rng.random() < 0.5


# --------------------------------------------------------------------------- one episode


def teacher_episode(query: Query, env, rng: random.Random, system_prompt: str, max_submit: int = 10,
                    user_template: str = "{query}", max_rounds: int | None = None) -> Demo:
    """A scripted episode over the real tools (see the module docstring); ``env`` is reset here.
    ``max_rounds``: the tool rounds a rollout has before its finishing turn (a preset's
    ``max_tool_calling_iterations``); the drawn shape is cut to fit them, a ``read_page`` turn included."""
    env.reset(**query.model_dump())
    rounds, n_calls, read = _plan(query.query, rng)
    if max_rounds is not None:  # cut after the draw: the same queries draw the same shapes either way
        rounds = max(1, min(rounds, max_rounds - int(read)))
        n_calls = min(n_calls, 2 * rounds)
        read = read and rounds + 1 <= max_rounds
    traj = Trajectory.start(query, "teacher")
    rankings: list[list[str]] = []  # opaque IDs per search, in rank order
    found_by: dict[str, set[str]] = {}
    titles: list[str] = []
    used: set[str] = set()
    left = n_calls

    def run_turn(text: str, calls: list[tuple[str, dict]]) -> None:
        turn = len(traj.steps) + 1
        step = traj.add_step(AssistantTurn(text=text, tool_calls=[ToolCall(name=n, arguments=a) for n, a in calls]))
        for (name, _args), (_result, rec) in zip(calls, env._run_batch(calls, turn=turn)):
            step.results.append(rec)
            if name in SEARCH_TOOLS and not rec.error:
                rankings.append([h.id for h in rec.hits])
                for h in rec.hits:
                    found_by.setdefault(h.id, set()).add(name)
                    titles.append(h.title)

    def fresh(q: str | None) -> str | None:
        if not q or q.lower() in used:
            return None
        used.add(q.lower())
        return q

    # round 1: keyword and semantic, in parallel
    words = " ".join(content_words(query.query)) or query.query
    first = [("keyword_search", {"query": fresh(words) or words}), ("semantic_search", {"query": query.query})]
    used.add(query.query.lower())
    run_turn(f"I will search for {words!r} by keywords and for the question itself by meaning.", first)
    left -= 2
    for r in range(2, rounds + 1):
        if left <= 0:
            break
        per_round = max(1, min(left, round(left / (rounds - r + 1))))
        candidates = [fresh(_refinement(query.query, titles))] + [fresh(p) for p in _phrases(query.query)]
        queries = [q for q in candidates if q][:per_round]
        if not queries:
            break
        calls = [("keyword_search" if i % 2 == 0 else "semantic_search", {"query": q}) for i, q in enumerate(queries)]
        note = (f"The results so far suggest more specific terms; searching for {', '.join(repr(q) for q in queries)}."
                if queries[0] == candidates[0] else
                f"Next I cover a narrower aspect: {', '.join(repr(q) for q in queries)}.")
        run_turn(note, calls)
        left -= len(calls)
    fused = rrf(rankings)
    if read:
        uncertain = [pid for pid in fused[:max_submit] if len(found_by.get(pid, ())) == 1]
        if uncertain:
            run_turn("One candidate was found by only one search; I read it before deciding.",
                     [("read_page", {"paper_id": uncertain[0]})])
    picked = fused[:max_submit]
    run_turn(f"I submit the {len(picked)} papers that ranked highest across my searches, best first.",
             [("finish", {"paper_ids": picked})])
    traj.submitted = env.episode.submitted
    traj.stop_reason = "finished" if env.episode.finished else "no_finish"
    return Demo(qid=query.qid, source="teacher", shape=episode_shape(traj), trajectory=traj,
                messages=trajectory_messages(traj, system_prompt, user_template))


def episode_shape(traj: Trajectory) -> str:
    """``"<search rounds> rounds, <calls> calls[, read]"``: the shape a demonstration teaches."""
    shape = f"{sum(1 for s in traj.steps if any(r.query for r in s.results))} rounds, {len(traj.tool_results)} calls"
    return shape + (", read" if any(r.name == "read_page" for r in traj.tool_results) else "")


def select(demo: Demo) -> Demo:
    """Keep a demonstration that finished, whose searches surfaced a gold paper, and in which every turn was
    readable and no call was refused (a demonstration teaches every token of it; gold selects, it never
    chooses an action)."""
    traj = demo.trajectory
    recall = search_recall(traj)
    if traj.stop_reason != "finished":
        demo.selected, demo.reason = False, "did not finish"
    elif any(s.assistant.parse_problems for s in traj.steps):
        demo.selected, demo.reason = False, "an unreadable turn"
    elif any(r.error for r in traj.tool_results):
        demo.selected, demo.reason = False, "a tool call refused"
    elif not recall > 0:
        demo.selected, demo.reason = False, "no gold paper surfaced"
    else:
        demo.selected, demo.reason = True, f"search recall {recall:.2f}"
    return demo


# --------------------------------------------------------------------------- the demonstration file


class DemoConfig(BaseModel):
    """What a demonstration file is made from (saved next to it). ``policy`` None: the scripted teacher with
    the view below; a policy name: that policy's episodes (``policy_demos``) with the rollout view of the
    training preset ``preset``, sampled at ``temperature``."""

    queries: str | None = None
    policy: str | None = None
    preset: str = "cpu-warm"
    temperature: float = 0.7
    min_p: float | None = None  # with a policy: min-p truncation of its sampling (agent.sampling_probs)
    split: str = "train"  # demonstrations come from the training split only
    limit: int | None = None
    per_query: int = Field(2, ge=1, description="teacher episodes per query (shapes drawn independently)")
    seed: int = 0
    index: str | None = None
    embedder: str | None = None  # the index's semantic side (default: the setting `embedder`)
    tool_max_results: int = 3
    tool_abstract_chars: int = 0
    tool_snippet_chars: int = 120
    tool_max_snippets: int = 0
    system_prompt: str = "compact"
    # The scripted teacher in a training preset's view instead of the fields above: that preset's tool view
    # (schemas, hits a search), system prompt, user message and tool rounds (``sft demos --preset`` without
    # ``--policy``), so that its demonstrations can be mixed with a policy's of the same preset.
    teacher_preset: str | None = None


def make_demos(cfg: DemoConfig, index=None, progress: bool = True) -> list[Demo]:
    """Teacher demonstrations for the ``split`` queries (``per_query`` each), selected by ``select``."""
    from tqdm.auto import tqdm

    from .index import open_index_spec
    from .tools import make_env
    from .train import prompt_for, tool_view

    if cfg.split != "train":
        raise ValueError("demonstrations come from the training split only (split='train')")
    queries = select_queries(cfg.queries, "train", cfg.limit).queries
    view = cfg
    user_template, max_rounds = "{query}", None
    if cfg.teacher_preset:
        from .train import preset

        view = preset(cfg.teacher_preset)
        user_template, max_rounds = view.user_template, view.max_tool_calling_iterations
    index = index or open_index_spec(cfg.index, embedder=cfg.embedder or getattr(view, "embedder", None))
    env = make_env(index, seed=cfg.seed, **tool_view(view))
    prompt = prompt_for(view)
    rng = random.Random(cfg.seed)
    out = []
    for q in tqdm(queries, desc="teacher demonstrations", unit="query", disable=not progress):
        for _ in range(cfg.per_query):
            out.append(select(teacher_episode(q, env, rng, prompt, user_template=user_template,
                                              max_rounds=max_rounds)))
    return out


def trajectory_messages(traj: Trajectory, system_prompt: str, user_template: str = "{query}") -> list[dict]:
    """An episode's chat in the demonstration format (the teacher's and a policy's alike): the system prompt, the
    user message, and per turn the assistant's text with its calls (arguments as the policy wrote them) and
    one tool message per call with the text the tool returned — the conversation the agent sent the policy.
    A turn without a call, or an unreadable one (the agent's feedback message is not rebuilt), ends the
    chat there; ``select`` keeps no such episode."""
    messages: list[dict] = [{"role": "system", "content": system_prompt},
                            {"role": "user", "content": user_template.format(query=traj.query)}]
    for step in traj.steps:
        turn = step.assistant
        msg: dict = {"role": "assistant", "content": turn.text}
        if turn.tool_calls:
            msg["tool_calls"] = [{"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in turn.tool_calls]
        messages.append(msg)
        messages += [{"role": "tool", "name": r.name, "content": r.result} for r in step.results]
        if not turn.tool_calls or turn.parse_problems:
            break
    return messages


def strip_refused(demo: Demo) -> Demo:
    """The demonstration without its refused calls (a repeated search, a bad page, an unknown ID): each such
    call leaves its turn with its error message, a turn left without a call goes, and the result is selected
    again. A policy's episodes often repeat their first search once before finishing; kept whole they would
    teach the repeat, stripped they teach the rest of the episode. The recorded prompt and user message stay."""
    traj = demo.trajectory.model_copy(deep=True)
    removed, steps = 0, []
    for step in traj.steps:
        refused = {r.call_id for r in step.results if r.error}
        if not refused:
            steps.append(step)
            continue
        removed += len(refused)
        step.assistant.tool_calls = [c for c in step.assistant.tool_calls if c.id not in refused]
        step.results = [r for r in step.results if not r.error]
        if step.assistant.tool_calls:
            steps.append(step)
    if not removed:
        return demo
    traj.steps = steps
    messages = demo.messages[:2] + trajectory_messages(traj, "", "{query}")[2:]
    out = select(demo.model_copy(update={"trajectory": traj, "messages": messages, "shape": episode_shape(traj)}))
    if out.selected:
        out.reason += f"; {removed} refused call{'s' if removed > 1 else ''} removed"
    return out


_OPAQUE_ID = re.compile(r"\bP-[0-9a-fA-F]{4,}")


def _replay_and_finish(src: Trajectory, env, max_rounds: int = 3, max_submit: int = 10) -> Trajectory:
    """``src``'s readable search turns (at most ``max_rounds``; its other calls and everything after its first
    turn with a ``finish``, a ``read_page`` or an unreadable turn dropped) replayed over the real tools in
    ``env`` (reset here; a replayed call the environment refuses, such as a repeated search, is dropped too),
    then ``finish`` with the RRF fusion of those searches' rankings, as the teacher submits. The IDs are the
    replay's, so a kept turn's text that names an opaque ID of the original episode is left out."""
    env.reset(qid=src.qid, query=src.query, gold_in_corpus=list(src.gold_in_corpus),
              difficulty=src.difficulty or "")
    traj = Trajectory.start(src, src.policy)
    rankings: list[list[str]] = []
    for step in src.steps:
        turn = step.assistant
        if turn.parse_problems or len(traj.steps) >= max_rounds:
            break
        calls = [c for c in turn.tool_calls if c.name in SEARCH_TOOLS]
        if calls:
            text = "" if _OPAQUE_ID.search(turn.text) else turn.text
            ran = env._run_batch([(c.name, c.arguments) for c in calls], turn=len(traj.steps) + 1)
            kept = [(c, rec) for c, (_res, rec) in zip(calls, ran) if not rec.error]
            if kept:
                new = traj.add_step(AssistantTurn(text=text, tool_calls=[c for c, _ in kept]))
                for _c, rec in kept:
                    new.results.append(rec)
                    rankings.append([h.id for h in rec.hits])
        if len(calls) < len(turn.tool_calls) or not turn.tool_calls:
            break
    if traj.steps:
        picked = rrf(rankings)[:max_submit]
        call = ToolCall(name="finish", arguments={"paper_ids": picked})
        step = traj.add_step(AssistantTurn(text="", tool_calls=[call]))
        step.results += [rec for _res, rec in env._run_batch([("finish", call.arguments)], turn=len(traj.steps))]
    traj.submitted = env.episode.submitted
    traj.stop_reason = "finished" if env.episode.finished else "no_finish"
    return traj


def teacher_finish(demo: Demo, env, system_prompt: str, user_template: str = "{query}", max_rounds: int = 3,
                   max_submit: int = 10) -> Demo:
    """A policy's episode completed by the teacher (``_replay_and_finish``): the searches are the policy's own,
    the last turn — ``finish``, the turn a small policy often cannot write — the teacher's; gold only selects
    (``select``)."""
    traj = _replay_and_finish(demo.trajectory, env, max_rounds, max_submit)
    out = select(Demo(qid=traj.qid, source=f"{demo.source}+teacher-finish", shape=episode_shape(traj),
                      trajectory=traj, messages=trajectory_messages(traj, system_prompt, user_template)))
    if not traj.steps:
        out.reason = "no readable search turn"
    return out


def _replay_setup(cfg: DemoConfig, index=None):
    """The replay environment with the rollout view of ``cfg.preset``, that view, and its tool rounds."""
    from .index import open_index_spec
    from .tools import make_env
    from .train import preset, rollout_view

    run_cfg = preset(cfg.preset)
    view = rollout_view(run_cfg)
    index = index or open_index_spec(cfg.index, embedder=cfg.embedder or run_cfg.embedder)
    return make_env(index, seed=cfg.seed, **view["env_kwargs"]), view, run_cfg.max_tool_calling_iterations


def finish_demos(demos: Sequence[Demo], cfg: DemoConfig, index=None) -> list[Demo]:
    """Each policy episode as a demonstration: kept as it is where it passes ``select`` with its refused calls
    stripped (its own finish), otherwise completed by ``teacher_finish`` with the rollout view of the preset
    ``cfg.preset`` (the turn budget: its tool rounds)."""
    env, view, rounds = _replay_setup(cfg, index)
    out = []
    for d in demos:
        own = strip_refused(d)
        out.append(own if own.selected else
                   teacher_finish(d, env, view["system_prompt"], view["user_template"], max_rounds=rounds))
    return out


def teacher_finished(trajs: Sequence[Trajectory], cfg: DemoConfig, index=None) -> list[Trajectory]:
    """Every episode (any split: an evaluation, not demonstrations) completed by ``_replay_and_finish``, with no
    selection: on a policy's held-out episodes, what the teacher of ``finish`` reaches with that policy's
    searches — the "teacher" a warm start made by ``finish_demos`` is measured against."""
    env, _view, rounds = _replay_setup(cfg, index)
    return [_replay_and_finish(t, env, max_rounds=rounds).model_copy(update={"policy": f"{t.policy} + teacher finish"})
            for t in trajs]


def policy_demos(cfg: DemoConfig, index=None, policy=None, batch_size: int | None = None,
                 progress: bool = True) -> list[Demo]:
    """Rejection sampling (the policy's own episodes) or distillation (a stronger endpoint's): the policy
    ``cfg.policy`` (or an already loaded ``policy``) plays each train query ``per_query`` times, sampled at
    ``cfg.temperature``, with the rollout view of the preset ``cfg.preset`` (prompt, user message, tool view,
    budgets; ``evaluate_warm_start`` measures with the same); each episode becomes a ``Demo`` in the
    teacher's format, kept or not by ``select``. An in-process policy runs the episodes in lockstep."""
    import torch

    from .agent import make_policy
    from .evaluate import run_agent_eval
    from .index import open_index_spec
    from .train import preset, rollout_view

    if cfg.split != "train":
        raise ValueError("demonstrations come from the training split only (split='train')")
    if cfg.policy is None and policy is None:
        raise ValueError("policy_demos needs a policy (cfg.policy); the scripted teacher is make_demos")
    run_cfg = preset(cfg.preset)
    queries = select_queries(cfg.queries, "train", cfg.limit).queries
    index = index or open_index_spec(cfg.index, embedder=cfg.embedder or run_cfg.embedder)
    view = rollout_view(run_cfg)
    torch.manual_seed(cfg.seed)  # an in-process policy samples with torch's generator
    policy = policy or make_policy(cfg.policy, temperature=cfg.temperature, min_p=cfg.min_p)
    plays = [q for q in queries for _ in range(cfg.per_query)]
    trajs = run_agent_eval(policy.name, plays, index, budgets=view["budgets"], progress=progress,
                           system_prompt=view["system_prompt"], env_kwargs=view["env_kwargs"],
                           user_template=view["user_template"], policy=policy, batch_size=batch_size,
                           seed=cfg.seed)  # the episodes' paper IDs too: the same demonstrations in every run
    return [select(Demo(qid=t.qid, source=f"policy:{policy.name}", shape=episode_shape(t), trajectory=t,
                        messages=trajectory_messages(t, view["system_prompt"], view["user_template"])))
            for t in trajs]


def save_demos(path: str | Path, demos: Sequence[Demo], cfg: DemoConfig | None = None) -> Path:
    path = Path(path)
    atomic_write_text(path, "".join(d.model_dump_json() + "\n" for d in demos))
    if cfg is not None:
        atomic_write_text(path.with_suffix(".config.json"), cfg.model_dump_json(indent=2))
    return path


def load_demos(path: str | Path) -> list[Demo]:
    """A demonstration file (JSONL, or JSONL.gz as ``publish_warm_start`` commits them)."""
    import gzip

    path = Path(path)
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")) as fh:
        return [Demo.model_validate_json(line) for line in fh if line.strip()]


def spread(demos: Sequence[Demo], limit: int | None = None, skip: int = 0) -> list[Demo]:
    """The selected demonstrations, round-robin over queries (every query's first, then every second, ...),
    without the first ``skip`` of that order (those a previous stage trained on), cut to ``limit``: a short
    SFT run still sees as many queries as it can."""
    by_query: dict[str, list[Demo]] = {}
    for d in demos:
        if d.selected:
            by_query.setdefault(d.qid, []).append(d)
    out, k = [], 0
    while any(len(v) > k for v in by_query.values()):
        out += [v[k] for v in by_query.values() if len(v) > k]
        k += 1
    out = out[skip:]
    return out[:limit] if limit else out


def demo_stats(demos: Sequence[Demo]) -> dict[str, Any]:
    """Counts a reader needs: how many were kept, their shapes, and the recall of every episode (kept or not)."""
    from .records import submission_recall

    kept = [d for d in demos if d.selected]
    rec = [submission_recall(d.trajectory) for d in demos if d.trajectory.gold_in_corpus]
    return {"episodes": len(demos), "selected": len(kept), "queries": len({d.qid for d in demos}),
            "sources": dict(Counter(d.source for d in demos)),
            "selected_queries": len({d.qid for d in kept}),
            "shapes": dict(Counter(d.shape for d in kept).most_common()),
            "recall_at_10": sum(rec) / len(rec) if rec else None,
            "rejected": dict(Counter(d.reason for d in demos if not d.selected))}


def demos_record(raw: Sequence[Demo], files: Sequence[str | Path], stripped: bool = False) -> dict[str, Any]:
    """What a warm start was trained from (``demos.json`` next to ``sft.json``): the files, their counts
    (``demo_stats``; with ``stripped``, after ``strip_refused``, and the counts before under ``before_strip``)
    and each selected demonstration's query and shape."""
    demos = [strip_refused(d) for d in raw] if stripped else list(raw)
    out = {"files": [Path(f).name for f in files], "strip_refused": stripped, **demo_stats(demos),
           "selected_demos": [{"qid": d.qid, "source": d.source, "shape": d.shape, "reason": d.reason}
                              for d in demos if d.selected]}
    return out | ({"before_strip": demo_stats(raw)} if stripped else {})


# --------------------------------------------------------------------------- SFT


class SFTSettings(BaseModel):
    model: str = "qwen2.5-coder-0.5b-instruct"
    epochs: float = 2.0
    learning_rate: float = 2e-4
    lora_r: int = 16
    lora_alpha: int = 32
    lora_targets: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj",
                                                             "gate_proj", "up_proj", "down_proj"])
    max_length: int = 3072  # demonstrations average ~1,500 tokens; 1,536 cut the final finish turn of long ones
    batch_size: int = 2
    seed: int = 0
    threads: int | None = None
    dtype: str = "auto"
    call_format: CallFormat = "template"  # "text": calls written as JSON lines in the assistant's text (calls_as_text)


def training_template(tokenizer) -> str | None:
    """TRL's training chat template (generation markers for assistant-only loss) for this tokenizer, if it
    needs one; None when the tokenizer's own template already has them."""
    from trl.chat_template_utils import get_training_chat_template

    return get_training_chat_template(tokenizer)


def train_sft(demos: Sequence[Demo], out: str | Path, s: SFTSettings | None = None,
              system_prompt: str | None = None, meta: dict | None = None, user_template: str | None = None,
              tools: list[dict] | None = None, first_step_only: bool = False) -> dict:
    """LoRA SFT on the selected demonstrations (loss on assistant tokens only); the adapter is merged and
    the model saved to ``out`` (a folder ``from_pretrained`` reads). ``system_prompt``: the rollouts' prompt,
    put in place of each demonstration's recorded one; ``tools``: the rollouts' tool schemas (default
    ``ArxivEnv``'s, ``agent.tool_schemas``); ``meta``: more to record in ``sft.json``. Returns what was
    measured. ``first_step_only``: one optimiser step and nothing saved — its log row (loss, gradient norm,
    token accuracy, all read before the update) is the full training's first (``rebuild_from_record``'s probe)."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from .agent import tool_schemas
    from .models import arithmetic, resolve_dtype, resolve_model
    from .train import lora_norm

    s = s or SFTSettings()
    out = Path(out)
    if s.threads:
        torch.set_num_threads(s.threads)
    tools = tools or tool_schemas()
    rows = [d.row(tools, system_prompt, user_template, s.call_format) for d in demos if d.selected]
    dropped_arguments = sum(schema_arguments(d.messages, tools)[1] for d in demos if d.selected)
    if not rows:
        raise ValueError("no selected demonstration to train on")
    path = resolve_model(s.model)
    tok = AutoTokenizer.from_pretrained(path)
    template = training_template(tok)
    if template is not None:
        tok.chat_template = template
    dtype = resolve_dtype(s.dtype)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    work = out.with_name(out.name + ".work")
    args = SFTConfig(output_dir=str(work), num_train_epochs=s.epochs, learning_rate=s.learning_rate,
                     per_device_train_batch_size=s.batch_size, gradient_accumulation_steps=1,
                     max_length=s.max_length, assistant_only_loss=True, logging_steps=1, save_strategy="no",
                     report_to="none", seed=s.seed, use_cpu=not torch.cuda.is_available(),
                     bf16=dtype == "bfloat16", lr_scheduler_type="cosine", warmup_steps=1,
                     **({"max_steps": 1} if first_step_only else {}))
    peft = LoraConfig(r=s.lora_r, lora_alpha=s.lora_alpha, lora_dropout=0.0, target_modules=s.lora_targets,
                      task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok,
                         peft_config=peft)
    ds = trainer.train_dataset
    if len(ds) == 0:
        raise ValueError(f"every demonstration was dropped by the tokenizer (longer than max_length={s.max_length}?)")
    tokens = sum(len(x) for x in ds["input_ids"])
    if "labels" in ds.column_names:  # TRL folds the assistant mask into the labels (-100: no loss)
        assistant = sum(sum(t != -100 for t in lab) for lab in ds["labels"])
    else:
        assistant = sum(sum(m) for m in ds["assistant_masks"]) if "assistant_masks" in ds.column_names else None
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    if first_step_only:
        shutil.rmtree(work, ignore_errors=True)
        return {"log": [r for r in trainer.state.log_history if "loss" in r][:1], "train_seconds": seconds,
                "arithmetic": arithmetic(s.dtype)}
    moved = lora_norm(trainer.model)
    save_adapter(trainer.model, out / "adapter", base=s.model)  # `models` rebuilds the merged model from it where it is kept
    weights = hashlib.sha256((out / "adapter" / "adapter_model.safetensors").read_bytes()).hexdigest()
    merged = trainer.model.merge_and_unload()
    merged.save_pretrained(str(out))
    original = AutoTokenizer.from_pretrained(path)  # keep the model's own (inference) chat template
    original.save_pretrained(str(out))
    shutil.rmtree(work, ignore_errors=True)  # the trainer's output folder: nothing is saved there (save_strategy "no")
    log = [r for r in trainer.state.log_history if "loss" in r]
    info = {"base": s.model, "demos": len(rows), "tokens": tokens, "assistant_tokens": assistant,
            "arguments_dropped": dropped_arguments, "lora_norm": moved, "settings": s.model_dump(), "train_seconds": seconds,
            "steps": trainer.state.global_step, "first_loss": log[0]["loss"] if log else None,
            "last_loss": log[-1]["loss"] if log else None, "adapter_sha256": weights,
            "arithmetic": arithmetic(s.dtype), **(meta or {}), "log": trainer.state.log_history}
    atomic_write_text(out / "sft.json", json.dumps(info, indent=2, default=str))
    return info


def warm_start_from_demos(files: Sequence[str | Path], out: str | Path, s: SFTSettings, preset_name: str = "cpu-warm",
                          stripped: bool = False, limit: int | None = None, skip: int = 0,
                          names: Sequence[str] | None = None, first_step_only: bool = False) -> dict:
    """The warm start ``out`` trained on the demonstration ``files`` in the rollout view of the training
    preset ``preset_name`` (its system prompt, user message and tool schemas): ``spread`` over queries (after
    ``strip_refused`` if ``stripped``), LoRA SFT (``train_sft``), and ``demos.json`` written beside
    ``sft.json``. ``names``: the files' names to record (default their own). Returns ``sft.json``'s content."""
    from .agent import tool_schemas
    from .files import atomic_write_json
    from .tools import make_env
    from .train import preset, prompt_for

    run_cfg = preset(preset_name)
    names = list(names or [Path(f).name for f in files])
    raw = [d for f in files for d in load_demos(f)]
    demos = spread([strip_refused(d) for d in raw] if stripped else raw, limit, skip)
    info = train_sft(demos, out, s, system_prompt=prompt_for(run_cfg), user_template=run_cfg.user_template,
                     tools=tool_schemas(make_env(schemas=run_cfg.tool_schemas)),
                     meta={"demos_file": ", ".join(names), "strip_refused": stripped, "skipped": skip,
                           "prompt_preset": preset_name, "tool_schemas": run_cfg.tool_schemas},
                     first_step_only=first_step_only)
    if first_step_only:
        return info
    atomic_write_json(Path(out) / "demos.json", demos_record(raw, names, stripped))
    return info


# a training log row's figures read before the first update: the same inputs and arithmetic give them bit for bit
FIRST_STEP_KEYS = ("loss", "grad_norm", "mean_token_accuracy")


def rebuild_from_record(record: str | Path, out: str | Path | None = None, force: bool = False) -> dict:
    """A warm start trained again from its committed record: ``record`` is its name or its record folder
    (``results/warm_start/<name>`` or an earlier ``build-<sha>`` there), whose ``sft.json`` gives the
    settings and preset and whose ``demos/`` the demonstration files (``publish_warm_start``). The model goes
    to ``out`` (default ``<models>/<name>``, where runs look for it). Returns whether the new record's
    ``models.build_digest`` equals the committed one (``reproduced``) and, if not, which figures differ;
    writes that to ``rebuild.json`` beside the model kept.

    A model already in ``out`` with the recorded build is not trained again (``already``; ``force`` trains it
    again all the same). The new build is trained into ``<out>.rebuild`` and takes ``out``'s place only if it
    reproduces the record or ``out`` holds no model: another build never replaces a model that runs may have
    been trained from; it stays in ``<out>.rebuild`` (``left_in_place`` names the model left as it was).

    A record that says its arithmetic (``models.arithmetic``: dtype, bfloat16 units, PyTorch) is not trained
    again where this machine's differs — the figures could not agree — and before the full training one step
    is trained (``first_step_only``) and its figures (``FIRST_STEP_KEYS``) compared with the record's first log
    row: where they differ, nothing more is trained (ValueError), one step where the build takes 24 (the
    committed ``-mix-compact-text``). ``force`` skips both checks."""
    from .config import settings
    from .files import atomic_write_json
    from .models import BUILD_KEYS, arithmetic, arithmetic_differs, build_digest, warm_start_dir, warm_start_identity

    folder = Path(record)
    if not (folder / "sft.json").exists():
        folder = warm_start_dir(str(record))
    if not (folder / "sft.json").exists():
        raise FileNotFoundError(f"no warm-start record {record!r}: give a name under results/warm_start/ or a "
                                f"folder with sft.json")
    name = folder.parent.name if folder.name.startswith("build-") else folder.name
    info = json.loads((folder / "sft.json").read_text())
    used = json.loads((folder / "demos.json").read_text()) if (folder / "demos.json").exists() else {}
    files = [folder / "demos" / (f + ".gz") for f in used.get("files", [])]
    if not files or not all(f.exists() for f in files):
        raise FileNotFoundError(
            f"{folder}: this build's demonstrations are not committed (builds published before they were kept: "
            f"{', '.join(used.get('files', [])) or 'none recorded'}); it cannot be trained again — make a new build "
            f"with its Makefile target instead")
    out = Path(out or settings().models_dir / name)
    recorded = build_digest(info)
    here = warm_start_identity(out.name, out / "sft.json") if (out / "config.json").exists() else None
    if not force and here and here["build_sha256"] == recorded:
        return {"record": str(folder), "model": str(out), "reproduced": True, "already": True, "differs": [],
                "build_sha256": recorded, "recorded_build_sha256": recorded}
    here_arith = arithmetic(info["settings"].get("dtype", "auto"))
    other = arithmetic_differs(info.get("arithmetic"), here_arith)
    if other and not force:
        raise ValueError(
            f"{folder}: this build was trained with other arithmetic than this machine's ("
            + ", ".join(f"{k} {info['arithmetic'].get(k)} there, {here_arith[k]} here" for k in other)
            + "): the same demonstrations give other figures, so the rebuild cannot reproduce the build (runs trained "
            "from it cannot continue on it). Rebuild it on a machine like the recorded one, or train another build "
            "all the same with --force (it is reported as another build)")
    staged = out.with_name(out.name + ".rebuild")
    shutil.rmtree(staged, ignore_errors=True)
    again = dict(preset_name=info.get("prompt_preset", "cpu-warm"), stripped=bool(info.get("strip_refused")),
                 limit=info["demos"], skip=info.get("skipped", 0), names=used["files"])
    first = next((r for r in info.get("log") or [] if "loss" in r), None)
    if first is not None and not force:  # one step first: a machine that cannot give the build says so after 1 of its steps
        probe = warm_start_from_demos(files, staged, SFTSettings(**info["settings"]), first_step_only=True, **again)
        got = (probe["log"] or [{}])[0]
        apart = [k for k in FIRST_STEP_KEYS if k in first and got.get(k) != first[k]]
        if apart:
            raise ValueError(
                f"{folder}: the first SFT step here gives "
                + ", ".join(f"{k} {got.get(k)!r} (recorded {first[k]!r})" for k in apart)
                + f" with {probe['arithmetic']['dtype']} arithmetic: this machine cannot reproduce the build (its "
                "arithmetic differs from the one that trained it), so runs trained from it cannot continue on what it "
                "would make. Rebuild it on a machine like the recorded one, or train another build all the same with "
                "--force (it is reported as another build)")
    new = warm_start_from_demos(files, staged, SFTSettings(**info["settings"]), **again)
    digest = build_digest(new)
    differs = [k for k in BUILD_KEYS if k != "log" and new.get(k) != info.get(k)]
    if digest != recorded and not differs:
        differs = ["log"]
    report = {"record": str(folder), "model": str(out), "reproduced": not differs, "already": False,
              "differs": differs, "build_sha256": digest, "recorded_build_sha256": recorded,
              **{k: [info.get(k), new.get(k)] for k in ("demos", "first_loss", "last_loss", "lora_norm")},
              "train_seconds": new.get("train_seconds"),
              # records made before the arithmetic was kept do not say theirs (None): then only the figures tell
              "arithmetic": [info.get("arithmetic"), new.get("arithmetic")]}
    if not differs or not (out / "config.json").exists():
        shutil.rmtree(out, ignore_errors=True)
        staged.rename(out)
    else:
        report |= {"model": str(staged), "left_in_place": str(out)}
    atomic_write_json(Path(report["model"]) / "rebuild.json", report)
    return report


def publish_warm_start(model_dir: str | Path, demo_files: Sequence[str | Path] = ()) -> Path:
    """Copy a trained warm start's record (``sft.json``, ``demos.json``) and the demonstration files it was
    trained on (gzipped, under ``demos/``) to ``results/warm_start/<name>/``, from which
    ``python -m arxivqa.sft rebuild`` trains the same build again (``rebuild_from_record``); its bf16 LoRA
    ``adapter/`` too, which is git-ignored (weights are not committed) but rebuilds the model on this machine.
    A record of another build already there is first moved to ``build-<sha12>/`` beside it, since runs may
    name it."""
    import gzip

    from .files import atomic_write_bytes
    from .models import build_digest, warm_start_dir, warm_start_identity

    src = Path(model_dir)
    dst = warm_start_dir(src.name)
    dst.mkdir(parents=True, exist_ok=True)
    new = json.loads((src / "sft.json").read_text())
    if (dst / "sft.json").exists():
        old = warm_start_identity(src.name, dst / "sft.json")
        if old["build_sha256"] != build_digest(new):
            keep = dst / f"build-{old['sft_sha256'][:12]}"
            keep.mkdir(exist_ok=True)
            for name in ("sft.json", "demos.json", "demos"):
                if (dst / name).exists() and not (keep / name).exists():
                    shutil.move(str(dst / name), str(keep / name))
    if (dst / "demos").exists():
        shutil.rmtree(dst / "demos")
    for f in demo_files:
        atomic_write_bytes(dst / "demos" / (Path(f).name + ".gz"), gzip.compress(Path(f).read_bytes(), mtime=0))
    (dst / "adapter").mkdir(exist_ok=True)
    for f in ("adapter_config.json", "adapter_model.safetensors"):  # not PEFT's generated model card
        shutil.copy(src / "adapter" / f, dst / "adapter" / f)
    shutil.copy(src / "sft.json", dst / "sft.json")
    if (src / "demos.json").exists():
        shutil.copy(src / "demos.json", dst / "demos.json")
    return dst


def save_adapter(model, folder: str | Path, dtype: str = "bfloat16", base: str | None = None) -> Path:
    """A PEFT model's LoRA adapter saved in ``dtype`` (bfloat16 halves it: ~10 MB for r 16 on SmolLM2-135M);
    ``base`` names the base model in its config instead of this machine's path."""
    from .models import shrink_adapter

    model.save_pretrained(str(folder))
    return shrink_adapter(folder, dtype, base)


def evaluate_warm_start(model: str, queries: Sequence[Query], train_cfg=None, index=None, seed: int = 0,
                        progress: bool = True) -> tuple[dict, list[Trajectory], list[Trajectory]]:
    """The warm-started policy and its teacher on the same queries, with the prompt, tool view and budgets
    of GRPO rollouts (``train_cfg``, default the cpu-warm preset): finish rate, unreadable turns, recall.
    Returns (summary per policy, the policy's trajectories, the teacher's)."""
    import pandas as pd

    from .evaluate import run_agent_eval, trajectory_metrics
    from .index import open_index
    from .tools import make_env
    from .train import preset, rollout_view

    cfg = train_cfg or preset("cpu-warm")
    index = index or open_index(embedder=cfg.embedder)
    view = rollout_view(cfg)
    budgets = view["budgets"]
    t0 = time.perf_counter()
    policy = run_agent_eval(f"local:{model}", queries, index, budgets=budgets, progress=progress,
                            system_prompt=view["system_prompt"], env_kwargs=view["env_kwargs"],
                            user_template=view["user_template"])
    wall = time.perf_counter() - t0
    env, rng = make_env(index, seed=seed, **view["env_kwargs"]), random.Random(seed)
    teacher = [teacher_episode(q, env, rng, view["system_prompt"], user_template=view["user_template"]).trajectory
               for q in queries]
    frame = pd.DataFrame([trajectory_metrics(t) for t in policy + teacher])
    cols = ["recall@10", "search_recall", "finished", "unreadable_share", "tool_calls", "turns", "distinct_tools",
            "completion_tokens", "seconds"]
    summary = {name: {c: float(g[c].mean()) for c in cols} | {"episodes": len(g)}
               for name, g in frame.groupby("method", sort=False)}
    summary["_run"] = {"model": model, "queries": len(queries), "wall_seconds": wall,
                       "episodes_per_minute": 60 * len(queries) / wall if wall else None,
                       "budgets": budgets.__dict__, "tool_view": view["env_kwargs"], "prompt": cfg.system_prompt}
    return summary, policy, teacher


def main(argv: list[str] | None = None) -> None:
    import argparse

    from .config import settings

    p = argparse.ArgumentParser(prog="python -m arxivqa.sft", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demos", help="teacher demonstrations of the train split -> a JSONL file")
    d.add_argument("--limit", type=int, default=None)
    d.add_argument("--per-query", type=int, default=2)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--index", default=None)
    d.add_argument("--embedder", default=None, help="the index's semantic side (default: the setting embedder)")
    d.add_argument("--out", default=None, help="default: <data>/sft/demos-<scale>-seed<seed>.jsonl")
    d.add_argument("--policy", default=None,
                   help="a policy's episodes instead of the teacher's: local:<model> (rejection sampling) or a "
                        "stronger endpoint (distillation), with the rollout view of --preset")
    d.add_argument("--preset", default=None,
                   help="the training preset whose rollout view applies (with --policy: default cpu-warm; the "
                        "teacher: its view, prompt and tool rounds instead of its own 3-hit view)")
    d.add_argument("--temperature", type=float, default=DemoConfig().temperature, help="with --policy")
    d.add_argument("--min-p", type=float, default=None, help="with --policy: min-p truncation of the sampling")
    d.add_argument("--batch", type=int, default=None, help="with --policy: episodes in lockstep (default eval_batch)")
    f = sub.add_parser("finish", help="a policy's demonstrations completed by the teacher's finish (teacher_finish)")
    f.add_argument("--demos", required=True, help="a file of `demos --policy` (its episodes, kept or not)")
    f.add_argument("--out", required=True)
    f.add_argument("--preset", default="cpu-warm", help="the training preset whose view and tool rounds apply")
    f.add_argument("--seed", type=int, default=0, help="the replay environment's ID obfuscation")
    f.add_argument("--index", default=None)
    f.add_argument("--embedder", default=None, help="the index's semantic side (default: the preset's)")
    te = sub.add_parser("teacher-eval", help="teacher_finish on a policy's evaluated episodes (any split): "
                                            "the teacher's recall@10 on those queries")
    te.add_argument("--trajectories", required=True,
                    help="an evaluation's trajectories (results/eval/<name>.trajectories.jsonl)")
    te.add_argument("--policy", required=True, help="whose episodes in that file (its policy name)")
    te.add_argument("--out", required=True, help="a JSON file")
    te.add_argument("--preset", default="cpu-warm")
    t = sub.add_parser("train", help="LoRA SFT on a demonstration file -> a merged model folder")
    t.add_argument("--demos", required=True, nargs="+", help="one or more demonstration files (any mix of sources)")
    t.add_argument("--model", default=SFTSettings().model)
    t.add_argument("--out", required=True)
    t.add_argument("--epochs", type=float, default=SFTSettings().epochs)
    t.add_argument("--threads", type=int, default=None)
    t.add_argument("--limit", type=int, default=None, help="N selected demonstrations, spread over queries")
    t.add_argument("--skip", type=int, default=0,
                   help="leave out the first N of that spread (a second stage from a warm start: demonstrations it has not seen)")
    t.add_argument("--preset", default="cpu-warm", help="the training preset whose system prompt the demonstrations get")
    t.add_argument("--max-length", type=int, default=SFTSettings().max_length)
    t.add_argument("--lr", type=float, default=SFTSettings().learning_rate)
    t.add_argument("--call-format", choices=CALL_FORMATS, default=SFTSettings().call_format,
                   help="template: calls in the chat template's markers; text: JSON lines in the assistant's text")
    t.add_argument("--strip-refused", action="store_true",
                   help="train on the demonstrations without their refused calls (strip_refused), selected again")
    r = sub.add_parser("rebuild", help="a warm start trained again from its committed record and demonstrations "
                                       "(results/warm_start/<name>/demos/) -> <models>/<name>; fails if it is "
                                       "another build")
    r.add_argument("record", help="a warm start's name or its record folder (results/warm_start/<name>[/build-<sha>])")
    r.add_argument("--out", default=None, help="default: <models>/<name>")
    r.add_argument("--force", action="store_true",
                   help="train it again even where <out> already holds the recorded build, or where the record's "
                        "arithmetic (dtype, bf16 units, PyTorch) is not this machine's")
    e = sub.add_parser("eval", help="a warm-started model and the teacher on dev queries (rollout prompt, view, budgets)")
    e.add_argument("--model", required=True, help="a model folder (e.g. the output of `train`) or packaged name")
    e.add_argument("--limit", type=int, default=20)
    e.add_argument("--preset", default="cpu-warm", help="the training preset whose prompt, tool view and budgets apply")
    e.add_argument("--out", default=None, help="default: <results>/warm_start/<model folder name>.json")
    a = p.parse_args(argv)
    if a.cmd == "demos":
        cfg = DemoConfig(limit=a.limit, per_query=a.per_query, seed=a.seed, index=a.index, embedder=a.embedder,
                         policy=a.policy, preset=a.preset or "cpu-warm", temperature=a.temperature, min_p=a.min_p,
                         teacher_preset=None if a.policy else a.preset)
        demos = policy_demos(cfg, batch_size=a.batch) if a.policy else make_demos(cfg)
        out = Path(a.out or settings().runs_dir.parent / "sft" / f"demos-{settings().scale}-seed{a.seed}.jsonl")
        save_demos(out, demos, cfg)
        print(json.dumps({"out": str(out), **demo_stats(demos)}, indent=2))
    elif a.cmd == "finish":
        from .files import atomic_write_json

        cfg = DemoConfig(preset=a.preset, seed=a.seed, index=a.index, embedder=a.embedder)
        demos = finish_demos(load_demos(a.demos), cfg)
        out = save_demos(a.out, demos)
        atomic_write_json(out.with_suffix(".config.json"), {"from": str(a.demos), "completed_by": "teacher_finish",
                                                            **cfg.model_dump(include={"preset", "seed", "index",
                                                                                      "embedder"})})
        by_source = Counter((d.source, d.selected) for d in demos)
        print(json.dumps({"out": a.out, **demo_stats(demos),
                          "selected_by_source": {s: n for (s, ok), n in by_source.items() if ok}}, indent=2))
    elif a.cmd == "teacher-eval":
        from .evaluate import bootstrap_ci, trajectory_metrics
        from .files import atomic_write_json
        from .records import load_trajectories

        trajs = [t for t in load_trajectories(a.trajectories) if t.policy == a.policy and t.gold_in_corpus]
        if not trajs:
            raise SystemExit(f"no scorable episode of {a.policy!r} in {a.trajectories}")
        rows = [trajectory_metrics(t) for t in teacher_finished(trajs, DemoConfig(preset=a.preset))]
        summary = {"from": str(a.trajectories), "policy": a.policy, "completed_by": "teacher_finish",
                   "preset": a.preset, "episodes": len(rows)}
        for m in ("recall@10", "search_recall", "finished", "tool_calls"):
            vals = [float(r[m]) for r in rows]
            summary[m] = sum(vals) / len(vals)
            summary[f"{m} 95% CI"] = list(bootstrap_ci(vals))
        atomic_write_json(a.out, summary)
        print(json.dumps(summary, indent=2))
    elif a.cmd == "train":
        info = warm_start_from_demos(a.demos, a.out, SFTSettings(model=a.model, epochs=a.epochs, threads=a.threads,
                                                                max_length=a.max_length, learning_rate=a.lr,
                                                                call_format=a.call_format),
                                     a.preset, a.strip_refused, a.limit, a.skip)
        publish_warm_start(a.out, a.demos)
        print(json.dumps({k: v for k, v in info.items() if k != "log"}, indent=2, default=str))
    elif a.cmd == "rebuild":
        try:
            out = rebuild_from_record(a.record, a.out, force=a.force)
        except ValueError as exc:  # another arithmetic: said before training, not after half an hour
            raise SystemExit(str(exc)) from None
        print(json.dumps(out, indent=2))
        if out.get("already"):
            print(f"{out['model']} already holds the recorded build: not trained again (--force to train it again)")
        if not out["reproduced"]:
            kept = f"; it is kept at {out['model']}, {out['left_in_place']} is left as it was" \
                if "left_in_place" in out else ""
            raise SystemExit(f"{a.record}: the rebuild is another build ({', '.join(out['differs'])} differ){kept}")
    else:
        from .files import atomic_write_json
        from .records import save_trajectories

        queries = select_queries(split="dev", limit=a.limit).queries
        from .models import warm_start_dir
        from .train import preset

        summary, policy, teacher = evaluate_warm_start(a.model, queries, preset(a.preset))
        out = Path(a.out or warm_start_dir(Path(a.model).name) / "eval.json")
        atomic_write_json(out, summary)
        save_trajectories(out.with_suffix(".trajectories.jsonl"), policy + teacher)
        print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
