"""The context budget: hand-built long conversations trimmed by the stated policy, an episode kept inside a
server's context window, and batched decoding that stays exact when the history is trimmed."""

import json

import pytest
from arxivqa.context import (
    COMPACT_MARK,
    DROP_NOTE,
    approx_tokens,
    compact_tool_result,
    fit_context,
)
from arxivqa.records import ContextTrim

ABSTRACT = "We study a method in depth, with many experiments and long explanations of every result. " * 4


def _search_result(turn: int, n: int = 10) -> str:
    lines = [f'{n} papers for "query {turn}" (semantic search):']
    for i in range(1, n + 1):
        lines.append(f"[{i}] id: P-{turn:02d}{i:06d} | published: 2024-01-0{1 + i % 9} | title: Paper {turn}.{i} on topic")
        lines.append("    abstract: " + ABSTRACT)
    return "\n".join(lines)


def _conversation(turns: int) -> list[dict]:
    msgs = [{"role": "system", "content": "You find papers."}, {"role": "user", "content": "sparse attention"}]
    for t in range(1, turns + 1):
        ids = [f"call_{t}a", f"call_{t}b"]
        msgs.append({"role": "assistant", "content": f"Turn {t}: searching.",
                     "tool_calls": [{"id": i, "type": "function",
                                     "function": {"name": "semantic_search", "arguments": json.dumps({"query": f"q{t}"})}}
                                    for i in ids]})
        for i in ids:
            msgs.append({"role": "tool", "tool_call_id": i, "name": "semantic_search", "content": _search_result(t)})
    return msgs


def count(messages):
    return approx_tokens(messages, chars_per_token=4.0)


def _tools_follow_their_call(msgs):
    """Every tool message answers a call of the assistant message before it (what servers require)."""
    open_ids: set = set()
    for m in msgs:
        if m["role"] == "assistant":
            open_ids = {c["id"] for c in m.get("tool_calls", [])}
        elif m["role"] == "tool":
            assert m["tool_call_id"] in open_ids
        elif m["role"] == "user" and m is not msgs[1]:
            open_ids = set()
    return True


def test_a_conversation_that_fits_is_sent_as_it_is():
    msgs = _conversation(2)
    out, trim = fit_context(msgs, count, count(msgs))
    assert out == msgs and not trim.trimmed and trim.fits and trim.tokens_before == trim.tokens_after


def test_a_search_result_compacts_to_ids_and_titles():
    text = _search_result(1)
    short = compact_tool_result(text)
    assert "abstract:" not in short and COMPACT_MARK in short and len(short) < len(text) / 3
    assert all(f"P-01{i:06d}" in short and f"Paper 1.{i} on topic" in short for i in range(1, 11))
    assert compact_tool_result(short) == short  # idempotent
    page = "Paper P-1 — page 1 of 1\nTitle: A paper\nAuthors: X\n\nAbstract: " + ABSTRACT
    assert compact_tool_result(page).splitlines()[:2] == ["Paper P-1 — page 1 of 1", "Title: A paper"]
    assert compact_tool_result("Error: unknown paper ID") == "Error: unknown paper ID"


def test_older_tool_results_are_reduced_first_and_the_latest_turn_stays_whole():
    msgs = _conversation(3)
    full = count(msgs)
    out, trim = fit_context(msgs, count, int(full * 0.55))
    assert trim.fits and trim.trimmed and trim.dropped_turns == 0 and 1 <= trim.compacted <= 4
    assert count(out) == trim.tokens_after <= trim.budget and trim.tokens_before == full
    tools = [m for m in out if m["role"] == "tool"]
    assert len(tools) == 6 and len(out) == len(msgs)  # nothing dropped
    assert COMPACT_MARK in tools[0]["content"] and "P-01000003" in tools[0]["content"]  # oldest first
    assert all(COMPACT_MARK not in m["content"] for m in tools[4:])  # the latest turn is whole
    assert [m for m in out if m["role"] != "tool"] == [m for m in msgs if m["role"] != "tool"]


