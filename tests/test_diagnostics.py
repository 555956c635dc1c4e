"""Collapse diagnostics on hand-built rollouts: measures, the four failure-mode detectors, frames, TRL logs."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from arxivqa.records import AssistantTurn, Step, ToolCall, ToolCallRecord, Trajectory
from arxivqa.diagnostics import (FAILURE_MODES, DiagnosticsConfig, detect_latent_knowledge,
                                 detect_no_exploration, detect_no_reasoning_between_calls, detect_rephrasing,
                                 is_single_kw_single_sem, query_similarity, reasoning_before_tool_turn,
                                 reasoning_tokens, refined_queries, rollout_frame, salient_terms, step_summary,
                                 trl_log_frame, ungrounded_claims)

QUERY = "What are recent papers on sparse attention for long context transformers?"


def res(name, result="...", ids=(), **args) -> ToolCallRecord:
    return ToolCallRecord(call_id=f"c{id(args)}", name=name, arguments=args, result=result, result_ids=list(ids))


def turn(text, *results) -> tuple:
    return text, list(results)


def make(*turns, query=QUERY, submitted=("x1",)) -> Trajectory:
    """Each turn: (reasoning text, [ToolCallRecord, ...])."""
    steps = [Step(turn=i, assistant=AssistantTurn(text=text, tool_calls=[ToolCall(name=r.name, arguments=r.arguments)
                                                                         for r in results]), results=results)
             for i, (text, results) in enumerate(turns, 1)]
    return Trajectory(qid="q", query=query, gold_in_corpus=["x1"], policy="test", steps=steps,
                      submitted=None if submitted is None else list(submitted))


def kw(q, result="..."):
    return res("keyword_search", result, query=q)


def sem(q, result="..."):
    return res("semantic_search", result, query=q)


def finish():
    return res("finish", "Submitted.", paper_ids=["P-1"])


RESULTS_1 = ("[1] id: P-1 | title: Longformer: the long-document transformer. snippet: sliding window attention "
             "with global tokens. [2] id: P-2 | title: BigBird: transformers for longer sequences, block sparse "
             "attention with random tokens, linear memory.")


def good() -> Trajectory:
    """Four turns: search, refine from what the results named, read, finish; reasoning in every turn."""
    return make(
        turn("I will start with the core terms of the request and then refine from what the results show.",
             kw("sparse attention long context", RESULTS_1)),
        turn("The results name Longformer and BigBird. Longformer uses a sliding window with global tokens, "
             "BigBird adds random block sparse patterns. I will search those two mechanisms separately.",
             kw("sliding window global tokens Longformer"), sem("block sparse random attention BigBird")),
        turn("BigBird claims linear memory; I should read it to check that it fits the request.",
             res("read_page", "BigBird page text", paper_id="P-2")),
        turn("Both papers fit; submitting them.", finish()))


def collapsed() -> Trajectory:
    """The seed's collapse: one keyword + one semantic search with the user query, then finish, silently."""
    return make(turn("", kw("sparse attention long context transformers", RESULTS_1),
                     sem("recent papers on sparse attention for long context transformers")),
                turn("", finish()))


LATENT = ("From what I remember, Reformer by Kitaev (2020) used LSH attention, Performer by Choromanski in 2021 "
          "used FAVOR+ random features, and Linformer projects keys to a fixed 256 length. FlashAttention-2 from "
          "2023 made exact attention fast. These are the key works I expect to see in the results.")


# ---------------------------------------------------------------- per-rollout measures

def test_reasoning_tokens_and_per_turn_reasoning():
    assert reasoning_tokens("<think>\n</think>") == 0 and reasoning_tokens("<think>a b</think> c") == 3
    t = good()
    assert reasoning_before_tool_turn(t, 1) == 18 and reasoning_before_tool_turn(t, 3) == 15
    assert math.isnan(reasoning_before_tool_turn(collapsed(), 3))
    assert reasoning_before_tool_turn(collapsed(), 2) == 0


def test_single_kw_single_sem():
    assert is_single_kw_single_sem(collapsed())
    assert is_single_kw_single_sem(make(turn("", kw("a"), sem("b"))))
    assert not is_single_kw_single_sem(make(turn("", kw("a"), sem("b"), kw("c")), turn("", finish())))
    assert not is_single_kw_single_sem(make(turn("", kw("a"), sem("b"), res("read_page", paper_id="P-1"))))
    assert not is_single_kw_single_sem(good())


def test_query_similarity():
    assert query_similarity("sparse attention long context transformers", QUERY) == 1.0  # stop words dropped
    assert query_similarity("Sparse attention for long-context transformer models", QUERY) > 0.8
    assert query_similarity("GRPO math reasoning", QUERY) < 0.4
    assert query_similarity("the of", QUERY) == 0.0


