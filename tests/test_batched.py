"""Many episodes in lockstep: batched decoding with each conversation's prefix reused from a KV cache
gives what one-at-a-time generation gives."""

import pytest

from arxivqa.agent import Agent, LocalHFPolicy, tool_schemas
from arxivqa.corpus import Query
from arxivqa.records import Budgets
from arxivqa.tools import ArxivEnv
from conftest import by_title


@pytest.fixture(scope="module")
def policy(tiny_qwen):
    import torch

    p = LocalHFPolicy(tiny_qwen, dtype="float32")
    p.model = p.model.to(torch.float64)  # so that batching cannot flip a greedy choice by rounding
    return p


def _chats():
    base = [{"role": "system", "content": "You find papers."}]
    return [base + [{"role": "user", "content": q}] for q in
            ("sparse attention for long documents", "GRPO", "protein structure prediction with attention networks")]


def test_a_batch_of_conversations_decodes_as_each_alone(policy):
    tools = tool_schemas()
    alone = [policy.chat(m, tools, 12) for m in _chats()]
    together = policy.chat_many([(f"c{i}", m) for i, m in enumerate(_chats())], tools, [12, 5, 12])
    assert [t.raw for t in together] == [alone[0].raw, policy.chat(_chats()[1], tools, 5).raw, alone[2].raw]
    assert [t.completion_tokens for t in together][1] <= 5
    assert all(t.cached_prompt_tokens == 0 for t in together)  # nothing cached yet


def test_the_next_turn_reuses_the_prefix_and_matches_a_fresh_encoding(policy):
    tools = tool_schemas()
    chats = _chats()[:2]
    first = policy.chat_many([("a", chats[0]), ("b", chats[1])], tools, 8)
    follow = [m + [{"role": "assistant", "content": t.raw},
                   {"role": "user", "content": "Now search again, differently."}] for m, t in zip(chats, first)]
    second = policy.chat_many([("a", follow[0]), ("b", follow[1])], tools, 8)
    fresh = [policy.chat(m, tools, 8) for m in follow]
    assert [t.raw for t in second] == [t.raw for t in fresh]
    assert all(0 < t.cached_prompt_tokens < t.prompt_tokens for t in second)
    policy.forget("a")
    third = policy.chat_many([("a", follow[0])], tools, 8)
    assert third[0].cached_prompt_tokens == 0 and third[0].raw == fresh[0].raw


def test_episodes_in_lockstep_equal_episodes_one_at_a_time(policy, built_index, papers):
    qs = [Query(qid=f"q{i}", query=text, gold_in_corpus=[by_title(papers, title).arxiv_id])
          for i, (text, title) in enumerate([("sparse attention long context", "Sparse attention"),
                                              ("GRPO for math", "Group relative policy optimization"),
                                              ("federated learning heterogeneity", "Federated learning")])]
    agent = Agent(policy, Budgets(max_turns=3, max_tool_calls=6, max_tokens=60, max_new_tokens=20))
    make_env = lambda: ArxivEnv(built_index, seed=0)  # noqa: E731
    one = [agent.run(q, make_env()) for q in qs]
    seen = []
    many = agent.run_many(qs, make_env, batch_size=2, progress=seen.append)
    assert [t.qid for t in many] == [q.qid for q in qs] and len(seen) == 3
    for a, b in zip(one, many):
        assert [s.assistant.raw for s in a.steps] == [s.assistant.raw for s in b.steps]
        assert a.stop_reason == b.stop_reason and a.completion_tokens == b.completion_tokens


def test_a_policy_failure_ends_only_its_episodes(built_index):
    class Flaky:
        name = "flaky"

        def chat(self, messages, tools, max_new_tokens):
            raise ConnectionError("server went away")

    agent = Agent(Flaky(), Budgets(max_turns=2))
    out = agent.run_many([Query(qid="x", query="anything")], lambda: ArxivEnv(built_index), batch_size=4)
    assert out[0].stop_reason.startswith("policy_error: ConnectionError")


def test_min_p_sampling_never_draws_a_token_far_below_the_top_one():
    import torch

    from arxivqa.agent import sampling_probs

    logits = torch.log(torch.tensor([[0.60, 0.30, 0.05, 0.05], [0.25, 0.25, 0.25, 0.25]]))
    plain = sampling_probs(logits, 1.0)
    assert torch.allclose(plain, logits.exp(), atol=1e-6)  # no truncation: the softmax itself
    cut = sampling_probs(logits, 1.0, min_p=0.1)  # 0.05 < 0.1 x 0.60: dropped; 0.30 kept
    assert torch.allclose(cut[0], torch.tensor([2 / 3, 1 / 3, 0.0, 0.0]), atol=1e-6)
    assert torch.allclose(cut[1], plain[1])  # a flat row keeps every token
    torch.manual_seed(0)
    draws = torch.multinomial(sampling_probs(logits[:1].repeat(2000, 1), 1.0, min_p=0.1), 1)
    assert set(draws.flatten().tolist()) == {0, 1}
    with pytest.raises(ValueError, match="min_p"):
        LocalHFPolicy.__init__(object.__new__(LocalHFPolicy), "no-such-model-needed", min_p=1.5)
