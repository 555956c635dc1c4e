"""Warm start: the scripted teacher's demonstrations and LoRA SFT on them."""

import random

import pytest

from arxivqa.corpus import Query
from arxivqa.sft import (SHAPES, Demo, DemoConfig, SFTSettings, load_demos, make_demos, save_demos, select,
                         teacher_episode, train_sft)
from arxivqa.tools import ArxivEnv
from arxivqa.train import COMPACT_SYSTEM_PROMPT
from conftest import by_title, write_jsonl


def _env(index):
    return ArxivEnv(index, seed=0, result_cap=3, abstract_chars=0, max_snippets=0)


def test_the_teacher_never_reads_the_gold(built_index, papers):
    """The same query with and without gold labels gets the same actions: gold only selects."""
    target = by_title(papers, "Group relative policy optimization")
    q = Query(qid="a", query="group relative policy optimization for math reasoning with language models")
    with_gold = q.model_copy(update={"gold_in_corpus": [target.arxiv_id]})
    a = teacher_episode(q, _env(built_index), random.Random(3), COMPACT_SYSTEM_PROMPT)
    b = teacher_episode(with_gold, _env(built_index), random.Random(3), COMPACT_SYSTEM_PROMPT)
    calls = lambda d: [(r.name, r.arguments) for r in d.trajectory.tool_results]  # noqa: E731
    assert calls(a) == calls(b) and a.messages == b.messages
    assert select(b).selected and not select(a).selected  # no gold: nothing to select on


def test_demonstrations_are_in_the_rollout_format_and_vary_in_shape(built_index, papers):
    q = Query(qid="b", query="sparse attention patterns for long-context transformers and linear memory",
              gold_in_corpus=[by_title(papers, "Sparse attention").arxiv_id])
    rng = random.Random(0)
    demos = [teacher_episode(q, _env(built_index), rng, COMPACT_SYSTEM_PROMPT) for _ in range(12)]
    for d in demos:
        m = d.messages
        assert m[0] == {"role": "system", "content": COMPACT_SYSTEM_PROMPT} and m[1]["role"] == "user"
        assert m[-2]["role"] == "assistant" and m[-2]["tool_calls"][0]["function"]["name"] == "finish"
        assert m[-1]["role"] == "tool" and m[-1]["content"].startswith("Submitted")
        # every assistant call is answered by one tool message, in order, with the tool's own text
        for i, msg in enumerate(m):
            if msg["role"] == "assistant":
                answers = m[i + 1: i + 1 + len(msg["tool_calls"])]
                assert [a["name"] for a in answers] == [c["function"]["name"] for c in msg["tool_calls"]]
        assert d.trajectory.stop_reason == "finished" and d.trajectory.submitted
        assert len(d.trajectory.submitted) <= 10 and set(d.trajectory.submitted) <= d.trajectory.seen_ids()
    n_calls = {len(d.trajectory.tool_results) for d in demos}
    assert len(n_calls) >= 3 and min(n_calls) >= 3 and max(n_calls) <= max(c for _, c in SHAPES) + 2


def test_demonstration_files_round_trip_and_come_from_train_only(built_index, papers, tmp_path):
    qfile = write_jsonl(tmp_path / "q.jsonl", [
        {"qid": f"t{i}", "query": p.title + " " + p.abstract[:60], "gold_in_corpus": [p.arxiv_id],
         "difficulty": "easy"} for i, p in enumerate(papers[:10])])
    cfg = DemoConfig(queries=str(qfile), per_query=1, limit=3)
    demos = make_demos(cfg, index=built_index, progress=False)
    assert len(demos) == 3 and any(d.selected for d in demos)
    from arxivqa.corpus import select_queries

    assert {d.qid for d in demos} <= {q.qid for q in select_queries(qfile, "train").queries}
    path = save_demos(tmp_path / "demos.jsonl", demos, cfg)
    assert [d.model_dump() for d in load_demos(path)] == [d.model_dump() for d in demos]
    with pytest.raises(ValueError, match="training split"):
        make_demos(DemoConfig(queries=str(qfile), split="dev"), index=built_index)