def test_refined_queries():
    assert refined_queries(good()) == 2
    same_again = make(turn("a", kw("sparse attention")), turn("b", kw("Sparse Attention")))
    assert refined_queries(same_again) == 0


def test_salient_terms_and_grounding_is_causal():
    assert salient_terms("I think the Longformer paper from 2020 and GPT-4 by Zaheer et al. are key. The end.") == \
        ["Longformer", "2020", "GPT-4", "Zaheer"]
    assert ungrounded_claims(good()) == (2, 0)  # Longformer, BigBird: both from the first results
    named_first = make(turn("I bet Longformer and BigBird are the answer.", kw("sparse attention", RESULTS_1)),
                       turn("Longformer it is.", finish()))
    assert ungrounded_claims(named_first) == (2, 2)  # named before any result showed them


# ---------------------------------------------------------------- failure modes

def test_the_good_rollout_shows_no_failure_mode():
    t = good()
    assert {name: fn(t) for name, fn in FAILURE_MODES.items()} == dict.fromkeys(FAILURE_MODES, False)


def test_the_collapsed_rollout_shows_exploration_rephrasing_and_silence_failures():
    t = collapsed()
    assert detect_no_exploration(t) and detect_rephrasing(t) and detect_no_reasoning_between_calls(t)
    assert not detect_latent_knowledge(t)  # no reasoning at all


def test_no_exploration_fires_on_a_repeated_second_search():
    t = make(turn("Start broad.", kw("sparse attention long context", RESULTS_1)),
             turn("Try again.", kw("Sparse attention, long context")), turn("Done.", finish()))
    assert detect_no_exploration(t)
    assert not detect_no_exploration(t, DiagnosticsConfig(refine_max_jaccard=1.01, min_refined_queries=1))


def test_latent_knowledge_fires_on_reasoning_the_results_never_showed():
    bad = make(turn(LATENT, kw("sparse attention long context", RESULTS_1)), turn("Done.", finish()))
    assert detect_latent_knowledge(bad)
    grounded = make(turn("Start.", kw("efficient attention", LATENT)), turn(LATENT, finish()))
    assert not detect_latent_knowledge(grounded)  # the same names, shown by a result before they were written
    late = make(turn(LATENT, kw("efficient attention", LATENT)), turn("Done.", finish()))
    assert detect_latent_knowledge(late)  # shown only after they were written
    short = make(turn("I recall Reformer, Performer and Linformer.", kw("x")), turn("Done.", finish()))
    assert not detect_latent_knowledge(short)  # too little reasoning to count
    assert detect_latent_knowledge(short, DiagnosticsConfig(latent_min_reasoning_tokens=3))


def test_no_reasoning_between_calls():
    t = good()
    silent = make(*[(("" if i in (1, 2) else s.assistant.text), s.results) for i, s in enumerate(t.steps)])
    assert detect_no_reasoning_between_calls(silent) and not detect_no_reasoning_between_calls(t)
    one_turn = make(turn("", kw("a"), sem("b"), finish()))
    assert not detect_no_reasoning_between_calls(one_turn)  # no 2nd tool-calling turn
    terse = make(turn("", kw("a")), turn("Searching more.", kw("b")))
    assert not detect_no_reasoning_between_calls(terse)
    assert detect_no_reasoning_between_calls(terse, DiagnosticsConfig(silent_max_words=2))


def test_rephrasing_needs_most_queries_to_echo_the_user_query():
    echo = "sparse attention long context transformers"
    assert detect_rephrasing(make(turn("", kw(echo), sem(QUERY))))
    assert not detect_rephrasing(make(turn("", kw(echo), sem("BigBird block sparse"))))  # half: not most
    assert detect_rephrasing(make(turn("", kw(echo), sem("BigBird block sparse"))),
                             DiagnosticsConfig(rephrase_min_share=0.5))
    assert not detect_rephrasing(make(turn("", finish())))  # no queries


# ---------------------------------------------------------------- frames

def test_rollout_frame_and_step_summary():
    frame = rollout_frame([good(), collapsed()], step=0)
    assert len(frame) == 2 and (frame["step"] == 0).all()
    g, c = frame.iloc[0], frame.iloc[1]
    assert (g.tool_calls, g.distinct_tools, g.turns, g.search_turns) == (5, 4, 4, 2)
    assert (c.tool_calls, c.distinct_tools, c.single_kw_single_sem, c.reasoning_turn2) == (3, 3, True, 0)
    assert c.rephrase_sim_max == 1.0 and c.fm_rephrasing and not g.fm_rephrasing
    steps = step_summary(pd.concat([frame, rollout_frame([collapsed(), collapsed()], step=1)], ignore_index=True))
    assert list(steps["step"]) == [0, 1] and list(steps["rollouts"]) == [2, 2]
    assert list(steps["single_kw_single_sem_rate"]) == [0.5, 1.0]
    assert list(steps["fm_no_exploration_rate"]) == [0.5, 1.0] and list(steps["fm_latent_knowledge_rate"]) == [0, 0]
    assert list(steps["tool_calls_mean"]) == [4.0, 3.0] and list(steps["tool_calls_median"]) == [4.0, 3.0]
    assert steps.loc[0, "tool_calls_q90"] == pytest.approx(4.8)
    assert step_summary(rollout_frame([])).empty


