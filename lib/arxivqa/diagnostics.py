"""Collapse diagnostics for GRPO rollouts: per-rollout measures, the seed's four failure modes, TRL logs.

The seed (alphaXiv, "ArxivQA", §RLVR) reports that RLVR collapsed to one ``semantic_search`` + one
``keyword_search`` call per rollout by step ~100 (entropy collapse by ~200), and names four failure
modes. Each has a detector ``detect_<name>(traj, cfg) -> bool``; the seed gives no thresholds, so
the rules and every threshold (fields of ``DiagnosticsConfig``) are ours:

(a) ``no_exploration`` — no systematic exploration / refinement: fewer than ``min_search_turns`` turns
    that emit a search query, or fewer than ``min_refined_queries`` *refined* queries (a query of a
    later search turn whose word-set Jaccard to every query of earlier turns is < ``refine_max_jaccard``).
(b) ``latent_knowledge`` — superfluous reasoning grounded in latent knowledge: at least
    ``latent_min_reasoning_tokens`` reasoning tokens and ``latent_min_terms`` salient terms, of which a
    share ≥ ``latent_threshold`` is ungrounded (see ``ungrounded_claims``).
(c) ``no_reasoning_between_calls`` — the 2nd and 3rd tool-calling turns (those that exist; at least a
    2nd is needed) carry ≤ ``silent_max_words`` reasoning tokens each.
(d) ``rephrasing`` — a share ≥ ``rephrase_min_share`` of the search queries has similarity
    ≥ ``rephrase_threshold`` to the user query (``query_similarity``).

Measures (all lexical approximations, documented where defined):
- reasoning tokens = whitespace words of ``Step.assistant.text`` (``<think>`` tags removed), not
  tokenizer tokens; "before the k-th tool call" = the text of the k-th tool-calling turn, which the
  model writes before that turn's calls.
- ``query_similarity`` = max(Jaccard of content-word sets, difflib ``SequenceMatcher`` ratio of the
  content words joined): Jaccard catches reordered rephrasings, the character ratio morphological ones
  ("transformer" / "transformers"). Content words = alphanumeric words minus a small stop list.
- ``ungrounded_claims``: salient terms of the reasoning (words with a digit — numbers, years, arXiv
  IDs, model versions —, with an inner capital — acronyms, CamelCase — or capitalised mid-sentence —
  names), and how many never occur (as whole tokens, case-insensitively) in the user query or in the
  text of a tool result the agent had already received when it wrote them. A heuristic: it cannot tell
  a sound inference from a hallucination, only whether the named things came from the environment.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel

from .records import SEARCH_TOOLS, Trajectory, content_words, jaccard, search_recall, turn_queries, word_set

_THINK = re.compile(r"</?think>")
_TOKEN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.\-]*[A-Za-z0-9])?")
_SENTENCE = re.compile(r"(?<=[.!?:])\s+|\n+")


class DiagnosticsConfig(BaseModel):
    min_search_turns: int = 2
    refine_max_jaccard: float = 0.8
    min_refined_queries: int = 1
    latent_min_reasoning_tokens: int = 40
    latent_min_terms: int = 3
    latent_threshold: float = 0.5
    silent_max_words: int = 0
    rephrase_threshold: float = 0.6
    rephrase_min_share: float = 0.6


# --------------------------------------------------------------------------- per-rollout measures


def reasoning_tokens(text: str) -> int:
    """Whitespace words of ``text`` without ``<think>`` tags (an approximation of tokens)."""
    return len(_THINK.sub(" ", text or "").split())


def tool_turns(traj: Trajectory) -> list:
    """The steps in which the model called at least one tool."""
    return [s for s in traj.steps if s.results or s.assistant.tool_calls]


def reasoning_before_tool_turn(traj: Trajectory, k: int) -> float:
    """Reasoning tokens of the k-th (1-based) tool-calling turn; NaN if there is none."""
    turns = tool_turns(traj)
    return float(reasoning_tokens(turns[k - 1].assistant.text)) if len(turns) >= k else math.nan


def tool_counts(traj: Trajectory) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in traj.tool_results:
        out[r.name] = out.get(r.name, 0) + 1
    return out


def is_single_kw_single_sem(traj: Trajectory) -> bool:
    """Exactly one keyword_search and one semantic_search, optionally one finish, nothing else."""
    c = tool_counts(traj)
    return c.pop("keyword_search", 0) == 1 and c.pop("semantic_search", 0) == 1 and c.pop("finish", 0) <= 1 and not c


def refined_queries(traj: Trajectory, max_jaccard: float = 0.8) -> int:
    """Queries of later search turns whose Jaccard to every query of earlier turns is < ``max_jaccard``."""
    earlier: list[frozenset[str]] = []
    n = 0
    for i, qs in enumerate(turn_queries(traj)):
        sets = [word_set(q) for q in qs]
        if i:
            n += sum(max(jaccard(a, b) for b in earlier) < max_jaccard for a in sets)
        earlier.extend(sets)
    return n


def query_similarity(a: str, b: str) -> float:
    """max(content-word Jaccard, SequenceMatcher ratio of the content words joined), in [0, 1]."""
    wa, wb = content_words(a), content_words(b)
    if not wa or not wb:
        return 0.0
    return max(jaccard(frozenset(wa), frozenset(wb)), SequenceMatcher(None, " ".join(wa), " ".join(wb)).ratio())


def rephrase_similarities(traj: Trajectory) -> list[float]:
    """Similarity of each emitted search query to the user query."""
    return [query_similarity(q, traj.query) for qs in turn_queries(traj) for q in qs]


def salient_terms(text: str) -> list[str]:
    """Numbers / IDs / versions, acronyms / CamelCase, and mid-sentence capitalised words of ``text``."""
    out = []
    for sentence in _SENTENCE.split(_THINK.sub(" ", text or "")):
        for i, tok in enumerate(_TOKEN.findall(sentence)):
            if len(tok) >= 2 and (any(c.isdigit() for c in tok) or any(c.isupper() for c in tok[1:])
                                  or (i > 0 and tok[0].isupper())):
                out.append(tok)
    return out


def ungrounded_claims(traj: Trajectory) -> tuple[int, int]:
    """(distinct salient terms in the reasoning, how many of them the query and the tool results the agent
    had received by then never contained)."""
    context = {t.lower() for t in _TOKEN.findall(traj.query)}
    terms: dict[str, bool] = {}
    for s in traj.steps:
        for t in salient_terms(s.assistant.text):
            key = t.lower()
            terms[key] = terms.get(key, False) or key in context
        for r in s.results:  # seen only after this step's reasoning was written
            context.update(t.lower() for t in _TOKEN.findall(r.result))
    return len(terms), sum(not grounded for grounded in terms.values())


def ungrounded_score(traj: Trajectory) -> float:
    n, bad = ungrounded_claims(traj)
    return bad / n if n else 0.0


# --------------------------------------------------------------------------- the four failure modes


def detect_no_exploration(traj: Trajectory, cfg: DiagnosticsConfig | None = None) -> bool:
    cfg = cfg or DiagnosticsConfig()
    return (len(turn_queries(traj)) < cfg.min_search_turns
            or refined_queries(traj, cfg.refine_max_jaccard) < cfg.min_refined_queries)


def detect_latent_knowledge(traj: Trajectory, cfg: DiagnosticsConfig | None = None) -> bool:
    cfg = cfg or DiagnosticsConfig()
    n, bad = ungrounded_claims(traj)
    words = sum(reasoning_tokens(s.assistant.text) for s in traj.steps)
    return words >= cfg.latent_min_reasoning_tokens and n >= cfg.latent_min_terms and bad / n >= cfg.latent_threshold


def detect_no_reasoning_between_calls(traj: Trajectory, cfg: DiagnosticsConfig | None = None) -> bool:
    cfg = cfg or DiagnosticsConfig()
    later = [x for x in (reasoning_before_tool_turn(traj, 2), reasoning_before_tool_turn(traj, 3)) if not math.isnan(x)]
    return bool(later) and all(x <= cfg.silent_max_words for x in later)


def detect_rephrasing(traj: Trajectory, cfg: DiagnosticsConfig | None = None) -> bool:
    cfg = cfg or DiagnosticsConfig()
    sims = rephrase_similarities(traj)
    return bool(sims) and np.mean([s >= cfg.rephrase_threshold for s in sims]) >= cfg.rephrase_min_share


FAILURE_MODES: dict[str, Callable[[Trajectory, DiagnosticsConfig | None], bool]] = {
    "no_exploration": detect_no_exploration, "latent_knowledge": detect_latent_knowledge,
    "no_reasoning_between_calls": detect_no_reasoning_between_calls, "rephrasing": detect_rephrasing,
}


# --------------------------------------------------------------------------- frames


def rollout_row(traj: Trajectory, cfg: DiagnosticsConfig | None = None) -> dict:
    cfg = cfg or DiagnosticsConfig()
    c = tool_counts(traj)
    sims = rephrase_similarities(traj)
    n_terms, n_bad = ungrounded_claims(traj)
    row = {
        "qid": traj.qid, "policy": traj.policy, "difficulty": traj.difficulty,
        "tool_calls": len(traj.tool_results), "distinct_tools": len(c), "turns": len(traj.steps),
        "tool_turns": len(tool_turns(traj)), "search_turns": len(turn_queries(traj)),
        "keyword_calls": c.get("keyword_search", 0), "semantic_calls": c.get("semantic_search", 0),
        "read_calls": c.get("read_page", 0), "finish_calls": c.get("finish", 0),
        "submitted": traj.submitted is not None, "single_kw_single_sem": is_single_kw_single_sem(traj),
        "reasoning_tokens": sum(reasoning_tokens(s.assistant.text) for s in traj.steps),
        "reasoning_first": reasoning_before_tool_turn(traj, 1),
        "reasoning_turn2": reasoning_before_tool_turn(traj, 2),
        "reasoning_turn3": reasoning_before_tool_turn(traj, 3),
        "refined_queries": refined_queries(traj, cfg.refine_max_jaccard),
        "rephrase_sim_max": max(sims) if sims else math.nan,
        "rephrase_sim_mean": float(np.mean(sims)) if sims else math.nan,
        "salient_terms": n_terms, "ungrounded_terms": n_bad, "ungrounded_score": n_bad / n_terms if n_terms else 0.0,
        "completion_tokens": traj.completion_tokens,
    }
    row |= {f"fm_{name}": bool(fn(traj, cfg)) for name, fn in FAILURE_MODES.items()}
    return row


def rollout_frame(trajs: Sequence[Trajectory], step: int | None = None,
                  cfg: DiagnosticsConfig | None = None) -> pd.DataFrame:
    """One row per rollout: every measure above and the four failure-mode flags (``fm_<name>``)."""
    frame = pd.DataFrame([rollout_row(t, cfg) for t in trajs])
    frame.insert(0, "step", step)
    return frame


_AVERAGED = ("tool_calls", "distinct_tools", "turns", "search_turns", "refined_queries", "reasoning_tokens",
             "reasoning_first", "reasoning_turn2", "reasoning_turn3", "rephrase_sim_max", "ungrounded_score")
_SHARES = ("single_kw_single_sem", "submitted", *(f"fm_{n}" for n in FAILURE_MODES))


def step_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per step: rollouts; mean / median of the measures; tool-call 10/25/75/90 % quantiles; shares of
    single-kw+single-sem rollouts, submissions, and each failure mode (``fm_<name>_rate``)."""
    if frame.empty:
        return pd.DataFrame()
    g = frame.groupby("step", dropna=False, sort=True)
    out = pd.DataFrame({"rollouts": g.size()})
    for col in _AVERAGED:
        out[f"{col}_mean"], out[f"{col}_median"] = g[col].mean(), g[col].median()
    for q in (0.1, 0.25, 0.75, 0.9):
        out[f"tool_calls_q{round(q * 100)}"] = g["tool_calls"].quantile(q)
    for col in _SHARES:
        out[f"{col}_rate"] = g[col].mean()
    return out.reset_index()