def test_then_the_oldest_turns_are_dropped_with_a_note_the_model_sees():
    msgs = _conversation(6)
    out, trim = fit_context(msgs, count, count(_conversation(2)))
    assert trim.fits and trim.dropped_turns >= 1 and trim.compacted >= 2 * trim.dropped_turns
    assert out[:2] == msgs[:2]  # the system prompt and the query stay
    assert out[2] == {"role": "user", "content": DROP_NOTE.format(n=trim.dropped_turns)}
    assert out[-3:] == msgs[-3:]  # the latest turn, whole
    assert _tools_follow_their_call(out)
    assert not any(m.get("content", "").startswith(f"Turn {t}:") for m in out for t in range(1, trim.dropped_turns + 1))


def test_trimming_is_monotone_and_keeps_the_prefix_between_turns():
    budget = count(_conversation(2))
    trim, sent, changed = None, [], []
    for turns in range(1, 9):
        out, new = fit_context(_conversation(turns), count, budget, previous=trim)
        assert new.fits
        if trim is not None:
            assert new.compacted >= trim.compacted and new.dropped_turns >= trim.dropped_turns
            if new.dropped_turns == trim.dropped_turns:
                # the previous request is unchanged up to the first message compacted at this turn
                prev = sent[-1]
                first_changed = next((i for i, (a, b) in enumerate(zip(prev, out)) if a != b), len(prev))
                if first_changed < len(prev):  # a tool result compacted now
                    assert prev[first_changed]["role"] == "tool" and COMPACT_MARK in out[first_changed]["content"]
                    assert COMPACT_MARK not in prev[first_changed]["content"]
                    changed.append(first_changed)
        trim = new
        sent.append(out)
    assert trim.dropped_turns >= 1  # eight turns do not fit in two turns' worth without dropping
    assert changed and min(changed) > 2  # compaction changes the prompt after the query, never before


def test_a_conversation_that_cannot_fit_says_so():
    msgs = _conversation(1)
    _, trim = fit_context(msgs, count, count(msgs[:2]) - 1)
    assert not trim.fits and trim.tokens_after > trim.budget
    assert isinstance(trim, ContextTrim)


def test_a_query_that_cannot_fit_ends_the_episode_before_any_request(built_index):
    """Found against llama.cpp's server: a query longer than the window ended the episode before its first
    request, and ``Agent.run`` raised StopIteration instead of returning the trajectory."""
    from arxivqa.agent import Agent
    from arxivqa.corpus import Query
    from arxivqa.records import Budgets
    from arxivqa.tools import ArxivEnv

    class NeverAsked:
        name, context_window = "never-asked", 512

        def chat(self, *a, **k):
            raise AssertionError("a request that cannot fit the window was sent")

    q = Query(qid="long", query="retrieval " * 2000)
    traj = Agent(NeverAsked(), Budgets(max_turns=2, max_new_tokens=32)).run(q, ArxivEnv(built_index))
    assert traj.stop_reason == "context_budget" and not traj.steps
    assert len(traj.context_trims) == 1 and not traj.context_trims[0].fits
    (many,) = Agent(NeverAsked(), Budgets(max_turns=2, max_new_tokens=32)).run_many([q], lambda: ArxivEnv(built_index))
    assert many.stop_reason == "context_budget" and not many.steps


# --------------------------------------------------------------------------- an episode against a server


