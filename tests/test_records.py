"""The episode vocabulary (arxivqa.records): one record per thing, each measure defined once."""

import ast
import json
import math
from pathlib import Path

import arxivqa
from arxivqa.records import (AssistantTurn, Hit, Step, ToolCall, ToolCallRecord, Trajectory, clean_text, clean_value,
                             content_words, echo, search_queries, search_recall, submission_recall,
                             trajectory_markdown, trajectory_view, words)

LIB = Path(arxivqa.__file__).parent


def _traj(gold=("2501.00001",)):
    hits = [Hit(arxiv_id="2501.00001", id="P-aaaaaaaa", title="Sparse attention", published="2025-01-01", rank=1),
            Hit(arxiv_id="2501.00002", id="P-bbbbbbbb", title="Linear transformers", published="2025-01-02", rank=2)]
    s1 = Step(turn=1, assistant=AssistantTurn(text="Search both ways."), results=[
        ToolCallRecord(name="keyword_search", arguments={"query": "Sparse Attention!"}, result="2 papers", hits=hits),
        ToolCallRecord(name="semantic_search", arguments={"query": "x" * 5}, result="Error: x", error=True)])
    s2 = Step(turn=2, assistant=AssistantTurn(text="Done."), results=[
        ToolCallRecord(name="finish", arguments={"paper_ids": ["P-bbbbbbbb"]}, result="Submitted 1 papers.")])
    return Trajectory(qid="q", query="sparse attention", gold_in_corpus=list(gold), policy="t", steps=[s1, s2],
                      submitted=["2501.00002"], stop_reason="finished")


def test_one_tokeniser():
    assert words("GRPO-based RL, 2025!") == ["grpo", "based", "rl", "2025"]
    assert content_words("What are the recent papers on GRPO-based RL?") == ["grpo", "rl"]


def test_measures_are_defined_once_and_the_reward_calls_the_evaluation():
    from arxivqa import rewards
    from arxivqa.evaluate import trajectory_metrics

    t = _traj()
    assert search_queries(t) == ["Sparse Attention!", "xxxxx"]  # errored calls were emitted too
    assert search_recall(t) == 1.0 and submission_recall(t) == 0.0
    assert trajectory_metrics(t)["search_recall"] == search_recall(t) == rewards.search_recall(t)
    no_gold = _traj(gold=())
    assert math.isnan(search_recall(no_gold)) and math.isnan(trajectory_metrics(no_gold)["search_recall"])
    assert rewards.search_recall(no_gold) == 0.0  # no gold: no signal, stated, not a different definition


def test_the_view_is_built_from_hits_not_from_tool_text():
    t = _traj()
    view = trajectory_view(t)
    kw, sem = view["turns"][0]["calls"]
    assert kw["results"][0] == "P-aaaaaaaa (2025-01-01): Sparse attention" and kw["n_results"] == 2
    assert sem["error"] == "tool_error" and "results" not in sem  # an error is a code, never the echoed text
    assert view["submitted_titles"] == ["Linear transformers"]
    md = trajectory_markdown(t, reward=0.25)
    assert "reward 0.250" in md and "2 papers, 1 gold" in md and "Linear transformers" in md


def test_records_saved_before_hits_existed_still_load():
    old = {"name": "keyword_search", "arguments": {"query": "q"}, "result": "...", "result_ids": ["1", "2"]}
    assert ToolCallRecord.model_validate(old).result_ids == ["1", "2"]


def test_model_text_is_made_storable_and_bounded():
    assert clean_text("a\ud800b\x00c\n") == "a\ufffdbc\n"
    deep = json.loads("[" * 500 + "]" * 500)
    stored = clean_value({"q": "x" * 1_000_000, "deep": deep, **{f"k{i}": i for i in range(100)}})
    assert len(json.dumps(stored)) < 10_000
    assert len(echo("y" * 1_000_000)) < 100
    call = ToolCall(name="n" * 1000, arguments={"query": "\ud800" * 10})
    json.loads(call.model_dump_json())  # valid UTF-8 JSON


def test_no_module_imports_the_agent_for_record_types():
    """rewards, judge, diagnostics, evaluate and records take their types from records, not agent.py
    (which loads models)."""
    for name in ("records", "rewards", "judge", "diagnostics", "evaluate", "ablations"):
        tree = ast.parse((LIB / f"{name}.py").read_text())
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        assert not any(isinstance(n, ast.ImportFrom) and n.module == "agent" for n in top), name