TRL_KEYS = ("step", "epoch", "loss", "entropy", "kl", "clip_ratio/region_mean", "clip_ratio/low_mean",
            "clip_ratio/high_mean", "reward", "reward_std", "frac_reward_zero_std", "completions/mean_length",
            "completions/max_length", "tools/call_frequency", "tools/failure_frequency")
_REWARD_KEY = re.compile(r"^rewards/.+/(mean|std)$")


def trl_log_frame(log_history: Sequence[dict], extra_prefixes: Sequence[str] = ("rlvr/", "rar/", "rollout/")
                  ) -> pd.DataFrame:
    """TRL ``trainer.state.log_history`` -> one row per training log entry: ``TRL_KEYS``, every
    ``rewards/<fn>/mean|std`` and the metrics our reward functions log (``extra_prefixes``, via
    ``log_metric``); missing or non-numeric values are NaN, other keys are ignored."""
    reward_cols = sorted({k for e in log_history for k in e
                          if _REWARD_KEY.match(k) or k.startswith(tuple(extra_prefixes))})
    cols = [*TRL_KEYS, *reward_cols]
    rows = [{k: e.get(k) for k in cols} for e in log_history
            if any(k in e for k in cols if k not in ("step", "epoch"))]
    frame = pd.DataFrame(rows, columns=cols)
    return frame.apply(pd.to_numeric, errors="coerce").astype(float)


