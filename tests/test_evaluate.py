import json
import pandas as pd
import pytest

from arxivqa.corpus import Query
from arxivqa.evaluate import bootstrap_ci, one_shot_baselines, rrf, summarize
from arxivqa.records import recall_at_k
from conftest import by_title


def test_recall_at_k():
    assert recall_at_k(["a", "b", "c"], ["a", "c", "z", "y"], 2) == 0.25
    assert recall_at_k(["a", "b", "c"], ["a", "c"]) == 1.0
    with pytest.raises(ValueError):
        recall_at_k(["a"], [])


def test_rrf_rewards_agreement():
    fused = rrf([["a", "b", "c"], ["d", "b", "c"]])
    assert fused[0] == "b" and set(fused) == {"a", "b", "c", "d"}
    assert rrf([["x", "y"]]) == ["x", "y"]


def test_bootstrap_ci_brackets_the_mean():
    lo, hi = bootstrap_ci([0.0, 1.0] * 20)
    assert lo < 0.5 < hi


def test_baselines_on_the_tiny_index(built_index, papers):
    target = by_title(papers, "Rubrics as rewards")
    queries = [
        Query(qid="q1", query="LLM judge rubric reward for reinforcement learning", gold_in_corpus=[target.arxiv_id], difficulty="easy"),
        Query(qid="q2", query="no gold here", gold_in_corpus=[], difficulty="hard"),
    ]
    per_query = one_shot_baselines(built_index, queries, ks=(1, 10), depth=10)
    assert set(per_query["method"]) == {"bm25", "dense", "hybrid"} and set(per_query["qid"]) == {"q1"}
    assert (per_query["recall@10"] == 1.0).all()
    table = summarize(per_query)
    assert set(table["difficulty"]) == {"easy", "all"}
    assert (table["n"] == 1).all()


def test_summarize_means_per_difficulty():
    df = pd.DataFrame({"qid": ["a", "b", "c"], "difficulty": ["easy", "easy", "hard"], "method": ["m"] * 3,
                       "recall@10": [1.0, 0.0, 0.5]})
    t = summarize(df).set_index("difficulty")
    assert t.loc["easy", "recall@10"] == 0.5 and t.loc["all", "n"] == 3
    assert t.loc["all", "recall@10"] == pytest.approx(0.5)


# ---------------------------------------------------------------- held-out evaluation helpers (notebooks 06/07)

def _scripted_policy_factory(calls):
    from arxivqa.agent import parse_tool_calls
    from arxivqa.records import AssistantTurn

    class Finisher:
        name = "finisher"

        def chat(self, messages, tools, max_new_tokens):
            calls.append(messages[1]["content"])
            text, tc, problems = parse_tool_calls('<tool_call>{"name": "finish", "arguments": {"paper_ids": []}}</tool_call>')
            return AssistantTurn(text=text, raw="", tool_calls=tc, parse_problems=problems, prompt_tokens=10,
                                 completion_tokens=5, seconds=0.0)

    return lambda spec, **kw: Finisher()


def test_cached_agent_eval_reuses_finished_episodes(built_index, papers, tmp_path, monkeypatch):
    import arxivqa.agent as agent_mod
    from arxivqa.records import Budgets
    from arxivqa.evaluate import cached_agent_eval

    calls = []
    monkeypatch.setattr(agent_mod, "make_policy", _scripted_policy_factory(calls))
    qs = [Query(qid=f"q{i}", query=p.title, gold_in_corpus=[p.arxiv_id]) for i, p in enumerate(papers[:3])]
    path = tmp_path / "eval" / "x.trajectories.jsonl"
    first = cached_agent_eval("local", qs[:2], path, built_index, Budgets(max_turns=2), progress=False)
    assert [t.qid for t in first] == ["q0", "q1"] and len(calls) == 2
    again = cached_agent_eval("local", qs, path, built_index, Budgets(max_turns=2), progress=False)
    assert [t.qid for t in again] == ["q0", "q1", "q2"] and calls[2:] == [qs[2].query]  # only the new query ran
    # other budgets (or another policy) are another evaluation: nothing is reused
    cached_agent_eval("local", qs[:1], path, built_index, Budgets(max_turns=3), progress=False)
    assert len(calls) == 4