def test_trl_log_frame():
    log = [
        {"loss": 0.1, "reward": 0.3, "rewards/rlvr/mean": 0.3, "rewards/rlvr/std": 0.1, "step": 1, "epoch": 0.1,
         "some/new_metric": "text"},
        {"step": 2, "entropy": 1.2, "kl": None, "rewards/rar/mean": 0.5, "clip_ratio/region_mean": 0.01},
        {"eval_reward": 0.2, "step": 2},
        {"train_runtime": 10.0, "train_loss": 0.2, "step": 2},
    ]
    f = trl_log_frame(log)
    assert len(f) == 2 and list(f["step"]) == [1, 2]
    assert {"rewards/rlvr/mean", "rewards/rar/mean", "frac_reward_zero_std", "tools/call_frequency"} <= set(f.columns)
    assert "some/new_metric" not in f.columns and "train_runtime" not in f.columns
    assert f.loc[0, "loss"] == 0.1 and math.isnan(f.loc[1, "loss"]) and math.isnan(f.loc[1, "kl"])
    assert f.loc[1, "rewards/rar/mean"] == 0.5 and math.isnan(f.loc[0, "rewards/rar/mean"])
    assert math.isnan(f.loc[0, "tools/call_frequency"])
    assert trl_log_frame([]).empty


def test_gold_by_tool_counts_what_each_search_surfaced_and_what_only_it_did():
    from arxivqa.diagnostics import gold_by_tool
    from arxivqa.records import AssistantTurn, Hit, Trajectory, ToolCall, ToolCallRecord

    def traj(kw, sem):
        t = Trajectory.start({"qid": "q", "query": "x", "gold_in_corpus": ["g1", "g2"]}, "p")
        step = t.add_step(AssistantTurn(tool_calls=[ToolCall(name="keyword_search", arguments={"query": "x"})]))
        step.results.append(ToolCallRecord(name="keyword_search", arguments={"query": "x"}, hits=[Hit(arxiv_id=i) for i in kw]))
        step.results.append(ToolCallRecord(name="semantic_search", arguments={"query": "x"}, hits=[Hit(arxiv_id=i) for i in sem]))
        return t

    table = gold_by_tool([traj(["g1", "n"], ["g1", "g2"]), traj(["g2"], ["n"])]).set_index("tool")
    assert table.loc["keyword_search", "gold_surfaced"] == 2 and table.loc["semantic_search", "gold_surfaced"] == 2
    assert table.loc["keyword_search", "only_this_tool"] == 1 and table.loc["semantic_search", "only_this_tool"] == 1
    assert abs(table.loc["keyword_search", "share_of_surfaced"] - 2 / 3) < 1e-9


def test_seed_verdict_says_as_the_seed_only_when_the_change_is_beyond_noise():
    import numpy as np
    import pandas as pd

    from arxivqa.diagnostics import seed_verdict

    rng = np.random.default_rng(0)
    steps = np.arange(1, 41)
    log = pd.DataFrame({"step": steps, "reward": np.r_[np.full(20, 0.1), np.full(20, 0.5)] + rng.normal(0, 0.02, 40),
                        "entropy": np.r_[np.full(20, 0.5), np.full(20, 0.8)] + rng.normal(0, 0.02, 40)})
    summary = pd.DataFrame({"step": steps, "tool_calls_mean": 4 + rng.normal(0, 0.5, 40)})
    v = seed_verdict(summary, log, window=10).set_index("measure")["this run"]
    assert v["reward (TRL)"] == "as the seed"  # rose well beyond its noise
    assert v["entropy"] == "the opposite"  # the seed's entropy falls; this one rose
    assert v["tool calls per rollout"] == "no clear change"  # noise only


def test_verdict_window_is_a_quarter_of_the_run_within_2_and_20_steps():
    from arxivqa.diagnostics import verdict_window

    assert [verdict_window(n) for n in (1, 8, 12, 40, 100, 400)] == [2, 2, 3, 10, 20, 20]
    assert all(2 * verdict_window(n) <= n for n in range(4, 500))  # first and last never overlap from 4 steps on
