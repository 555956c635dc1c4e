"""The OpenAI policy and the LLM layer against a second real server: llama.cpp's (llama-cpp-python[server],
the optional extra of ``make setup-llamacpp``) serving the packaged Qwen2.5-Coder-0.5B GGUF on loopback.
Skipped when the extra is not installed, so ``make test`` needs nothing of it."""

import json

import pytest

pytest.importorskip("llama_cpp", reason="llama.cpp's server is an optional extra: make setup-llamacpp")
pytest.importorskip("uvicorn")

from arxivqa.agent import Agent, OpenAIPolicy, tool_schemas  # noqa: E402
from arxivqa.corpus import Query  # noqa: E402
from arxivqa.llm import LLM, Endpoint, LLMError, local_server  # noqa: E402
from arxivqa.records import Budgets  # noqa: E402
from arxivqa.tools import ArxivEnv  # noqa: E402

MODEL = "qwen2.5-coder-0.5b-instruct"
N_CTX = 2048  # small, so that a few searches outgrow it


@pytest.fixture(scope="module")
def llamacpp():
    with local_server(MODEL, engine="llamacpp", n_ctx=N_CTX) as url:
        yield url


TIMEOUT = 1800.0  # seconds a request may take: generous, so a busy machine slows these tests without failing them


def policy(url, **kw):
    return OpenAIPolicy(MODEL, url, api_key_env=None, max_retries=0, timeout=TIMEOUT, **kw)


def test_tool_calls_come_back_native_or_in_text_and_are_read(llamacpp):
    out = policy(llamacpp).chat([{"role": "user", "content": "Find papers on GRPO for math reasoning. "
                                  "Call keyword_search."}], tool_schemas(), 96)
    assert out.prompt_tokens > 0 and 0 < out.completion_tokens <= 96
    assert out.tool_calls, out.raw  # llama.cpp returns Qwen's <tool_call> block as text; the policy parses it
    assert out.tool_calls[0].name in {"keyword_search", "semantic_search"}
    assert isinstance(out.tool_calls[0].arguments, dict) and "<tool_call>" not in out.text


def test_an_over_long_request_is_refused_and_recorded_not_raised(llamacpp, built_index):
    """Without a window the agent sends what the server cannot hold: llama.cpp answers HTTP 400, and the
    episode ends with that error on its record. With the server's window the agent never sends it."""
    long_query = "retrieval " * (N_CTX + 200)
    q = Query(qid="long", query=long_query, gold_in_corpus=["9999.00001"])
    refused = Agent(policy(llamacpp), Budgets(max_turns=2, max_new_tokens=32), context_window=0).run(
        q, ArxivEnv(built_index))
    assert refused.stop_reason.startswith("policy_error") and "BadRequest" in refused.stop_reason, refused.stop_reason
    kept = Agent(policy(llamacpp, context_window=N_CTX), Budgets(max_turns=2, max_new_tokens=32)).run(
        q, ArxivEnv(built_index))
    assert kept.stop_reason == "context_budget" and not kept.steps  # the query alone does not fit: nothing sent


def test_an_episode_stays_inside_the_servers_context(llamacpp, built_index):
    """Full tool results (abstracts) on every search: the conversation outgrows 2,048 tokens within a few
    turns, and the agent trims it by the server's window; no request is refused."""
    agent = Agent(policy(llamacpp, context_window=N_CTX), Budgets(max_turns=5, max_tool_calls=10, max_tokens=800,
                                                                  max_new_tokens=96))
    agent.user_template = agent.user_template + "\nSearch several times with different queries before finishing."
    traj = agent.run(Query(qid="e", query="attention in language models and sparse transformers",
                           gold_in_corpus=["9999.00001"]), ArxivEnv(built_index))
    assert not traj.stop_reason.startswith("policy_error"), traj.stop_reason
    assert traj.steps and traj.completion_tokens > 0
    assert all(s.assistant.prompt_tokens + 96 <= N_CTX for s in traj.steps)
    for trim in traj.context_trims:
        assert trim.tokens_after <= trim.budget <= N_CTX - 96


def test_structured_output_through_the_llm_layer(llamacpp):
    class Topic(__import__("pydantic").BaseModel):
        topic: str
        is_machine_learning: bool

    llm = LLM(Endpoint(name="llamacpp", model=MODEL, max_retries=2, timeout=TIMEOUT), base_url=llamacpp)
    msgs = [{"role": "user", "content": 'What is the topic of the paper "Sparse attention for long-context '
             'transformers"? Answer with JSON: {"topic": "...", "is_machine_learning": true or false}'}]
    out = llm.structured(msgs, Topic, max_tokens=64)
    assert isinstance(out, Topic) and out.topic.strip()
    assert llm.calls[-1].ok and llm.calls[-1].prompt_tokens > 0
    with pytest.raises(LLMError):  # four tokens cannot hold the object: invalid on every attempt, then reported
        llm.structured(msgs, Topic, max_tokens=4)
    assert not llm.calls[-1].ok and llm.stats.failures == 1


def test_the_bench_runs_one_model_over_the_server(llamacpp, built_index, tmp_path):
    """``bench servers`` on its llama.cpp path alone: it starts and stops its own server, and writes what it
    measured (episodes per minute, prompt tokens per turn) for the same queries and window."""
    from arxivqa.bench import bench_servers

    qfile = tmp_path / "q.jsonl"
    qfile.write_text(json.dumps({"qid": "b", "query": "sparse attention", "gold_in_corpus": ["9999.00001"],
                                 "difficulty": "easy"}) + "\n")
    r = bench_servers(limit=1, window=N_CTX, budgets="2,4,200,64", model=MODEL, paths=("llamacpp",),
                      queries_file=str(qfile), split="all", index=built_index, out_dir=tmp_path)
    fig = r["paths"]["llamacpp"]
    assert fig["episodes"] == 1 and fig["episodes_per_minute"] > 0 and fig["failed_episodes"] == 0
    assert json.loads((tmp_path / "bench_servers.json").read_text())["paths"]["llamacpp"]["turns"] == fig["turns"]