def test_an_episode_stays_inside_the_window_the_server_reports(scripted_endpoint, built_index, monkeypatch):
    """A server with an 3,000-token context (llama.cpp style: ``/props`` says so, a longer request is refused
    with HTTP 400): every search returns long results, and the conversation outgrows the window by the
    third turn. The agent learns the window from the server and trims; no request is refused."""
    from arxivqa.agent import Agent, OpenAIPolicy
    from arxivqa.corpus import Query
    from arxivqa.records import Budgets
    from arxivqa.tools import ArxivEnv

    monkeypatch.delenv("ARXIVQA_CONTEXT_WINDOW", raising=False)
    n_ctx = 3000
    queries = iter(["learning", "language models", "neural networks", "transformers attention", "reinforcement"])
    sizes, refused = [], []

    def tokens(body):  # the server's own tokenizer: four characters a token
        return len(json.dumps(body["messages"]) + json.dumps(body.get("tools", []))) // 4

    def reply(body):
        n = tokens(body)
        sizes.append(n)
        if n + body["max_tokens"] > n_ctx:
            refused.append(n)
            return 400
        call = {"name": "semantic_search", "arguments": {"query": next(queries, "models")}}
        return f"<tool_call>{json.dumps(call)}</tool_call>", "stop", {"prompt_tokens": n, "completion_tokens": 20,
                                                                       "total_tokens": n + 20}

    srv = scripted_endpoint(reply, get=lambda path: (200, {"default_generation_settings": {"n_ctx": n_ctx}})
                            if path == "/props" else (404, {}))
    policy = OpenAIPolicy("m", srv.base_url, api_key_env=None, max_retries=0)
    agent = Agent(policy, Budgets(max_turns=5, max_tool_calls=10, max_tokens=1000, max_new_tokens=100))
    traj = agent.run(Query(qid="long", query="attention in language models"), ArxivEnv(built_index))
    assert not refused and traj.stop_reason == "max_turns", traj.stop_reason
    assert len(traj.steps) == 5 and max(sizes) + 100 <= n_ctx
    assert traj.context_trims and all(t.tokens_after <= t.budget < t.tokens_before for t in traj.context_trims)
    assert traj.context_trims[0].budget == n_ctx - 100 and traj.context_trims[0].turn >= 3


def test_a_window_from_the_setting_wins_and_zero_turns_trimming_off(monkeypatch):
    from arxivqa.agent import Agent

    class P:
        name, context_window = "p", 32768

    monkeypatch.setenv("ARXIVQA_CONTEXT_WINDOW", "8192")
    assert Agent(P()).window() == 8192 and Agent(P(), context_window=1000).window() == 1000
    monkeypatch.setenv("ARXIVQA_CONTEXT_WINDOW", "0")
    assert Agent(P()).window() is None
    monkeypatch.delenv("ARXIVQA_CONTEXT_WINDOW")
    assert Agent(P()).window() == 32768


# --------------------------------------------------------------------------- batched decoding with trimming


@pytest.fixture(scope="module")
def searching_policy(tiny_qwen):
    """The tiny random model, made to call a search every turn (whatever it wrote), so that the
    conversation grows; float64 so that batching cannot flip a greedy choice."""
    import torch
    from arxivqa.agent import LocalHFPolicy
    from arxivqa.records import ToolCall

    class Searching(LocalHFPolicy):
        def _turn(self, new, prompt_tokens, seconds, reused=0):
            out = super()._turn(new, prompt_tokens, seconds, reused)
            out.tool_calls = [ToolCall(id=f"call_{len(out.raw)}", name="semantic_search",
                                       arguments={"query": ["learning", "language models", "attention"][len(new) % 3]})]
            out.parse_problems = []
            return out

    p = Searching(tiny_qwen, dtype="float32")
    p.model = p.model.to(torch.float64)
    return p


def test_trimmed_episodes_in_lockstep_equal_trimmed_episodes_one_at_a_time(searching_policy, built_index, papers):
    from arxivqa.agent import Agent
    from arxivqa.corpus import Query
    from arxivqa.records import Budgets
    from arxivqa.tools import ArxivEnv

    qs = [Query(qid=f"q{i}", query=p.title, gold_in_corpus=[p.arxiv_id]) for i, p in enumerate(papers[:2])]
    window = 1800  # the system prompt with the tool schemas takes about 890 tokens, a turn's results about 600
    agent = Agent(searching_policy, Budgets(max_turns=6, max_tool_calls=10, max_tokens=200, max_new_tokens=8),
                  context_window=window)
    # the scripted searches repeat themselves: let them run, so that the context grows
    make_env = lambda: ArxivEnv(built_index, seed=0, refuse_repeats=False)
    one = [agent.run(q, make_env()) for q in qs]
    many = agent.run_many(qs, make_env, batch_size=2)
    # both stages happened: results compacted, and turns dropped (the prompt changes right after the query)
    assert any(t.compacted for t in one[0].context_trims) and any(t.dropped_turns for a in one for t in a.context_trims)
    for a, b in zip(one, many):
        assert a.context_trims and a.context_trims == b.context_trims
        assert [s.assistant.raw for s in a.steps] == [s.assistant.raw for s in b.steps]
        assert [s.assistant.prompt_tokens for s in a.steps] == [s.assistant.prompt_tokens for s in b.steps]
        assert all(s.assistant.prompt_tokens + 8 <= window for s in b.steps)
        assert a.stop_reason == b.stop_reason
    # after a trim the cache still serves the unchanged prefix
    assert any(s.assistant.cached_prompt_tokens > 0 for t in many for s in t.steps[1:])


