import json
import math

import pytest

from arxivqa.agent import Agent, make_policy, parse_tool_calls, tool_schemas
from arxivqa.records import (AssistantTurn, Budgets, Step, ToolCallRecord, Trajectory, load_trajectories,
                             save_trajectories)
from arxivqa.corpus import Query
from arxivqa.evaluate import query_diversity, trajectory_metrics
from arxivqa.tools import ArxivEnv
from conftest import by_title


# ---------------------------------------------------------------- parsing

def test_parses_qwen_tagged_calls_and_keeps_reasoning():
    text = ('I should search two ways.\n<tool_call>\n{"name": "keyword_search", "arguments": {"query": "GRPO"}}\n</tool_call>\n'
            '<tool_call>{"name": "semantic_search", "arguments": "{\\"query\\": \\"group policy\\"}"}</tool_call>')
    reasoning, calls, problems = parse_tool_calls(text)
    assert reasoning == "I should search two ways."
    assert [(c.name, c.arguments) for c in calls] == [("keyword_search", {"query": "GRPO"}),
                                                      ("semantic_search", {"query": "group policy"})]
    assert problems == []


@pytest.mark.parametrize("text", [
    '```json\n{"name": "keyword_search", "arguments": {"query": "x"}}\n```',
    '{"name": "keyword_search", "arguments": {"query": "x"}}',
    'Let me look. {"name": "keyword_search", "parameters": {"query": "x"}}',
    '[{"name": "keyword_search", "arguments": {"query": "x"}}]',
    '{"type": "function", "function": {"name": "keyword_search", "arguments": "{\\"query\\": \\"x\\"}"}}',
    '<tool_call>{"name": "keyword_search", "arguments": {"query": "x"}}',  # unclosed tag
])
def test_parses_the_shapes_small_models_emit(text):
    _, calls, problems = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in calls] == [("keyword_search", {"query": "x"})]
    assert problems == []


@pytest.mark.parametrize("text,expect", [
    ('<tool_call>{"name": "keyword_search", "arguments": {"query": "x"</tool_call>', "could not parse"),
    ('<tool_call>not json at all</tool_call>', "could not parse"),
    ('<tool_call>{"query": "no name"}</tool_call>', "needs a 'name'"),
    ('{"name": "keyword_search", "arguments": {"query": "x",,}}', "could not parse"),
])
def test_unreadable_calls_become_problems_not_exceptions(text, expect):
    _, calls, problems = parse_tool_calls(text)
    assert calls == [] and any(expect in p for p in problems)


def test_plain_prose_is_not_a_call():
    reasoning, calls, problems = parse_tool_calls("The answer is the transformer paper {maybe}.")
    assert calls == [] and problems == [] and reasoning.startswith("The answer")


def test_malformed_arguments_string_reaches_the_env_as_an_error(built_index):
    _, calls, _ = parse_tool_calls('<tool_call>{"name": "keyword_search", "arguments": "{query: x"}</tool_call>')
    env = ArxivEnv(built_index)
    assert env._call(calls[0].name, calls[0].arguments).startswith("Error: arguments for keyword_search are not valid JSON")


def test_schemas_are_the_trainers():
    names = [s["function"]["name"] for s in tool_schemas()]
    assert names == ["keyword_search", "semantic_search", "read_page", "finish"]


def test_policies_are_named_like_every_other_llm(tmp_path):
    from arxivqa.llm import get_endpoint

    with pytest.raises(ValueError, match="unknown LLM"):
        make_policy("carrier-pigeon:x")
    with pytest.raises(ValueError, match="unknown LLM"):
        make_policy("openai:")
    with pytest.raises(FileNotFoundError, match="no run"):
        make_policy("run:no-such-run")
    # the same names the judges use: a configured endpoint, or an inline spec
    assert get_endpoint("local-smollm2").model == "smollm2-135m-instruct" and get_endpoint("local-smollm2").local
    inline = get_endpoint("openai:some-model@http://127.0.0.1:9/v1")
    assert (inline.model, inline.base_url, inline.local) == ("some-model", "http://127.0.0.1:9/v1", False)
    policy = make_policy("openai:some-model@http://127.0.0.1:9/v1")
    assert policy.model_name == "some-model" and str(policy.client.base_url).startswith("http://127.0.0.1:9/v1")
    hosted = make_policy("openai-gpt-4.1-mini")  # a configured hosted endpoint (no request is made here)
    assert hosted.model_name == "gpt-4.1-mini" and hosted.name == "openai-gpt-4.1-mini"


# ---------------------------------------------------------------- the loop, with a scripted policy