def test_eval_queries_reads_any_file_in_the_train_format(tmp_path, papers, monkeypatch):
    from arxivqa.evaluate import eval_queries
    from conftest import write_jsonl

    qfile = write_jsonl(tmp_path / "held_out.jsonl", [
        {"qid": f"h{i}", "query": p.title, "gold_in_corpus": [p.arxiv_id], "difficulty": "hard"}
        for i, p in enumerate(papers[:4])] + [{"qid": "none", "query": "x", "gold_in_corpus": []}])
    monkeypatch.setenv("ARXIVQA_EVAL_QUERIES_FILE", str(qfile))
    monkeypatch.setenv("ARXIVQA_EVAL_SPLIT", "all")
    monkeypatch.setenv("ARXIVQA_EVAL_LIMIT", "3")
    queries, tag = eval_queries()
    assert [q.qid for q in queries] == ["h0", "h1", "h2"] and tag == "held_out-all3"
    with pytest.raises(ValueError, match="split"):
        eval_queries(split="test")


def test_eval_budgets_and_cache_names(monkeypatch):
    from arxivqa.records import Budgets
    from arxivqa.evaluate import eval_budgets, trajectory_cache

    monkeypatch.setenv("ARXIVQA_EVAL_BUDGETS", "2,4,384,160")
    assert eval_budgets() == Budgets(2, 4, 384, 160)
    monkeypatch.setenv("ARXIVQA_EVAL_BUDGETS", "2,four")
    with pytest.raises(ValueError, match="four integers"):
        eval_budgets()
    assert trajectory_cache("run:/x/data/runs/rar-a/", "t").name == "run-rar-a.t.trajectories.jsonl"
    assert trajectory_cache("openai:gpt-4.1-mini@https://api.openai.com/v1", "t").name == "openai-gpt-4.1-mini.t.trajectories.jsonl"


def test_episodes_the_policy_failed_are_run_again(built_index, papers, tmp_path, monkeypatch):
    import arxivqa.agent as agent_mod
    from arxivqa.evaluate import cached_agent_eval

    class Down:
        name = "down"

        def chat(self, messages, tools, max_new_tokens):
            raise ConnectionError("endpoint unreachable")

    monkeypatch.setattr(agent_mod, "make_policy", lambda spec, **kw: Down())
    qs = [Query(qid="q0", query=papers[0].title, gold_in_corpus=[papers[0].arxiv_id])]
    path = tmp_path / "x.trajectories.jsonl"
    (failed,) = cached_agent_eval("local", qs, path, built_index, progress=False)
    assert failed.stop_reason.startswith("policy_error: ConnectionError")
    calls = []
    monkeypatch.setattr(agent_mod, "make_policy", _scripted_policy_factory(calls))
    (ok,) = cached_agent_eval("local", qs, path, built_index, progress=False)
    assert calls and ok.stop_reason == "finished"