def test_the_context_benchmark_writes_both_paths(tiny_qwen, built_index, papers, tmp_path):
    """``python -m arxivqa.bench context`` on the tiny model, two episodes, a window too small for the
    system prompt with its tool schemas (about 890 tokens): the trimmed path stops before sending."""
    from arxivqa.bench import bench_context

    qfile = tmp_path / "q.jsonl"
    qfile.write_text("".join(json.dumps({"qid": f"h{i}", "query": p.title, "gold_in_corpus": [p.arxiv_id]}) + "\n"
                             for i, p in enumerate(papers[:2])))
    out = bench_context(f"local:{tiny_qwen}", limit=2, window=600, budgets="2,4,40,8", queries_file=str(qfile),
                        split="all", batch=2, index=built_index, out_dir=tmp_path)
    saved = json.loads((tmp_path / "bench_context.json").read_text())
    assert saved["paths"].keys() == {"untrimmed", "window_600"} and saved["window"] == 600
    before, after = saved["paths"]["untrimmed"], saved["paths"]["window_600"]
    assert before["episodes"] == after["episodes"] == 2 and before["turns"] >= 2
    assert before["requests_over_window"] == before["turns"] and before["prompt_tokens_per_turn"][0] > 600
    assert after["stop_reasons"] == {"context_budget": 2} and after["turns"] == 0
    assert after["prompt_tokens_per_turn"] == [] and after["mean_prompt_tokens"] is None
    assert out["policy_context_window"] == 32768  # from the model's config


def test_the_server_benchmark_says_what_it_skipped(built_index, tmp_path, monkeypatch):
    """``bench servers`` without the optional llama.cpp extra: that path is skipped with the command that
    installs it, the result file is still written, and a path it does not know is refused by name."""
    import arxivqa.llm
    from arxivqa.bench import bench_servers

    monkeypatch.setattr(arxivqa.llm, "llamacpp_installed", lambda: False)
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(json.dumps({"qid": "b", "query": "sparse attention", "gold_in_corpus": ["9999.00001"]}) + "\n")
    r = bench_servers(limit=1, paths=("llamacpp",), queries_file=str(qfile), split="all", index=built_index,
                      out_dir=tmp_path)
    assert r["paths"] == {} and "make setup-llamacpp" in r["skipped"]["llamacpp"]
    assert json.loads((tmp_path / "bench_servers.json").read_text())["skipped"] == r["skipped"]
    with pytest.raises(ValueError, match="vllm"):
        bench_servers(limit=1, paths=("vllm",), queries_file=str(qfile), split="all", index=built_index,
                      out_dir=tmp_path)


def test_the_update_benchmark_times_each_schema_view(tiny_qwen, tmp_path):
    """``python -m arxivqa.bench update`` on the tiny model: per tool-schema view, the prompt as the chat
    template renders it (the compact schemas shorter) and the three timed parts of a GRPO update."""
    from arxivqa.bench import bench_update

    out = bench_update(model=tiny_qwen, completion_tokens=8, repeats=1, out_dir=tmp_path)
    saved = json.loads((tmp_path / "bench_update.json").read_text())
    assert saved["views"].keys() == {"full", "compact"} and saved["completion_tokens"] == 8
    full, compact = saved["views"]["full"], saved["views"]["compact"]
    assert 0 < compact["prompt_tokens"] < full["prompt_tokens"] - 100
    assert full["tokens"] == out["rollouts"] * (full["prompt_tokens"] + 8) and out["micro_batch"] == 2
    for row in (full, compact):
        assert all(row[k] > 0 for k in ("ref_logprobs", "loss_forward", "backward_optimizer"))
        assert row["update"] == pytest.approx(row["ref_logprobs"] + row["update_without_ref"])