class Scripted:
    """A policy that replays fixed raw outputs through the real parser."""

    name = "scripted"

    def __init__(self, outputs):
        self.outputs, self.seen = list(outputs), []

    def chat(self, messages, tools, max_new_tokens):
        self.seen.append([dict(m) for m in messages])
        raw = self.outputs.pop(0) if self.outputs else "I am done."
        text, calls, problems = parse_tool_calls(raw(messages) if callable(raw) else raw)
        return AssistantTurn(text=text, raw=str(raw), tool_calls=calls, parse_problems=problems,
                             prompt_tokens=100, completion_tokens=50, seconds=0.01)


def call(name, **args):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def first_id(messages):
    tool_msgs = [m for m in messages if m["role"] == "tool"]
    return tool_msgs[-1]["content"].split("id: ")[1].split(" ")[0]


@pytest.fixture
def query(papers):
    target = by_title(papers, "Group relative policy optimization")
    return Query(qid="q", query="GRPO math reasoning", gold_in_corpus=[target.arxiv_id], difficulty="easy")


def test_a_policy_that_renders_its_own_template_sees_its_turns_as_it_wrote_them(built_index, query):
    """As in a GRPO rollout (TRL keeps the generated tokens): calls written as bare JSON stay bare JSON in
    the next request; an endpoint policy gets its calls back as structured ``tool_calls`` to answer."""
    bare = 'Keywords first.\n{"name": "keyword_search", "arguments": {"query": "group relative policy optimization"}}'

    class Verbatim(Scripted):
        verbatim_context = True

    for policy, verbatim in ((Verbatim([bare]), True), (Scripted([bare]), False)):
        traj = Agent(policy, Budgets(max_turns=2)).run(query, ArxivEnv(built_index))
        assert traj.steps[0].assistant.tool_calls[0].name == "keyword_search"
        turn = [m for m in policy.seen[1] if m["role"] == "assistant"][0]
        assert policy.seen[1][-1]["role"] == "tool" and "keyword search" in policy.seen[1][-1]["content"]
        if verbatim:
            assert turn == {"role": "assistant", "content": bare}
        else:
            assert turn["content"] == "Keywords first." and turn["tool_calls"][0]["function"]["name"] == "keyword_search"


def test_full_episode_with_parallel_calls_and_finish(built_index, query):
    policy = Scripted([
        "Two angles." + call("keyword_search", query="group relative policy optimization") + call("semantic_search", query="math reasoning RL"),
        lambda msgs: call("finish", paper_ids=[first_id(msgs)]),
    ])
    traj = Agent(policy).run(query, ArxivEnv(built_index))
    assert traj.stop_reason == "finished" and len(traj.steps) == 2
    assert [r.name for r in traj.steps[0].results] == ["keyword_search", "semantic_search"]
    assert traj.submitted == query.gold_in_corpus
    m = trajectory_metrics(traj)
    assert m["recall@10"] == 1.0 and m["search_recall"] == 1.0 and m["tool_calls"] == 3 and m["turns"] == 2
    # the second turn saw both tool results, in call order, after the assistant message that asked for them
    roles = [msg["role"] for msg in policy.seen[1]]
    assert roles == ["system", "user", "assistant", "tool", "tool"]
    assert policy.seen[1][3]["name"] == "keyword_search"


def test_parse_problems_are_fed_back_and_the_episode_goes_on(built_index, query):
    policy = Scripted(['<tool_call>{"name": "keyword_search", "arguments": {"query": </tool_call>',
                       call("keyword_search", query="policy optimization"), "no more tools"])
    traj = Agent(policy).run(query, ArxivEnv(built_index))
    assert "could not parse" in policy.seen[1][-1]["content"]
    assert traj.stop_reason == "no_tool_call" and len(traj.steps) == 3 and traj.submitted is None
    assert trajectory_metrics(traj)["recall@10"] == 0.0


def test_unknown_tool_is_an_error_message_to_the_agent(built_index, query):
    policy = Scripted([call("browse_web", url="x"), "stop"])
    traj = Agent(policy).run(query, ArxivEnv(built_index))
    res = traj.steps[0].results[0]
    assert res.error and "unknown tool" in res.result


def test_budgets(built_index, query):
    many = "".join(call("keyword_search", query=f"topic {i}") for i in range(5))
    traj = Agent(Scripted([many, many]), Budgets(max_tool_calls=7)).run(query, ArxivEnv(built_index))
    assert traj.stop_reason == "tool_call_budget"
    results = traj.tool_results
    assert len(results) == 10 and sum(r.error and "budget" in r.result for r in results) == 3
    traj = Agent(Scripted([call("keyword_search", query="a")] * 5), Budgets(max_turns=2)).run(query, ArxivEnv(built_index))
    assert traj.stop_reason == "max_turns" and len(traj.steps) == 2
    traj = Agent(Scripted([call("keyword_search", query="a")] * 5), Budgets(max_tokens=120)).run(query, ArxivEnv(built_index))
    assert traj.stop_reason == "token_budget" and traj.completion_tokens == 150


