"""The OpenAI-compatible policy against a real local server process (``transformers serve`` serving
the packaged Qwen2.5-Coder-0.5B-Instruct on loopback), not a mocked client."""

import pytest

from arxivqa.agent import Agent, OpenAIPolicy, tool_schemas
from arxivqa.records import Budgets
from arxivqa.corpus import Query
from arxivqa.models import DEFAULT_MODEL, resolve_model
from arxivqa.tools import ArxivEnv


@pytest.fixture(scope="module")
def server(llm_server):
    return llm_server


def test_chat_with_tools_against_a_real_server(server):
    policy = OpenAIPolicy(resolve_model(DEFAULT_MODEL), server, api_key_env="ARXIVQA_TEST_NO_KEY", max_retries=1)
    out = policy.chat([{"role": "user", "content": "Find papers on GRPO for math reasoning."}], tool_schemas(), 48)
    assert out.prompt_tokens > 0 and 0 < out.completion_tokens <= 48
    assert out.raw or out.tool_calls  # the model said something; whatever it was, it was parsed without raising


def test_an_episode_runs_over_the_endpoint(server, built_index):
    policy = OpenAIPolicy(resolve_model(DEFAULT_MODEL), server, max_retries=1)
    q = Query(qid="e", query="sparse attention for long documents", gold_in_corpus=["9999.00001"])
    traj = Agent(policy, Budgets(max_turns=2, max_new_tokens=48)).run(q, ArxivEnv(built_index))
    assert traj.policy.startswith("openai:") and 1 <= len(traj.steps) <= 2
    assert traj.stop_reason in {"finished", "no_tool_call", "max_turns", "tool_call_budget", "token_budget"}
    assert traj.completion_tokens > 0


def test_unreachable_endpoint_ends_the_episode_with_a_recorded_error(built_index):
    policy = OpenAIPolicy("m", "http://127.0.0.1:9/v1", max_retries=0, timeout=2)
    traj = Agent(policy).run(Query(qid="x", query="anything"), ArxivEnv(built_index))
    assert traj.stop_reason.startswith("policy_error")


def test_evaluate_command_on_a_query_file_it_has_never_seen(server, built_index, papers, tmp_path):
    import json

    from arxivqa.evaluate import main

    qfile = tmp_path / "held_out.jsonl"
    qfile.write_text("".join(json.dumps({"qid": f"h{i}", "query": p.title, "gold_in_corpus": [p.arxiv_id],
                                         "difficulty": "medium"}) + "\n" for i, p in enumerate(papers[:2])))
    out = tmp_path / "eval"
    main(["--policy", f"openai:{resolve_model(DEFAULT_MODEL)}@{server}", "--queries", str(qfile), "--split", "all",
          "--max-turns", "1", "--max-new-tokens", "32", "--index", str(built_index.folder), "--out", str(out),
          "--name", "t"])
    report = json.loads((out / "t.json").read_text())
    methods = [row["method"] for row in report["table"]]
    assert methods[0].startswith("openai:") and methods[1:] == ["one-shot bm25", "one-shot dense", "one-shot hybrid"]
    assert all(row["n"] == 2 for row in report["table"])
    assert report["bench"]["episodes"] == 2 and 0 <= report["bench"]["tool_share_of_episode_time"] <= 1
    assert len((out / "t.trajectories.jsonl").read_text().splitlines()) == 2
    assert "Recall per difficulty" in (out / "t.md").read_text()
