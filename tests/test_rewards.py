"""The RLVR reward on hand-built trajectories: components, gates, composition, the stepped length penalty."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from arxivqa.records import AssistantTurn, Step, ToolCall, ToolCallRecord, Trajectory
from arxivqa.rewards import (GATES, RewardConfig, citation_gate, duplication_gate, length_penalty, limit_gate,
                             multi_turn_bonus, redundancy, rlvr_reward, search_recall, submission_gate)

GOLD = ["g1", "g2", "g3", "g4"]


def res(name, ids=(), error=False, **args) -> ToolCallRecord:
    return ToolCallRecord(call_id=f"c{id(args)}", name=name, arguments=args, result="...", error=error, result_ids=list(ids))


def make(*turns, gold=GOLD, submitted=None) -> Trajectory:
    """Each turn: a list of ToolResults (the calls of that turn)."""
    steps = [Step(turn=i, assistant=AssistantTurn(text="thinking", tool_calls=[ToolCall(name=r.name, arguments=r.arguments)
                                                                               for r in results]), results=results)
             for i, results in enumerate(turns, 1)]
    return Trajectory(qid="q", query="sparse attention", gold_in_corpus=list(gold), policy="test", steps=steps,
                      submitted=submitted)


def kw(q, ids=(), **kw_):
    return res("keyword_search", ids, query=q, **kw_)


def sem(q, ids=(), **kw_):
    return res("semantic_search", ids, query=q, **kw_)


def finish(*ids):
    return res("finish", paper_ids=list(ids))


def good(n_turns=3, recall_ids=("g1", "g2")) -> Trajectory:
    topics = ["sparse attention", "graph networks", "diffusion models", "speech encoders", "protein folding"]
    turns = [[kw(topics[i], ids=[recall_ids[i]] if i < len(recall_ids) else ["x"])] for i in range(n_turns)]
    return make(*turns, [finish("g1")], submitted=["g1"])


# ---------------------------------------------------------------- components

def test_search_recall_counts_every_tool_result_not_only_the_submission():
    t = make([kw("a", ids=["g1", "x"]), res("read_page", ids=["g2"], paper_id="P-1")], [finish("g1")], submitted=["g1"])
    assert search_recall(t) == 0.5  # g1 and g2 were shown; only g1 submitted (submission recall would be 0.25)
    assert search_recall(make([kw("a", ids=["x"])], submitted=["x"])) == 0.0
    assert search_recall(make([kw("a", ids=["g1"])], gold=[])) == 0.0  # no gold: documented 0.0


def test_redundancy_is_the_mean_of_per_query_maximum_jaccard():
    assert redundancy(make([kw("sparse attention")])) == 0.0
    assert redundancy(make([kw("sparse attention"), sem("graph networks")])) == 0.0
    assert redundancy(make([kw("Sparse  Attention!")], [sem("sparse attention")])) == 1.0  # lower-cased words
    assert redundancy(make([kw("a b"), kw("a c")])) == pytest.approx(1 / 3)
    # one repeat among four: mean of maxima 0.5 (mean over all pairs would be 1/6)
    t = make([kw("sparse attention"), sem("sparse attention")], [kw("graph networks"), kw("diffusion models")])
    assert redundancy(t) == pytest.approx(0.5)
    # read_page / finish arguments are not queries
    assert redundancy(make([kw("sparse attention"), res("read_page", paper_id="sparse attention")])) == 0.0


def test_multi_turn_bonus_rises_with_search_turns_and_saturates():
    cfg = RewardConfig(multi_turn_bonus=0.1, bonus_turns=3)
    assert multi_turn_bonus(good(1), cfg) == 0.0
    assert multi_turn_bonus(good(2), cfg) == pytest.approx(0.05)
    assert multi_turn_bonus(good(3), cfg) == pytest.approx(0.1)
    assert multi_turn_bonus(good(5), cfg) == pytest.approx(0.1)
    # finish-only turns and errored calls do not count
    assert multi_turn_bonus(make([kw("a")], [kw("b", error=True)], [finish()]), cfg) == 0.0
    with pytest.raises(ValidationError):
        RewardConfig(bonus_turns=1)


def test_stepped_length_penalty_at_and_around_thresholds():
    steps = [(2000, 0.1), (4000, 0.25), (6000, 0.5)]
    expect = {0: 0.0, 1999: 0.0, 2000: 0.0, 2001: 0.1, 4000: 0.1, 4001: 0.25, 6000: 0.25, 6001: 0.5, 10**6: 0.5}
    assert {n: length_penalty(n, steps) for n in expect} == expect
    assert length_penalty(5000) == 0.25  # the config's default steps
    assert length_penalty(3000, [(4000, 0.3), (1000, 0.05)]) == 0.05  # order of steps does not matter
    assert length_penalty(10**6, []) == 0.0


# ---------------------------------------------------------------- gates

def test_duplication_gate():
    assert duplication_gate(make([kw("sparse attention"), sem("sparse attention")])).passed  # other tool
    assert duplication_gate(make([kw("sparse attention")], [kw("sparse attention", max_results=20)])).passed
    dup = make([kw("sparse attention")], [kw("  Sparse   ATTENTION ")])
    g = duplication_gate(dup)
    assert not g.passed and "repeated 1 times" in g.reason
    assert duplication_gate(dup, RewardConfig(max_duplicate_calls=1)).passed
    assert not duplication_gate(make([kw("a"), kw("a"), kw("a")]), RewardConfig(max_duplicate_calls=1)).passed
    assert not duplication_gate(make([res("read_page", paper_id="P-1")], [res("read_page", paper_id="P-1")])).passed


def test_submission_gate():
    assert submission_gate(make([kw("a")], submitted=[])).passed  # finish with no IDs still ends the task
    g = submission_gate(make([kw("a")], submitted=None))
    assert not g.passed and "finish" in g.reason


def test_citation_gate():
    assert citation_gate(make([kw("a", ids=["g1", "x"])], submitted=["x", "g1"])).passed
    assert citation_gate(make([kw("a")], submitted=None)).passed  # vacuous; the submission gate catches it
    g = citation_gate(make([kw("a", ids=["g1"])], submitted=["g1", "g2"]))
    assert not g.passed and "g2" in g.reason


def test_limit_gate():
    ids = [f"x{i}" for i in range(11)]
    assert limit_gate(make([kw("a", ids=ids[:10])], submitted=ids[:10])).passed
    assert not limit_gate(make([kw("a", ids=ids)], submitted=ids)).passed
    t = make([kw("a"), kw("b")], [kw("c"), kw("d")])
    assert limit_gate(t, RewardConfig(max_tool_calls=4, max_turns=2)).passed
    g = limit_gate(t, RewardConfig(max_tool_calls=3))
    assert not g.passed and "tool calls" in g.reason
    assert not limit_gate(t, RewardConfig(max_turns=1)).passed
    assert RewardConfig().max_turns == 10 and RewardConfig().max_tool_calls == 30  # agent.Budgets defaults


# ---------------------------------------------------------------- composition

def test_reward_composition_when_every_gate_passes():
    cfg = RewardConfig(redundancy_weight=0.2, multi_turn_bonus=0.1, bonus_turns=3)
    t = make([kw("sparse attention", ids=["g1"]), sem("sparse attention transformers", ids=["g2"])],
             [kw("graph networks", ids=["g3"])], [finish("g1")], submitted=["g1"])
    r = rlvr_reward(t, cfg)
    # recall 3/4 from tool results (only g1 submitted); redundancy: maxima 2/3, 2/3, 0 -> 4/9; two search turns
    assert r.search_recall == 0.75 and r.redundancy == pytest.approx(4 / 9)
    assert r.redundancy_penalty == pytest.approx(0.2 * 4 / 9) and r.multi_turn_bonus == pytest.approx(0.05)
    assert r.total == pytest.approx(0.75 - 0.2 * 4 / 9 + 0.05) and r.failed_gates == []
    c = r.components()
    assert c["total"] == r.total and c["gates_passed"] == 1.0 and set(GATES) <= {k.split("/")[1] for k in c if "/" in k}
    assert all(isinstance(v, float) for v in c.values())


@pytest.mark.parametrize("broken,gate", [
    (lambda t: t.model_copy(update={"submitted": None}), "submission"),
    (lambda t: t.model_copy(update={"submitted": ["g1", "never-shown"]}), "citation"),
    (lambda t: make(*[[kw("sparse attention", ids=["g1"])]] * 2, submitted=["g1"]), "duplication"),
    (lambda t: make(*[[kw(f"topic {i}", ids=["g1"])] for i in range(11)], submitted=["g1"]), "limit"),
])
def test_a_failed_gate_gives_the_gate_fail_reward(broken, gate):
    t = broken(good(3))
    assert rlvr_reward(good(3)).total > 0
    r = rlvr_reward(t, RewardConfig(gate_fail_reward=-1.0))
    assert r.total == -1.0 and r.failed_gates == [gate] and not r.gates[gate] and gate in r.reasons
    assert r.search_recall > 0 and r.components()["gates_passed"] == 0.0
    assert rlvr_reward(t).total == 0.0  # default gate_fail_reward
    assert rlvr_reward(t, RewardConfig(gates=tuple(g for g in GATES if g != gate))).failed_gates == []


def test_recall_in_tool_results_is_rewarded_without_being_submitted():
    seen_not_submitted = make([kw("sparse attention", ids=["g1", "g2"])], [finish()], submitted=[])
    assert rlvr_reward(seen_not_submitted).total == 0.5
    assert rlvr_reward(make([kw("sparse attention", ids=["x"])], [finish()], submitted=[])).total == 0.0


def test_redundant_queries_lower_the_reward():
    fresh = make([kw("sparse attention", ids=["g1"])], [kw("graph networks")], [finish("g1")], submitted=["g1"])
    # a reordered query is not an identical call (duplication passes) but is fully redundant
    stale = make([kw("sparse attention", ids=["g1"])], [kw("attention sparse")], [finish("g1")], submitted=["g1"])
    a, b = rlvr_reward(fresh), rlvr_reward(stale)
    assert a.failed_gates == b.failed_gates == []
    assert b.redundancy == 1.0 and a.total - b.total == pytest.approx(RewardConfig().redundancy_weight)



def test_scaled_redundancy_shrinks_a_found_paper_but_never_cancels_it():
    # one gold paper of eight found, the search then emitted again (a refused repeat still counts as emitted)
    gold = [f"g{i}" for i in range(1, 9)]
    found = make([kw("sparse attention", ids=["g1"])], [kw("sparse attention", error=True)], [finish("g1")],
                 submitted=["g1"], gold=gold)
    missed = make([kw("sparse attention", ids=["x"])], [kw("sparse attention", error=True)], [finish("x")],
                  submitted=["x"], gold=gold)
    allow = dict(max_duplicate_calls=1)
    sub, scaled = RewardConfig(**allow), RewardConfig(**allow, redundancy_mode="scale")
    assert rlvr_reward(found, sub).total == rlvr_reward(missed, sub).total == 0.0  # 0.125 - 0.2, clipped: the find is lost
    r = rlvr_reward(found, scaled)
    assert r.redundancy == 1.0 and r.redundancy_penalty == pytest.approx(0.125 * 0.2)
    assert r.total == pytest.approx(0.125 * (1 - 0.2)) and rlvr_reward(missed, scaled).total == 0.0
    fresh = make([kw("sparse attention", ids=["g1"])], [kw("graph networks")], [finish("g1")], submitted=["g1"],
                 gold=gold)
    assert rlvr_reward(fresh, scaled).total > r.total  # redundancy still costs
    with pytest.raises(ValidationError):
        RewardConfig(redundancy_mode="divide")

def test_the_bonus_rises_with_turns_at_equal_recall():
    totals = [rlvr_reward(good(n, recall_ids=("g1",))).total for n in (1, 2, 3, 4)]
    assert totals[0] == 0.25 and totals[0] < totals[1] < totals[2] == totals[3]


def test_clipping_keeps_passing_gates_at_least_as_good_as_failing():
    t = make([kw("sparse attention"), sem("sparse attention")], [finish()], submitted=[])  # no recall, redundant
    assert rlvr_reward(t).total == 0.0 and rlvr_reward(t).base == 0.0
    unclipped = rlvr_reward(t, RewardConfig(clip_min=None))
    assert unclipped.total == pytest.approx(-0.2)
    assert rlvr_reward(good(3, ("g1", "g2", "g3")), RewardConfig(clip_max=0.5)).total == 0.5