# --------------------------------------------------------------------------- a training run, read back


def load_run(run_dir: str | Path, cfg: DiagnosticsConfig | None = None) -> dict[str, Any]:
    """A run folder written by ``arxivqa.train``, as frames: ``config`` (dict), ``log`` (TRL's per-step
    log, ``trl_log_frame``), ``rollouts`` (``rollout_frame`` of every rollout, with ``step`` and the
    reward components as ``reward/<name>``), ``summary`` (``step_summary``), ``timing`` (per-step seconds),
    ``trajectories`` (list of (step, Trajectory))."""
    from .train import load_rollouts, rollout_trajectories

    run_dir = Path(run_dir)
    config = json.loads((run_dir / "config.json").read_text())
    metrics = load_rollouts(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").exists() else []
    rows = load_rollouts(run_dir / "rollouts.jsonl") if (run_dir / "rollouts.jsonl").exists() else []
    trajs = rollout_trajectories(rows)
    rollouts = _rollouts(trajs, [row["reward"] for row in rows], cfg)
    timing = pd.DataFrame(load_rollouts(run_dir / "timing.jsonl")) if (run_dir / "timing.jsonl").exists() else pd.DataFrame()
    log = trl_log_frame(metrics)
    if "frac_reward_zero_std" in log:  # the share of groups whose rewards differed: GRPO's signal
        log["signal_share"] = 1.0 - log["frac_reward_zero_std"]
    if "lora_norm" in timing and "step" in log:  # how far the adapter has moved from zero, per step
        log = log.merge(timing[["step", "lora_norm"]].astype(float), on="step", how="left")
    return {"config": config, "log": log, "rollouts": rollouts,
            "summary": step_summary(rollouts), "timing": timing, "trajectories": trajs}


def _rollouts(trajs: Sequence[tuple[int, Trajectory]], rewards: Sequence[dict], cfg: DiagnosticsConfig | None) -> pd.DataFrame:
    """One row per rollout: its measures under ``cfg``, its search recall and its reward components."""
    frames = []
    for (step, traj), reward in zip(trajs, rewards):
        f = rollout_frame([traj], step=step, cfg=cfg)
        f["search_recall"] = search_recall(traj)
        for key, value in reward.items():
            f[f"reward/{key}"] = value
        frames.append(f)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def rediagnose(run: dict[str, Any], cfg: DiagnosticsConfig) -> dict[str, Any]:
    """A run from ``load_run`` with its rollout measures and failure modes recomputed under other thresholds
    (nothing is read again)."""
    r = run["rollouts"]
    rewards = r.filter(like="reward/").rename(columns=lambda c: c.removeprefix("reward/")).to_dict("records")
    rollouts = _rollouts(run["trajectories"], rewards, cfg)
    return {**run, "rollouts": rollouts, "summary": step_summary(rollouts)}


def gold_by_tool(trajs: Sequence[Trajectory]) -> pd.DataFrame:
    """Which search tool surfaced the gold papers: per tool, the (rollout, gold paper) pairs its results
    showed, their share of all pairs any search showed, and the pairs only that tool showed. A tool a
    policy would rightly ignore surfaces almost nothing only it could find."""
    found: dict[str, set] = {name: set() for name in SEARCH_TOOLS}
    for i, traj in enumerate(trajs):
        gold = set(traj.gold_in_corpus)
        for rec in traj.tool_results:
            if rec.name in found and not rec.error:
                found[rec.name] |= {(i, h.arxiv_id) for h in rec.hits if h.arxiv_id in gold}
    union = set().union(*found.values())
    rows = []
    for name, pairs in found.items():
        others = set().union(*(v for k, v in found.items() if k != name))
        rows.append({"tool": name, "gold_surfaced": len(pairs), "share_of_surfaced": len(pairs) / len(union) if union else float("nan"),
                     "only_this_tool": len(pairs - others)})
    return pd.DataFrame(rows)


def signature_window(n_steps: int, most: int = 5) -> int:
    """How many first and last steps to compare: at most ``most``, and never overlapping (one step: 1)."""
    return max(1, min(most, n_steps // 2))


def rollout_choices(run: dict[str, Any], step: int | None) -> tuple[dict[str, int], str | None]:
    """A run's rollouts at ``step`` for a picker (label -> row of ``run["rollouts"]``) and the label of the
    best-rewarded one (the default)."""
    rows = run["rollouts"]
    idx = list(rows.index[rows["step"] == step]) if step is not None and len(rows) else []
    options = {f"rollout {n + 1} · reward {rows.loc[i, 'reward/total']:.3f} · {int(rows.loc[i, 'tool_calls'])} tool calls":
               int(i) for n, i in enumerate(idx)}
    best = max(options, key=lambda k: rows.loc[options[k], "reward/total"]) if options else None
    return options, best


def rollout_detail(run: dict[str, Any], row: int) -> tuple[str, pd.DataFrame]:
    """One rollout of a run: its trajectory as Markdown (``records.trajectory_markdown``, headed by its
    step) and its reward components as a table."""
    from .records import trajectory_markdown

    step, traj = run["trajectories"][row]
    r = run["rollouts"].loc[row]
    components = pd.DataFrame([{"component": k.removeprefix("reward/"), "value": v}
                               for k, v in r.items() if k.startswith("reward/")])
    return f"**Step {step}**\n\n" + trajectory_markdown(traj, reward=float(r["reward/total"])), components


def early_late(summary: pd.DataFrame, log: pd.DataFrame, window: int | None = None) -> pd.DataFrame:
    """The first and last ``window`` steps side by side: the collapse signature in one table (default
    window: ``signature_window`` of the run's steps, so the two ends never share a step)."""
    if window is None:
        window = signature_window(int(summary["step"].nunique()) if "step" in summary and len(summary) else 0)
    unit = "step" if window == 1 else "steps"
    rows = []
    spec = [("reward (TRL)", log, "reward"), ("entropy", log, "entropy"), ("KL", log, "kl"),
            ("tool calls per rollout", summary, "tool_calls_mean"),
            ("distinct tools per rollout", summary, "distinct_tools_mean"), ("turns", summary, "turns_mean"),
            ("share 1 keyword + 1 semantic", summary, "single_kw_single_sem_rate"),
            ("share submitted (finish)", summary, "submitted_rate"),
            *[(f"failure: {n}", summary, f"fm_{n}_rate") for n in FAILURE_MODES]]
    for name, frame, col in spec:
        if col not in frame or frame.empty:
            continue
        f = frame.dropna(subset=[col]).sort_values("step")
        rows.append({"measure": name, f"first {window} {unit}": f[col].head(window).mean(),
                     f"last {window} {unit}": f[col].tail(window).mean()})
    return pd.DataFrame(rows)


# what the seed reports of RLVR, as (measure, frame, column, expected direction from the first to the last steps)
SEED_SIGNATURE = [("reward (TRL)", "log", "reward", +1), ("entropy", "log", "entropy", -1),
                  ("tool calls per rollout", "summary", "tool_calls_mean", -1),
                  ("distinct tools per rollout", "summary", "distinct_tools_mean", -1),
                  ("share 1 keyword + 1 semantic", "summary", "single_kw_single_sem_rate", +1),
                  *[(f"failure: {n}", "summary", f"fm_{n}_rate", +1) for n in FAILURE_MODES]]


def verdict_window(n_steps: int) -> int:
    """How many first and last steps ``seed_verdict`` compares in a run of ``n_steps``: a quarter of the run,
    between 2 and 20 steps (notebook 04 judges every run it shows with it, so runs are judged alike)."""
    return max(2, min(20, n_steps // 4))


def seed_verdict(summary: pd.DataFrame, log: pd.DataFrame, window: int) -> pd.DataFrame:
    """Each change the seed reports for RLVR (reward up, entropy down, fewer and less diverse tool calls,
    converging on 1 keyword + 1 semantic, more failure modes), measured between the first and the last
    ``window`` steps: the difference of the per-step means with a 95 % interval (normal approximation,
    Welch standard error over steps) and a verdict — "as the seed" when the interval excludes 0 on the
    seed's side, "the opposite" when it excludes 0 on the other, "no clear change" otherwise."""
    frames = {"log": log, "summary": summary}
    rows = []
    for name, which, col, sign in SEED_SIGNATURE:
        f = frames[which]
        if col not in f or f.empty:
            continue
        f = f.dropna(subset=[col]).sort_values("step")
        first, last = f[col].head(window).to_numpy(float), f[col].tail(window).to_numpy(float)
        if len(first) < 2 or len(last) < 2:
            continue
        diff = last.mean() - first.mean()
        se = math.sqrt(first.var(ddof=1) / len(first) + last.var(ddof=1) / len(last))
        lo, hi = diff - 1.96 * se, diff + 1.96 * se
        verdict = ("as the seed" if (lo > 0 if sign > 0 else hi < 0) else
                   "the opposite" if (hi < 0 if sign > 0 else lo > 0) else "no clear change")
        rows.append({"measure": name, "seed": "rises" if sign > 0 else "falls", "first": first.mean(), "last": last.mean(),
                     "change": diff, "95% low": lo, "95% high": hi, "this run": verdict})
    return pd.DataFrame(rows)
