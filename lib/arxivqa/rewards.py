"""The RLVR reward: recall over all tool results, a query-redundancy penalty, a multi-turn bonus, four gates.

The seed (alphaXiv, "ArxivQA", §RLVR) describes its reward as "recall over all tool results minus a
Jaccard redundancy penalty across emitted queries, plus a multi-turn bonus, gated by duplication /
submission / citation / limit gates", without weights or exact formulas. The formulas and every
weight below are ours; each weight is a field of ``RewardConfig``.

For one rollout (a ``Trajectory``; every function here is pure and takes one):

- ``search_recall`` = |gold ∩ IDs shown by any tool result| / |gold|: the seed's R_search counts
  gold papers that appear anywhere in the rollout's tool results, not only in the submission.
  Without gold (``gold_in_corpus`` empty) it is 0.0: such a query gives no signal and should be left
  out of training (``corpus.select_queries``).
- ``redundancy`` = the mean, over the emitted search queries (``keyword_search`` / ``semantic_search``
  ``arguments["query"]``, errored calls included: they were emitted), of each query's highest Jaccard
  similarity to any *other* query, on lower-cased alphanumeric word sets; 0 with fewer than two
  queries. We take the mean of per-query maxima rather than the mean over all pairs because the
  latter is diluted by padding with distinct queries: for [A, A, B, C] (disjoint A, B, C) the pairwise
  mean is 1/6, the mean of maxima 0.5 (two of four queries have a twin). Penalty =
  ``redundancy_weight * redundancy`` (``redundancy_mode="subtract"``, the default), or that fraction of
  the recall (``"scale"``: recall × (1 − weight × redundancy)). Subtracted, a redundancy of 1 (one
  query emitted twice) costs 0.2 and cancels a search that found 1 of 8 gold papers (0.125): the
  reward is then 0 whether or not a paper was found, and GRPO sees no difference. Scaled, the found
  paper still counts, less.
- ``multi_turn_bonus`` = ``multi_turn_bonus * min(1, (n - 1) / (bonus_turns - 1))`` where n is the number
  of turns with at least one successful information-gathering call (``bonus_tools``; finish does not
  count): 0 for one such turn, the full bonus from ``bonus_turns`` on.
- Gates (``GATES``, name -> ``gate(traj, cfg) -> GateResult``): duplication (no identical call, same
  tool and normalised arguments, repeated more than ``max_duplicate_calls`` times), submission (finish
  succeeded), citation (every submitted ID was shown by some tool result), limit (≤ ``max_submit`` IDs,
  tool calls ≤ ``max_tool_calls``, turns ≤ ``max_turns``; defaults from ``records.Budgets``).
- ``rlvr_reward``: base = recall − penalty + bonus, clipped to [``clip_min``, ``clip_max``]; if a gate
  fails, total = ``gate_fail_reward`` instead. ``clip_min`` defaults to ``gate_fail_reward`` (0.0) so
  that passing every gate is never worse than failing one (else the policy could learn to fail gates).

``length_penalty`` is the stepped length penalty of the seed's RaR reward (also ours in its numbers):
the penalty of the largest token threshold strictly exceeded, 0 up to the first threshold.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from .records import (
    MAX_SUBMIT,
    SEARCH_TOOLS,
    Budgets,
    Trajectory,
    call_key,
    jaccard,
    search_queries,
    word_set,
)
from .records import search_recall as _search_recall

_BUDGETS = Budgets()


class RewardConfig(BaseModel):
    """Every weight and threshold of the RLVR reward (the numbers are ours; the seed gives none)."""

    redundancy_weight: float = Field(0.2, description="penalty per unit of query redundancy (0..1)")
    redundancy_mode: Literal["subtract", "scale"] = Field(
        "subtract", description="subtract: recall - weight*redundancy; scale: recall*(1 - weight*redundancy), "
                                "so redundancy shrinks a found paper's credit but never cancels it")
    multi_turn_bonus: float = Field(0.1, description="full bonus for multi-turn search")
    bonus_turns: int = Field(3, ge=2, description="search turns that earn the full bonus")
    bonus_tools: tuple[str, ...] = Field(("keyword_search", "semantic_search", "read_page"),
                                         description="tools whose (successful) calls make a turn count for the bonus")
    gates: tuple[str, ...] = Field(("duplication", "submission", "citation", "limit"), description="gates applied")
    gate_mode: Literal["zero"] = Field("zero", description="a failed gate replaces the reward by gate_fail_reward")
    gate_fail_reward: float = 0.0
    max_duplicate_calls: int = Field(0, ge=0, description="repeats of an identical call allowed")
    max_submit: int = MAX_SUBMIT
    max_tool_calls: int = _BUDGETS.max_tool_calls
    max_turns: int = _BUDGETS.max_turns
    clip_min: float | None = Field(0.0, description="lower clip of the gated-in reward (None: no clip)")
    clip_max: float | None = None
    length_steps: list[tuple[int, float]] = Field(
        default_factory=lambda: [(2000, 0.1), (4000, 0.25), (6000, 0.5)],
        description="(token threshold, penalty) steps of length_penalty")


@dataclass(frozen=True)
class GateResult:
    passed: bool
    reason: str = ""


class RewardBreakdown(BaseModel):
    total: float
    base: float
    search_recall: float
    redundancy: float
    redundancy_penalty: float
    multi_turn_bonus: float
    gates: dict[str, bool] = Field(default_factory=dict)
    failed_gates: list[str] = Field(default_factory=list)
    reasons: dict[str, str] = Field(default_factory=dict, description="why each failed gate failed")

    def components(self) -> dict[str, float]:
        """A flat dict of floats for logging (gates as 1.0 / 0.0)."""
        out = {k: float(getattr(self, k)) for k in
               ("total", "base", "search_recall", "redundancy", "redundancy_penalty", "multi_turn_bonus")}
        out |= {f"gate/{name}": float(ok) for name, ok in self.gates.items()}
        out["gates_passed"] = float(not self.failed_gates)
        return out


# --------------------------------------------------------------------------- components


def search_recall(traj: Trajectory) -> float:
    """``records.search_recall`` (the evaluation's measure) as a reward term: 0.0 without gold, where the
    measure is undefined (such queries are not trained on: ``corpus.select_queries``)."""
    r = _search_recall(traj)
    return 0.0 if math.isnan(r) else r


def redundancy(traj: Trajectory) -> float:
    """Mean over the emitted queries of each one's highest Jaccard similarity to another (0 for < 2)."""
    sets = [word_set(q) for q in search_queries(traj)]
    if len(sets) < 2:
        return 0.0
    return sum(max(jaccard(a, b) for j, b in enumerate(sets) if j != i) for i, a in enumerate(sets)) / len(sets)


def search_turns(traj: Trajectory, tools: Sequence[str] = SEARCH_TOOLS) -> int:
    """Turns with at least one successful call to one of ``tools``."""
    return sum(any(r.name in tools and not r.error for r in s.results) for s in traj.steps)


def multi_turn_bonus(traj: Trajectory, cfg: RewardConfig | None = None) -> float:
    cfg = cfg or RewardConfig()
    n = search_turns(traj, cfg.bonus_tools)
    return cfg.multi_turn_bonus * min(1.0, max(0, n - 1) / (cfg.bonus_turns - 1))


def length_penalty(tokens: int, steps: Sequence[tuple[int, float]] | None = None) -> float:
    """Penalty of the largest threshold that ``tokens`` strictly exceeds; 0 up to the first threshold."""
    steps = RewardConfig().length_steps if steps is None else steps
    penalty = 0.0
    for threshold, value in sorted(steps):
        if tokens > threshold:
            penalty = float(value)
    return penalty


# --------------------------------------------------------------------------- gates


def duplication_gate(traj: Trajectory, cfg: RewardConfig | None = None) -> GateResult:
    cfg = cfg or RewardConfig()
    counts = Counter(call_key(r.name, r.arguments) for r in traj.tool_results)
    worst, n = counts.most_common(1)[0] if counts else ("", 1)
    if n - 1 > cfg.max_duplicate_calls:
        return GateResult(False, f"call {worst[:120]} repeated {n - 1} times (allowed {cfg.max_duplicate_calls})")
    return GateResult(True)


def submission_gate(traj: Trajectory, cfg: RewardConfig | None = None) -> GateResult:
    if traj.submitted is None:
        return GateResult(False, "finish was never called successfully")
    return GateResult(True)


def citation_gate(traj: Trajectory, cfg: RewardConfig | None = None) -> GateResult:
    """Every submitted ID was shown by a tool result (vacuously true without a submission)."""
    unseen = [pid for pid in traj.submitted or [] if pid not in traj.seen_ids()]
    return GateResult(False, f"submitted IDs never shown by a tool: {unseen[:5]}") if unseen else GateResult(True)


def limit_gate(traj: Trajectory, cfg: RewardConfig | None = None) -> GateResult:
    """Submission size, attempted tool calls (budget-refused ones included) and turns within limits."""
    cfg = cfg or RewardConfig()
    problems = []
    if len(traj.submitted or []) > cfg.max_submit:
        problems.append(f"{len(traj.submitted)} IDs submitted > {cfg.max_submit}")
    if len(traj.tool_results) > cfg.max_tool_calls:
        problems.append(f"{len(traj.tool_results)} tool calls > {cfg.max_tool_calls}")
    if len(traj.steps) > cfg.max_turns:
        problems.append(f"{len(traj.steps)} turns > {cfg.max_turns}")
    return GateResult(False, "; ".join(problems)) if problems else GateResult(True)


GATES: dict[str, Callable[[Trajectory, RewardConfig | None], GateResult]] = {
    "duplication": duplication_gate, "submission": submission_gate, "citation": citation_gate, "limit": limit_gate,
}


def run_gates(traj: Trajectory, cfg: RewardConfig | None = None) -> dict[str, GateResult]:
    cfg = cfg or RewardConfig()
    return {name: GATES[name](traj, cfg) for name in cfg.gates}


# --------------------------------------------------------------------------- the reward


def rlvr_reward(traj: Trajectory, cfg: RewardConfig | None = None) -> RewardBreakdown:
    cfg = cfg or RewardConfig()
    recall, red = search_recall(traj), redundancy(traj)
    penalty = cfg.redundancy_weight * red * (recall if cfg.redundancy_mode == "scale" else 1.0)
    bonus = multi_turn_bonus(traj, cfg)
    base = recall - penalty + bonus
    if cfg.clip_min is not None:
        base = max(cfg.clip_min, base)
    if cfg.clip_max is not None:
        base = min(cfg.clip_max, base)
    gates = run_gates(traj, cfg)
    failed = [name for name, g in gates.items() if not g.passed]
    return RewardBreakdown(total=cfg.gate_fail_reward if failed else base, base=base, search_recall=recall,
                           redundancy=red, redundancy_penalty=penalty, multi_turn_bonus=bonus,
                           gates={name: g.passed for name, g in gates.items()}, failed_gates=failed,
                           reasons={name: gates[name].reason for name in failed})