def test_the_teacher_can_play_in_a_presets_view_and_turn_budget(built_index, papers, tmp_path):
    """``sft demos --preset P`` without a policy: the teacher's episodes fit P's tool rounds (search rounds and
    a read, then the finishing turn), show P's hits a search and carry P's prompt and user message."""
    from arxivqa.train import preset, prompt_for

    run = preset("cpu-warm-compact")
    qfile = write_jsonl(tmp_path / "q.jsonl", [
        {"qid": f"t{i}", "query": p.title + " " + p.abstract[:60], "gold_in_corpus": [p.arxiv_id],
         "difficulty": "easy"} for i, p in enumerate(papers[:12])])
    own = make_demos(DemoConfig(queries=str(qfile), per_query=2), index=built_index, progress=False)
    fit = make_demos(DemoConfig(queries=str(qfile), per_query=2, teacher_preset="cpu-warm-compact"),
                     index=built_index, progress=False)
    assert len(fit) == len(own) and {d.qid for d in fit} == {d.qid for d in own}
    turns = lambda d: len(d.trajectory.steps)  # noqa: E731
    assert max(turns(d) for d in own) > run.max_tool_calling_iterations + 1  # the teacher's own shapes go beyond
    for d in fit:
        assert turns(d) <= run.max_tool_calling_iterations + 1
        assert d.trajectory.steps[-1].assistant.tool_calls[0].name == "finish" and d.trajectory.stop_reason == "finished"
        assert d.messages[0]["content"] == prompt_for(run)
        assert d.messages[1]["content"] == run.user_template.format(query=d.trajectory.query)
        hits = [len(r.hits) for r in d.trajectory.tool_results if r.name.endswith("_search")]
        assert hits and max(hits) <= run.tool_max_results
    assert max(len(r.hits) for d in fit for r in d.trajectory.tool_results) > 3  # more than the teacher's own 3
    assert len({len(d.trajectory.tool_results) for d in fit}) >= 2  # still more than one shape