def test_a_runs_evaluations_come_latest_steps_first_whatever_the_file_times(tmp_path):
    import os

    from arxivqa.evaluate import heldout_of_run

    def write(name, steps, mtime):
        bench = {"policies": ["run:results/runs/r"], "run_steps": {"run:results/runs/r": steps} if steps else {}}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"bench": bench, "table": [{"method": "run:r", "recall@10": 0.1}]}))
        os.utime(path, (mtime, mtime))

    write("at100", 100, 1e9)  # the oldest file holds the most steps (as after a fresh checkout)
    write("at40", 40, 3e9)
    write("before-steps-were-kept", None, 4e9)
    write("at70", 70, 2e9)
    assert [f["file"] for f in heldout_of_run("r", tmp_path)] == ["at100.json", "at70.json", "at40.json",
                                                                 "before-steps-were-kept.json"]
    # the same adapter seen with more hits a search (--result-cap) is another view: after the run's own
    bench = {"policies": ["run:results/runs/r"], "run_steps": {"run:results/runs/r": 100}, "result_cap_override": 10}
    (tmp_path / "at100-hits10.json").write_text(json.dumps({"bench": bench, "table": [{"method": "run:r", "recall@10": 0.1}]}))
    found = heldout_of_run("r", tmp_path)
    assert found[0]["file"] == "at100.json" and found[-1]["file"] == "at100-hits10.json"
    assert found[-1]["result_cap_override"] == 10 and found[0]["result_cap_override"] is None
    # another policy (a warm start) evaluated through the run's view: listed after every evaluation of the run
    bench = {"policies": ["local:warm"], "view": "run:results/runs/r", "run_steps": {}}
    (tmp_path / "warm.json").write_text(json.dumps({"bench": bench, "table": [{"method": "local:warm"}]}))
    found = heldout_of_run("r", tmp_path)
    assert found[-1]["file"] == "warm.json" and not found[-1]["includes_run"] and found[-1]["steps"] is None
    assert all(f["includes_run"] for f in found[:-1]) and found[0]["file"] == "at100.json"
    assert heldout_of_run("another", tmp_path) == []
    # the same steps evaluated on the full index (a newer or older file alike): before the demo index's
    bench = {"policies": ["run:results/runs/r"], "run_steps": {"run:results/runs/r": 100}, "scale": "full"}
    (tmp_path / "at100-full.json").write_text(json.dumps({"bench": bench, "table": [{"method": "run:r"}]}))
    os.utime(tmp_path / "at100-full.json", (0.5e9, 0.5e9))
    assert [f["file"] for f in heldout_of_run("r", tmp_path)][:3] == ["at100-full.json", "at100.json", "at70.json"]
    # the same adapter with sampled tokens (--temperature) is listed after every greedy evaluation of the run
    bench = {"policies": ["run:results/runs/r"], "run_steps": {"run:results/runs/r": 100}, "scale": "full",
             "sampling": {"temperature": 1.0, "min_p": 0.1, "seed": 0}}
    (tmp_path / "at100-sampled.json").write_text(json.dumps({"bench": bench, "table": [{"method": "run:r"}]}))
    found = [f["file"] for f in heldout_of_run("r", tmp_path)]
    assert found[0] == "at100-full.json" and found.index("at100-sampled.json") > found.index("before-steps-were-kept.json")


def test_sampling_flags_are_checked_before_anything_runs():
    from arxivqa.evaluate import main

    with pytest.raises(SystemExit):
        main(["--min-p", "0.1"])  # min-p without a temperature: greedy decoding has nothing to filter
    with pytest.raises(SystemExit):
        main(["--temperature", "-1"])


def test_a_policy_is_evaluated_through_a_presets_view(tiny_qwen, built_index, papers, tmp_path):
    """``--preset``: the rollout view of a training preset — here cpu-warm-compact, whose terse tool schemas
    no committed run has — instead of a run's; both at once is refused."""
    from arxivqa.evaluate import main as evaluate_main
    from conftest import write_jsonl

    q = write_jsonl(tmp_path / "q.jsonl", [{"qid": "u0", "query": "message passing for molecules",
                                            "gold_in_corpus": [papers[0].arxiv_id]}])
    common = ["--policy", f"local:{tiny_qwen}", "--queries", str(q), "--split", "all", "--index", str(built_index.folder),
              "--embedder", "static", "--max-tokens", "24", "--out", str(tmp_path), "--name", "compact"]
    evaluate_main(common + ["--preset", "cpu-warm-compact"])
    bench = json.loads((tmp_path / "compact.json").read_text())["bench"]
    assert bench["view"] == "preset:cpu-warm-compact" and bench["env_kwargs"]["schemas"] == "compact"
    assert bench["budgets"]["max_turns"] == 4 and bench["episodes"] == 1
    with pytest.raises(SystemExit):
        evaluate_main(common + ["--preset", "cpu-warm-compact", "--view", "some-run"])


def test_a_held_out_row_is_matched_to_its_run_and_the_steps_of_its_adapter():
    from arxivqa.evaluate import method_steps, same_policy

    # one evaluation of two runs: each row gets its own run's steps, whichever folder the policy was given with
    bench = {"run_steps": {"run:results/runs/uniform": 100, "run:/elsewhere/e2h": 55}}
    assert method_steps(bench, "run:uniform") == 100 and method_steps(bench, "run:e2h") == 55
    assert method_steps(bench, "one-shot bm25") is None and method_steps({}, "run:uniform") is None
    assert same_policy("run:e2h", "run:results/runs/e2h") and not same_policy("run:e2h", "run:uniform")