def test_policy_failure_is_recorded(built_index, query):
    class Down:
        name = "down"

        def chat(self, *a):
            raise ConnectionError("endpoint unreachable")

    traj = Agent(Down()).run(query, ArxivEnv(built_index))
    assert traj.stop_reason.startswith("policy_error: ConnectionError") and traj.steps == []


# ---------------------------------------------------------------- records and metrics

def hand_built(submitted, seen, queries=("a b", "a c")):
    results = [ToolCallRecord(call_id=str(i), name="keyword_search", arguments={"query": q}, result="...",
                          result_ids=list(seen) if i == 0 else []) for i, q in enumerate(queries)]
    return Trajectory(qid="h", query="q", difficulty="hard", gold_in_corpus=["g1", "g2", "g3", "g4"], policy="p",
                      steps=[Step(turn=1, assistant=AssistantTurn(), results=results)], submitted=submitted,
                      stop_reason="finished", prompt_tokens=10, completion_tokens=5)


def test_recall_metrics_on_hand_built_trajectories():
    m = trajectory_metrics(hand_built(["g1", "x", "g2"], ["g1", "g2", "g3", "y"]))
    assert m["recall@10"] == 0.5 and m["search_recall"] == 0.75 and m["precision"] == pytest.approx(2 / 3)
    assert m["distinct_queries"] == 2 and m["query_diversity"] == pytest.approx(1 - 1 / 3)
    m = trajectory_metrics(hand_built(None, []))
    assert m["recall@10"] == 0.0 and m["search_recall"] == 0.0 and m["precision"] == 0.0
    eleven = [f"x{i}" for i in range(10)] + ["g1"]  # only the first 10 submitted count
    assert trajectory_metrics(hand_built(eleven, []))["recall@10"] == 0.0
    no_gold = hand_built(["g1"], ["g1"]).model_copy(update={"gold_in_corpus": []})
    assert math.isnan(trajectory_metrics(no_gold)["recall@10"])


def test_query_diversity():
    assert query_diversity(["same words", "same words"]) == 0.0
    assert query_diversity(["a b", "c d"]) == 1.0
    assert query_diversity(["only one"]) == 0.0


def test_trajectory_round_trip(tmp_path, built_index, query):
    policy = Scripted([call("keyword_search", query="policy optimization math"), lambda msgs: call("finish", paper_ids=[first_id(msgs)])])
    traj = Agent(policy).run(query, ArxivEnv(built_index))
    save_trajectories(tmp_path / "t.jsonl", [traj, hand_built(["g1"], ["g1"])])
    back = load_trajectories(tmp_path / "t.jsonl")
    assert back[0] == traj and back[0].seen_ids() == traj.seen_ids()
    assert trajectory_metrics(back[1]) == trajectory_metrics(hand_built(["g1"], ["g1"]))


def test_the_agent_sends_the_schemas_of_its_environment(built_index, query):
    """A run's ``tool_schemas`` setting reaches the policy through the environment (``train.tool_view`` →
    ``tools.make_env``), in one episode and in lockstep."""
    from arxivqa.tools import make_env
    from arxivqa.train import preset, tool_view

    class Recording(Scripted):
        def chat(self, messages, tools, max_new_tokens):
            self.tools = tools
            return super().chat(messages, tools, max_new_tokens)

    view = tool_view(preset("cpu-warm", tool_schemas="compact"))
    assert view["schemas"] == "compact" and tool_view(preset("cpu-warm"))["schemas"] == "full"
    compact = tool_schemas(make_env(None, **view))
    policy = Recording([call("keyword_search", query="policy optimization")])
    Agent(policy).run(query, make_env(built_index, **view))
    assert policy.tools == compact != tool_schemas()
    policy = Recording([call("keyword_search", query="policy optimization")] * 2)
    Agent(policy).run_many([query, query], lambda: make_env(built_index, **view), batch_size=2)
    assert policy.tools == compact


def test_an_evaluation_obfuscates_ids_per_episode_and_the_same_way_in_every_run(built_index, query):
    """Paper IDs differ between episodes (per-rollout obfuscation) but not between two runs of the same
    evaluation: a greedy policy that reads what it is shown then plays the same episodes twice (with random
    salts its prompts, and so its choices, changed from run to run)."""
    from arxivqa.evaluate import run_agent_eval

    def play(seed):
        policy = Scripted([call("keyword_search", query="group relative policy optimization"),
                           lambda msgs: call("finish", paper_ids=[first_id(msgs)])] * 2)
        trajs = run_agent_eval("scripted", [query, query], built_index, progress=False, batch_size=1,
                               policy=policy, seed=seed)
        return [t.steps[0].results[0].result for t in trajs], trajs

    (first, trajs), (again, _) = play(0), play(0)
    assert first == again and first[0] != first[1]  # the same query twice: other IDs in each episode
    assert all(t.submitted == query.gold_in_corpus for t in trajs)
    assert play(1)[0] != first and play(None)[0] != first