def test_sft_trains_on_assistant_tokens_and_saves_a_loadable_model(built_index, papers, tmp_path, tiny_qwen,
                                                                  monkeypatch):
    """One short LoRA SFT run (a tiny Qwen2 with the packaged tokenizer) on two demonstrations: the loss is
    computed on the assistant turns only (TRL's training template), the LoRA weights move, and the merged
    model loads and generates."""
    q = Query(qid="c", query="graph neural networks for molecules",
              gold_in_corpus=[by_title(papers, "Graph neural networks").arxiv_id])
    rng = random.Random(1)
    demos = [select(teacher_episode(q, _env(built_index), rng, COMPACT_SYSTEM_PROMPT)) for _ in range(2)]
    demos = [d.model_copy(update={"selected": True}) for d in demos]
    info = train_sft(demos, tmp_path / "sft-model",
                     SFTSettings(model=tiny_qwen, epochs=1, batch_size=1, lora_r=2, max_length=2400, threads=2,
                                 dtype="float32"))
    assert info["steps"] == 2 and info["first_loss"] is not None and info["last_loss"] is not None
    assert info["assistant_tokens"] > 0 and info["assistant_tokens"] < info["tokens"]  # loss on the agent's turns only
    assert info["lora_norm"] > 0  # the adapter left its zero initialisation
    from arxivqa.agent import LocalHFPolicy, tool_schemas

    policy = LocalHFPolicy(str(tmp_path / "sft-model"))
    turn = policy.chat(demos[0].messages[:2], tool_schemas(), 8)
    assert 0 < turn.completion_tokens <= 8
    # what a fresh clone has: the published bf16 adapter and sft.json, from which the model is rebuilt by name
    import json

    import torch
    from safetensors.torch import load_file

    from arxivqa.models import resolve_model
    from arxivqa.sft import publish_warm_start

    monkeypatch.setenv("ARXIVQA_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("ARXIVQA_MODELS_DIR", str(tmp_path / "models"))
    kept = publish_warm_start(tmp_path / "sft-model")
    assert sorted(p.name for p in (kept / "adapter").iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    assert json.loads((kept / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"] == tiny_qwen
    assert {v.dtype for v in load_file(str(kept / "adapter" / "adapter_model.safetensors")).values()} == {torch.bfloat16}
    rebuilt = resolve_model("sft-model")
    assert rebuilt == str(tmp_path / "models" / "sft-model")
    again = LocalHFPolicy(rebuilt, dtype="float32").chat(demos[0].messages[:2], tool_schemas(), 8)
    assert again.completion_tokens > 0
    # a clone that has the record but not the (git-ignored) weights is told how to build them
    import shutil

    shutil.rmtree(kept / "adapter")
    shutil.rmtree(tmp_path / "models" / "sft-model")
    with pytest.raises(FileNotFoundError, match="make warm-start`"):
        resolve_model("sft-model")
    (tmp_path / "results" / "warm_start" / "sft-model-rsf").mkdir(parents=True)  # another recipe's record
    shutil.copy(kept / "sft.json", tmp_path / "results" / "warm_start" / "sft-model-rsf" / "sft.json")
    with pytest.raises(FileNotFoundError, match="make warm-start-rsf`"):
        resolve_model("sft-model-rsf")
    (tmp_path / "results" / "warm_start" / "sft-model-rsf-compact").mkdir(parents=True)  # made for another view
    shutil.copy(kept / "sft.json", tmp_path / "results" / "warm_start" / "sft-model-rsf-compact" / "sft.json")
    with pytest.raises(FileNotFoundError, match="make warm-start-rsf WARM_PRESET=cpu-warm-compact`"):
        resolve_model("sft-model-rsf-compact")
    (tmp_path / "results" / "warm_start" / "sft-model-mix-compact").mkdir(parents=True)  # the mixed recipe
    shutil.copy(kept / "sft.json", tmp_path / "results" / "warm_start" / "sft-model-mix-compact" / "sft.json")
    with pytest.raises(FileNotFoundError, match="make warm-start-mix WARM_PRESET=cpu-warm-compact`"):
        resolve_model("sft-model-mix-compact")


def test_a_published_warm_start_is_trained_again_to_the_same_build_from_its_committed_demonstrations(
        built_index, papers, tmp_path, tiny_qwen, monkeypatch):
    """Warm-start weights are not committed; its demonstrations are. ``sft rebuild`` trains the same build from
    them (same record figures and adapter bytes), a run recorded on the first build continues on the rebuilt
    one, a different build is reported as such and never replaces the model, and publishing another build keeps
    the earlier record."""
    import json
    import shutil

    from arxivqa.models import check_warm_start, warm_start_identity
    from arxivqa.sft import main, publish_warm_start, rebuild_from_record, warm_start_from_demos

    monkeypatch.setenv("ARXIVQA_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("ARXIVQA_MODELS_DIR", str(tmp_path / "models"))
    q = Query(qid="c", query="graph neural networks for molecules",
              gold_in_corpus=[by_title(papers, "Graph neural networks").arxiv_id])
    rng = random.Random(1)
    demos = [select(teacher_episode(q, _env(built_index), rng, COMPACT_SYSTEM_PROMPT)).model_copy(
        update={"selected": True}) for _ in range(2)]
    demo_file = save_demos(tmp_path / "demos-teacher.jsonl", demos)
    tiny = SFTSettings(model=tiny_qwen, epochs=1, batch_size=1, lora_r=2, max_length=2400, threads=2, dtype="float32")
    model = tmp_path / "models" / "tiny-warm"
    first = warm_start_from_demos([demo_file], model, tiny, "cpu-warm-compact")
    assert first["arithmetic"]["dtype"] == "float32"  # what the rebuild compares before training again
    kept = publish_warm_start(model, [demo_file])
    assert sorted(p.name for p in (kept / "demos").iterdir()) == ["demos-teacher.jsonl.gz"]
    assert json.loads((kept / "demos.json").read_text())["files"] == ["demos-teacher.jsonl"]
    run_record = warm_start_identity("tiny-warm")  # what a run trained from this build writes
    demo_file.unlink()
    shutil.rmtree(model)  # a fresh machine: the record and demonstrations only

    with pytest.raises(ValueError, match="not built on this machine"):
        check_warm_start(run_record, "tiny-warm", "resume run")
    report = rebuild_from_record("tiny-warm")
    assert report["reproduced"] and report["differs"] == []
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["tiny-warm"]  # nothing staged is left
    again = json.loads((model / "sft.json").read_text())
    assert again["adapter_sha256"] == first["adapter_sha256"] and again["log"][0]["loss"] == first["log"][0]["loss"]
    assert warm_start_identity("tiny-warm")["sft_sha256"] != run_record["sft_sha256"]  # its timings differ
    check_warm_start(run_record, "tiny-warm", "resume run")  # the same build: the run continues
    old_style = {k: v for k, v in run_record.items() if k != "build_sha256"}  # recorded before build digests
    check_warm_start(old_style, "tiny-warm", "resume run")  # found through the committed record it names

    # another build under the same name (here its record differs in one figure): refused for the run, and
    # publishing it keeps the earlier record beside it
    record = json.loads((model / "sft.json").read_text())
    (model / "sft.json").write_text(json.dumps(record | {"first_loss": record["first_loss"] + 1e-9}))
    with pytest.raises(ValueError, match="another model"):
        check_warm_start(run_record, "tiny-warm", "resume run")
    publish_warm_start(model, [])
    earlier = kept / f"build-{run_record['sft_sha256'][:12]}"
    assert sorted(p.name for p in earlier.iterdir()) == ["demos", "demos.json", "sft.json"]
    assert warm_start_identity("tiny-warm", earlier / "sft.json")["sft_sha256"] == run_record["sft_sha256"]
    assert not (kept / "demos").exists()
    with pytest.raises(FileNotFoundError, match="not committed"):
        rebuild_from_record("tiny-warm")  # the demonstrations of the build just published were not given
    # trained again, the demonstrations cannot give the figures of that record: reported as another build
    shutil.copytree(earlier / "demos", kept / "demos")
    with pytest.raises(SystemExit, match="first_loss"):
        main(["rebuild", "tiny-warm", "--out", str(tmp_path / "elsewhere")])
    assert not json.loads((tmp_path / "elsewhere" / "rebuild.json").read_text())["reproduced"]
    # where the model is already the recorded build, it is not trained again; trained again on request, another
    # build does not replace it (runs may have been trained from it): it is left beside it, reported as such
    assert rebuild_from_record("tiny-warm")["already"]
    before = (model / "sft.json").read_text()
    with pytest.raises(SystemExit, match="first_loss.*left as it was"):
        main(["rebuild", "tiny-warm", "--force"])
    assert (model / "sft.json").read_text() == before
    staged = json.loads((tmp_path / "models" / "tiny-warm.rebuild" / "rebuild.json").read_text())
    assert not staged["reproduced"] and staged["left_in_place"] == str(model)
    # a record whose first step this machine does not give (as a CPU with other arithmetic would not): refused
    # after that one step, before the whole build is trained, and nothing is left
    rec = json.loads((kept / "sft.json").read_text())
    rec["log"][0]["loss"] += 1e-6
    (kept / "sft.json").write_text(json.dumps(rec))
    with pytest.raises(ValueError, match=r"first SFT step here gives loss .*recorded"):
        rebuild_from_record("tiny-warm", out=tmp_path / "third")
    assert not (tmp_path / "third").exists() and not (tmp_path / "third.rebuild").exists()


def test_a_rebuild_refuses_up_front_where_the_recorded_arithmetic_is_not_this_machines(tmp_path, monkeypatch):
    """A build trained in bfloat16 on a CPU with bf16 units cannot be reproduced bit for bit in float32 (or with
    another PyTorch): ``sft rebuild`` says so before training, not after it, and ``--force`` is the way past."""
    import gzip
    import json

    from arxivqa.models import arithmetic
    from arxivqa.sft import main, rebuild_from_record

    monkeypatch.setenv("ARXIVQA_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("ARXIVQA_MODELS_DIR", str(tmp_path / "models"))
    kept = tmp_path / "results" / "warm_start" / "some-warm"
    (kept / "demos").mkdir(parents=True)
    with gzip.open(kept / "demos" / "demos-teacher.jsonl.gz", "wt") as f:
        f.write("")
    (kept / "demos.json").write_text(json.dumps({"files": ["demos-teacher.jsonl"]}))
    here = arithmetic("float32")
    there = here | {"torch": here["torch"] + "-elsewhere"}
    (kept / "sft.json").write_text(json.dumps({"base": "x", "settings": {"dtype": "float32"}, "arithmetic": there,
                                               "demos": 1}))
    with pytest.raises(ValueError, match=r"other arithmetic.*torch .*-elsewhere there"):
        rebuild_from_record("some-warm")
    with pytest.raises(SystemExit, match="--force"):
        main(["rebuild", "some-warm"])
    assert not (tmp_path / "models").exists()  # nothing was trained or staged


def test_only_selected_demonstrations_are_trained_on():
    from arxivqa.records import Trajectory

    d = Demo(qid="x", source="teacher", shape="1", messages=[], trajectory=Trajectory(qid="x", query="q", policy="t"))
    with pytest.raises(ValueError, match="no selected"):
        train_sft([select(d)], "/nonexistent/never-written")


def test_the_warm_start_is_measured_next_to_its_teacher_on_the_rollout_view(built_index, papers, tiny_qwen):
    from arxivqa.evaluate import trajectory_metrics
    from arxivqa.sft import evaluate_warm_start
    from arxivqa.train import preset

    qs = [Query(qid=f"d{i}", query=p.title, gold_in_corpus=[p.arxiv_id]) for i, p in enumerate(papers[:2])]
    cfg = preset("cpu-demo", max_completion_length=64, max_tool_calling_iterations=1)
    summary, policy, teacher = evaluate_warm_start(tiny_qwen, qs, cfg, index=built_index, progress=False)
    assert set(summary) == {f"local:{tiny_qwen}", "teacher", "_run"} and summary["_run"]["queries"] == 2
    assert summary["teacher"]["finished"] == 1.0 and summary["teacher"]["unreadable_share"] == 0.0
    assert all(len(t.steps) <= 2 for t in policy)  # the rollout budgets: 1 tool round, then one more turn
    # the teacher saw the same compact view as GRPO rollouts: at most 3 titles-only hits per search
    searches = [r for t in teacher for r in t.tool_results if r.query]
    assert searches and all(len(r.hits) <= 3 and "abstract:" not in r.result for r in searches)
    assert 0.0 <= trajectory_metrics(policy[0])["unreadable_share"] <= 1.0


def test_a_demonstration_teaches_only_the_arguments_its_tools_declare():
    """An argument the schema does not declare (the policy copying the schema's ``required`` list) is
    ignored by the environment, so it leaves the trained chat; the declared ones stay as written."""
    from arxivqa.agent import tool_schemas
    from arxivqa.records import Trajectory
    from arxivqa.sft import schema_arguments
    from arxivqa.tools import CompactArxivEnv

    calls = [{"type": "function", "function": {"name": "keyword_search",
                                                "arguments": {"query": "tau bench", "required": ["tau bench"]}}},
             {"type": "function", "function": {"name": "finish",
                                                "arguments": {"paper_ids": ["P-1a2b3c4d"], "required": ["P-1a2b3c4d"]}}}]
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "tau bench"},
            {"role": "assistant", "content": "I search.", "tool_calls": calls}]
    d = Demo(qid="x", source="policy:p", shape="", messages=msgs, selected=True,
             trajectory=Trajectory(qid="x", query="tau bench", policy="p"))
    compact = tool_schemas(CompactArxivEnv(index=None))
    row = d.row(compact)
    written = [c["function"]["arguments"] for c in row["messages"][2]["tool_calls"]]
    assert written == [{"query": "tau bench"}, {"paper_ids": ["P-1a2b3c4d"]}]
    assert schema_arguments(msgs, compact)[1] == 2
    assert d.messages[2]["tool_calls"][0]["function"]["arguments"]["required"] == ["tau bench"]  # the record stays
    # the full view declares more arguments (max_results, min_date), and keeps them
    full_call = {"query": "tau bench", "max_results": 5, "min_date": "2024-01-01"}
    msgs[2] = {**msgs[2], "tool_calls": [{"type": "function", "function": {"name": "keyword_search",
                                                                           "arguments": full_call}}]}
    assert schema_arguments(msgs, tool_schemas())[0][2]["tool_calls"][0]["function"]["arguments"] == full_call


def test_calls_can_be_taught_as_text_that_the_agent_reads_back():
    """``call_format="text"``: each turn's calls become JSON lines after its reasoning (no ``tool_calls``, so
    no template markers), and the agent's parser reads back the same calls from that text."""
    from arxivqa.agent import parse_tool_calls, tool_schemas
    from arxivqa.records import Trajectory

    calls = [{"type": "function", "function": {"name": "keyword_search", "arguments": {"query": "tau bench"}}},
             {"type": "function", "function": {"name": "semantic_search", "arguments": {"query": "agent benchmarks"}}}]
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "tau bench"},
            {"role": "assistant", "content": "I search both ways.", "tool_calls": calls},
            {"role": "tool", "name": "keyword_search", "content": "5 papers"}]
    d = Demo(qid="x", source="teacher", shape="", messages=msgs, selected=True,
             trajectory=Trajectory(qid="x", query="tau bench", policy="t"))
    as_text = d.row(tool_schemas(), call_format="text")["messages"]
    turn = as_text[2]
    assert "tool_calls" not in turn and turn["content"].startswith("I search both ways.\n\n")
    assert as_text[3] == msgs[3]  # tool results stay tool messages
    text, parsed, problems = parse_tool_calls(turn["content"])
    assert not problems and text.strip() == "I search both ways."
    assert [(c.name, c.arguments) for c in parsed] == [("keyword_search", {"query": "tau bench"}),
                                                       ("semantic_search", {"query": "agent benchmarks"})]
    assert d.row(tool_schemas())["messages"][2]["tool_calls"]  # the default keeps the template's form
    with pytest.raises(ValueError, match="call_format"):
        train_sft([d], "/nonexistent/never-written", SFTSettings(call_format="xml"))


def test_a_short_run_sees_as_many_queries_as_it_can():
    from arxivqa.records import Trajectory
    from arxivqa.sft import spread

    def demo(qid, selected=True):
        return Demo(qid=qid, source="teacher", shape="", messages=[], selected=selected,
                    trajectory=Trajectory(qid=qid, query="q", policy="t"))

    demos = [demo("a"), demo("a"), demo("a"), demo("b", False), demo("b"), demo("c")]
    assert [d.qid for d in spread(demos)] == ["a", "b", "c", "a", "a"]
    assert [d.qid for d in spread(demos, 2)] == ["a", "b"]


def test_a_second_stage_trains_on_unseen_demonstrations_with_the_rollouts_prompt():
    """``spread(skip=N)`` leaves out the first N of the round-robin order (what a first stage saw), and a
    demonstration recorded under an older system prompt is trained with the one rollouts now use."""
    from arxivqa.records import Trajectory
    from arxivqa.sft import spread

    def demo(qid, k):
        msgs = [{"role": "system", "content": "old prompt"}, {"role": "user", "content": f"{qid}{k}"}]
        return Demo(qid=qid, source="teacher", shape=str(k), messages=msgs, selected=True,
                    trajectory=Trajectory(qid=qid, query="q", policy="t"))

    demos = [demo(q, k) for q in "abc" for k in range(2)] + [demo("d", 0).model_copy(update={"selected": False})]
    order = [(d.qid, d.shape) for d in spread(demos)]
    assert order == [("a", "0"), ("b", "0"), ("c", "0"), ("a", "1"), ("b", "1"), ("c", "1")]
    assert [(d.qid, d.shape) for d in spread(demos, limit=2, skip=3)] == order[3:5]
    row = demos[0].row([], COMPACT_SYSTEM_PROMPT)
    assert row["messages"][0] == {"role": "system", "content": COMPACT_SYSTEM_PROMPT}
    assert row["messages"][1] == demos[0].messages[1] and demos[0].messages[0]["content"] == "old prompt"
    assert demos[0].row([])["messages"][0]["content"] == "old prompt"


class _Searcher:
    """A test double for a policy: it searches the query's words (``repeat``: the same search twice), then
    finishes with the first paper it was shown, reading nothing but the conversation; it records each request."""

    name = "searcher"

    def __init__(self, repeat: bool = False):
        self.repeat, self.requests = repeat, []

    def chat(self, messages, tools, max_new_tokens):
        import copy
        import re

        from arxivqa.records import AssistantTurn, ToolCall

        self.requests.append(copy.deepcopy(messages))
        query = messages[1]["content"].removeprefix("Search query: ")
        searches = sum(m["role"] == "assistant" for m in messages)
        if searches < (2 if self.repeat else 1):
            call = ToolCall(name="keyword_search", arguments={"query": query})
        else:
            shown = re.findall(r"P-[0-9a-f]{8}", "".join(m["content"] for m in messages if m["role"] == "tool"))
            call = ToolCall(name="finish", arguments={"paper_ids": shown[:1]})
        return AssistantTurn(text="Next step.", tool_calls=[call], completion_tokens=5)


def _chat(messages):
    """Messages without call IDs, arguments as values: what a chat template renders."""
    import json

    def args(a):
        return json.loads(a) if isinstance(a, str) else a

    return [(m["role"], m.get("name"), m.get("content"),
             [(c["function"]["name"], args(c["function"]["arguments"])) for c in m.get("tool_calls", [])])
            for m in messages]


def test_a_policys_own_episodes_become_demonstrations_of_the_chat_it_was_sent(built_index, papers, tmp_path):
    """Rejection sampling: each train query is played ``per_query`` times with the preset's rollout view;
    a demonstration is the conversation the policy was sent, plus its last turn and the tools' answers."""
    from arxivqa.corpus import select_queries
    from arxivqa.sft import demo_stats, policy_demos
    from arxivqa.train import preset, prompt_for

    qfile = write_jsonl(tmp_path / "q.jsonl", [
        {"qid": f"t{i}", "query": p.title, "gold_in_corpus": [p.arxiv_id], "difficulty": "easy"}
        for i, p in enumerate(papers[:12])])
    train = {q.qid for q in select_queries(qfile, "train").queries}
    policy = _Searcher()
    demos = policy_demos(DemoConfig(queries=str(qfile), per_query=2, limit=3, policy="searcher"),
                         index=built_index, policy=policy, progress=False)
    assert len(demos) == 6 and {d.qid for d in demos} <= train and len({d.qid for d in demos}) == 3
    cfg = preset("cpu-warm")
    for d in demos:
        assert d.source == "policy:searcher" and d.shape == "1 rounds, 2 calls"
        assert d.messages[0]["content"] == prompt_for(cfg) and d.messages[1]["content"].startswith("Search query: ")
        # what the policy was sent on its last turn, then that turn and the tool's answer
        sent = [r for r in policy.requests if len(r) == len(d.messages) - 2]
        assert sum(_chat(r) == _chat(d.messages[:-2]) for r in sent) == 1  # its own episode's, IDs included
        assert d.messages[-2]["tool_calls"][0]["function"]["name"] == "finish"
        assert d.messages[-1]["role"] == "tool" and d.messages[-1]["content"].startswith("Submitted")
        hits = [r for r in d.trajectory.tool_results if r.query]
        assert len(hits[0].hits) <= cfg.tool_max_results  # the preset's tool view
    # the title searched as written finds its own paper: finished, gold surfaced, nothing refused
    assert all(d.selected for d in demos) and demo_stats(demos)["selected"] == 6
    with pytest.raises(ValueError, match="training split"):
        policy_demos(DemoConfig(queries=str(qfile), split="dev", policy="searcher"), index=built_index, policy=policy)


def test_an_episode_with_a_refused_call_is_not_a_demonstration(built_index, papers, tmp_path):
    """The environment refuses a repeated search; a demonstration would teach the repeat, so it is not kept."""
    from arxivqa.sft import policy_demos

    qfile = write_jsonl(tmp_path / "q.jsonl", [
        {"qid": f"t{i}", "query": p.title, "gold_in_corpus": [p.arxiv_id], "difficulty": "easy"}
        for i, p in enumerate(papers[:12])])
    demos = policy_demos(DemoConfig(queries=str(qfile), per_query=1, limit=2, policy="searcher"),
                         index=built_index, policy=_Searcher(repeat=True), progress=False)
    assert demos and all(d.trajectory.stop_reason == "finished" for d in demos)
    assert {(d.selected, d.reason) for d in demos} == {(False, "a tool call refused")}
    # stripped of the refused repeat (its call and its error message), the rest is the one-search episode
    from arxivqa.sft import strip_refused

    once = policy_demos(DemoConfig(queries=str(qfile), per_query=1, limit=2, policy="searcher"),
                        index=built_index, policy=_Searcher(), progress=False)
    for d, clean in zip(demos, once):
        s = strip_refused(d)
        assert s.selected and s.reason.endswith("1 refused call removed") and s.shape == clean.shape
        assert not any(m["role"] == "tool" and m["content"].startswith("Error") for m in s.messages)
        assert [m["role"] for m in s.messages] == [m["role"] for m in clean.messages]
        assert len(d.trajectory.tool_results) == 3 and not d.selected  # the original is left as it was
    assert strip_refused(once[0]) is once[0]
    from arxivqa.sft import demos_record

    rec = demos_record(demos, ["data/sft/x.jsonl"], stripped=True)  # what a warm start records it trained on
    assert rec["files"] == ["x.jsonl"] and rec["selected"] == 2 and rec["before_strip"]["selected"] == 0
    assert rec["before_strip"]["rejected"] == {"a tool call refused": 2} and len(rec["selected_demos"]) == 2


class _Looper:
    """A test double for a small policy that searches but cannot end: with ``unreadable`` its first turn has
    no readable call; otherwise each turn searches the query's words (a repeat, refused after the first) and
    writes ``finish`` with an ID it invented."""

    name = "looper"

    def __init__(self, unreadable: bool = False):
        self.unreadable = unreadable

    def chat(self, messages, tools, max_new_tokens):
        from arxivqa.records import AssistantTurn, ToolCall

        if self.unreadable and sum(m["role"] == "assistant" for m in messages) == 0:
            return AssistantTurn(text="", parse_problems=["no closing tag"], completion_tokens=256)
        query = messages[1]["content"].removeprefix("Search query: ")
        return AssistantTurn(text="", completion_tokens=40, tool_calls=[
            ToolCall(name="keyword_search", arguments={"query": query}),
            ToolCall(name="finish", arguments={"paper_ids": ["P-1234567890"]})])


def test_the_teacher_finishes_what_a_policy_searched(built_index, papers, tmp_path):
    """A policy's episode that never submits becomes its own search turn, replayed, plus the teacher's finish
    (the fusion of what it saw); a clean episode stays the policy's own; gold only selects."""
    from arxivqa.sft import finish_demos, policy_demos

    qfile = write_jsonl(tmp_path / "q.jsonl", [
        {"qid": f"t{i}", "query": p.title, "gold_in_corpus": [p.arxiv_id], "difficulty": "easy"}
        for i, p in enumerate(papers[:12])])
    cfg = DemoConfig(queries=str(qfile), per_query=1, limit=2, policy="looper")
    raw = policy_demos(cfg, index=built_index, policy=_Looper(), progress=False)
    assert not any(d.selected for d in raw)  # invented IDs: refused, so never finished
    done = finish_demos(raw, cfg, index=built_index)
    for d, r in zip(done, raw):
        assert d.selected and d.source == "policy:looper+teacher-finish" and d.shape == "1 rounds, 2 calls"
        assert [m["role"] for m in d.messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
        search, finish = d.messages[2]["tool_calls"], d.messages[4]["tool_calls"]
        assert [c["function"]["name"] for c in search] == ["keyword_search"]  # its finish dropped
        assert search[0]["function"]["arguments"] == r.trajectory.steps[0].assistant.tool_calls[0].arguments
        shown = [h.id for h in d.trajectory.steps[0].results[0].hits]
        assert finish[0]["function"]["arguments"] == {"paper_ids": shown[:10]} and shown
        assert d.messages[-1]["content"].startswith("Submitted") and "Error" not in str(d.messages)
        assert d.trajectory.submitted and r.trajectory.gold_in_corpus[0] in d.trajectory.submitted
    # without gold the same actions, not selected
    blind = [r.model_copy(update={"trajectory": r.trajectory.model_copy(update={"gold_in_corpus": []})}) for r in raw]
    undone = finish_demos(blind, cfg, index=built_index)
    assert [_chat(d.messages) for d in undone] == [_chat(d.messages) for d in done]
    assert {(d.selected, d.reason) for d in undone} == {(False, "no gold paper surfaced")}
    # an episode that passes on its own is kept as it is; one without a readable search turn is not completed
    own = policy_demos(cfg.model_copy(update={"policy": "searcher"}), index=built_index, policy=_Searcher(),
                       progress=False)
    assert [d.source for d in finish_demos(own, cfg, index=built_index)] == ["policy:searcher"] * 2
    bad = policy_demos(cfg, index=built_index, policy=_Looper(unreadable=True), progress=False)
    out = finish_demos(bad, cfg, index=built_index)
    assert all(not d.selected and d.reason == "no readable search turn" and len(d.messages) == 2 for d in out)
    # measuring the teacher on held-out episodes: every episode completed, none selected away, gold never read
    from arxivqa.sft import teacher_finished

    measured = teacher_finished([r.trajectory for r in blind], cfg, index=built_index)
    assert [t.policy for t in measured] == ["looper + teacher finish"] * 2
    assert [t.submitted for t in measured] == [d.trajectory.submitted for d in done]


def test_the_teachers_refinement_is_the_same_in_every_process():
    """Words tied in count are taken in the order the titles show them, not in a set's order, which changes
    with PYTHONHASHSEED (the teacher's demonstrations differed between two builds this way)."""
    import os
    import subprocess
    import sys

    code = ("from arxivqa.sft import _refinement; print(_refinement('learning to rank', ['alpha beta gamma delta', "
            "'delta gamma beta alpha', 'epsilon zeta eta theta', 'theta eta zeta epsilon'], n=3))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(h)}).stdout for h in range(6)}
    assert outs == {"alpha beta gamma learning rank\n"}
