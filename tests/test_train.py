"""GRPO training: config assembly, the lazy GPU path, rollouts rebuilt from TRL's messages, the reward
function TRL calls, one real GRPO step with the packaged model on the tiny index, and a run's life after it
(resume, read back, export, evaluation) with a tiny model."""

import json
import subprocess
import sys

import pandas as pd
import pytest
import torch

from arxivqa.corpus import Query
from arxivqa.diagnostics import load_run
from arxivqa.rewards import RewardConfig, rlvr_reward
from arxivqa.tools import ArxivEnv
from arxivqa.train import (PRESETS, RolloutLog, StepClock, TrainConfig, gpu_available, grpo_args, load_rollouts,
                           load_unsloth, make_reward_func, order_queries, preset, prompt_for, rollout_trajectory,
                           train)

from conftest import by_title, write_jsonl


def test_the_paper_preset_carries_the_seeds_hyper_parameters(tmp_path):
    cfg = preset("paper")
    a = grpo_args(cfg, tmp_path)
    assert (a["learning_rate"], a["num_generations"], a["num_iterations"], a["beta"], a["epsilon"],
            a["epsilon_high"]) == (1e-6, 8, 4, 0.02, 0.2, 0.28)
    assert a["per_device_train_batch_size"] == 64  # 8 prompts x 8 generations (TRL counts completions)
    assert cfg.gpu and cfg.use_vllm and cfg.model == "Qwen/Qwen3-8B"


def test_the_cpu_demo_config_builds_a_trl_config(tmp_path):
    from trl import GRPOConfig

    cfg = preset("cpu-demo", max_steps=3, curriculum="easy-to-hard")
    args = GRPOConfig(**grpo_args(cfg, tmp_path))
    assert args.max_steps == 3 and args.num_generations == cfg.num_generations and args.beta == cfg.beta
    assert args.use_cpu and not args.shuffle_dataset  # a curriculum must keep its order
    assert set(PRESETS) == {"paper", "cpu-demo", "cpu-warm", "cpu-warm-compact"}
    # cpu-warm-compact is cpu-warm with the terse tool schemas, nothing else
    assert preset("cpu-warm-compact").model_dump(exclude={"preset"}) == preset("cpu-warm", tool_schemas="compact").model_dump(exclude={"preset"})
    with pytest.raises(ValueError, match="unknown preset"):
        preset("huge")
    warm = GRPOConfig(**grpo_args(preset("cpu-warm"), tmp_path))  # the long-run preset (policy chosen by measurement)
    assert warm.num_generations == 4 and warm.max_tool_calling_iterations == 3 and warm.use_cpu
    assert warm.min_p is None and GRPOConfig(**grpo_args(preset("cpu-warm", min_p=0.1), tmp_path)).min_p == 0.1
    with pytest.raises(ValueError):
        preset("cpu-warm", min_p=2.0)


def test_unsloth_is_imported_lazily_and_only_with_a_gpu():
    code = "import arxivqa.train, sys; assert 'unsloth' not in sys.modules and 'vllm' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
    if not gpu_available():
        with pytest.raises(RuntimeError, match="GPU"):
            load_unsloth(preset("paper"))
        assert "unsloth" not in sys.modules


def test_easy_to_hard_curriculum_orders_by_difficulty():
    qs = [Query(qid=f"q{i}", query="x", difficulty=d) for i, d in enumerate(["hard", "easy", None, "medium", "easy"])]
    ordered = order_queries(qs, "easy-to-hard", seed=1)
    assert [q.difficulty for q in ordered][:2] == ["easy", "easy"] and ordered[-1].difficulty == "hard"
    assert order_queries(qs, "uniform") == qs


def _completion(env, papers):
    """What TRL hands the reward function: assistant messages with parsed tool calls, tool messages."""
    a = env.keyword_search(query="graph neural networks molecules")
    b = env.semantic_search(query="protein structure prediction")
    oid = next(o for o, real in env.episode.id_map.items() if real == by_title(papers, "Graph neural").arxiv_id)
    c = env.finish(paper_ids=[oid])
    call = lambda name, args: {"type": "function", "function": {"name": name, "arguments": args}}  # noqa: E731
    return [
        {"role": "assistant", "content": "Search both ways.", "tool_calls": [
            call("keyword_search", {"query": "graph neural networks molecules"}),
            call("semantic_search", {"query": "protein structure prediction"})]},
        {"role": "tool", "name": "keyword_search", "content": a},
        {"role": "tool", "name": "semantic_search", "content": b},
        {"role": "assistant", "content": "", "tool_calls": [call("finish", {"paper_ids": [oid]})]},
        {"role": "tool", "name": "finish", "content": c},
    ]


def test_a_rollout_is_rebuilt_from_trls_messages_and_the_environment(built_index, papers):
    env = ArxivEnv(built_index)
    gold = by_title(papers, "Protein structure").arxiv_id
    env.reset(qid="q", query="proteins", gold_in_corpus=[gold])
    completion = _completion(env, papers)
    completion.insert(3, {"role": "tool", "name": "no_such_tool", "content": "{'error': 'Tool not found'}"})
    traj = rollout_trajectory({"qid": "q", "query": "proteins", "gold_in_corpus": [gold]}, completion, env, 42)
    assert [len(s.results) for s in traj.steps] == [3, 1] and traj.completion_tokens == 42
    assert gold in traj.steps[0].results[1].result_ids  # the semantic search found it (real IDs)
    assert traj.steps[0].results[2].error and traj.steps[0].results[2].name == "no_such_tool"
    assert traj.submitted == [by_title(papers, "Graph neural").arxiv_id] and traj.stop_reason == "finished"
    assert rlvr_reward(traj).search_recall == 1.0
    # the end of turn that ends a finished rollout in TRL's loop (end_finished_episodes) is not a turn
    ended = rollout_trajectory({"qid": "q", "query": "proteins", "gold_in_corpus": [gold]},
                               completion + [{"role": "assistant", "content": ""}], env, 43)
    assert len(ended.steps) == 2 and ended.stop_reason == "finished"


def test_a_finish_in_the_turn_trl_did_not_run_is_run_and_other_calls_are_not(built_index, papers):
    env = ArxivEnv(built_index)
    gold = by_title(papers, "Graph neural").arxiv_id
    env.reset(qid="q", query="graphs", gold_in_corpus=[gold])
    full = _completion(env, papers)
    env.reset(qid="q", query="graphs", gold_in_corpus=[gold])  # rerun the first turn only, as TRL would
    env.keyword_search(query="graph neural networks molecules")
    env.semantic_search(query="protein structure prediction")
    oid = next(o for o, real in env.episode.id_map.items() if real == gold)
    last = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "keyword_search", "arguments": {"query": "molecules"}}},
        {"type": "function", "function": {"name": "finish", "arguments": {"paper_ids": [oid]}}}]}
    traj = rollout_trajectory({"qid": "q", "query": "graphs", "gold_in_corpus": [gold]}, full[:3] + [last], env)
    assert traj.submitted == [gold] and traj.stop_reason == "finished"
    assert [r.name for r in traj.tool_results] == ["keyword_search", "semantic_search", "finish"]  # the search did not run
    assert rlvr_reward(traj).gates["submission"]


def test_the_compact_prompt_states_the_runs_turn_budget():
    assert "You have 3 turns of tool calls" in prompt_for(preset("cpu-demo", max_tool_calling_iterations=3))
    assert "turns of tool calls" not in prompt_for(preset("cpu-demo", system_prompt="full"))


def test_the_reward_function_scores_logs_and_records(built_index, papers, tmp_path):
    envs, completions = [], []
    gold = by_title(papers, "Protein structure").arxiv_id
    for _ in range(2):
        env = ArxivEnv(built_index)
        env.reset(qid="q", query="proteins", gold_in_corpus=[gold])
        completions.append(_completion(env, papers))
        envs.append(env)
    envs[1].reset(qid="q", query="proteins", gold_in_corpus=[gold])  # second rollout: no tool call at all
    completions[1] = [{"role": "assistant", "content": "I know the answer already."}]
    log, metrics = RolloutLog(tmp_path / "rollouts.jsonl"), {}
    fn = make_reward_func(TrainConfig(rewards=RewardConfig()), log, StepClock())
    rewards = fn(prompts=[[], []], completions=completions, environments=envs, completion_ids=[[1] * 30, [1] * 5],
                 log_metric=lambda k, v: metrics.__setitem__(k, v), qid=["q", "q"], query=["proteins"] * 2,
                 gold_in_corpus=[[gold], [gold]], difficulty=["easy", "easy"])
    assert rewards[0] > 0 and rewards[1] == 0.0  # the second fails the submission gate
    rows = load_rollouts(tmp_path / "rollouts.jsonl")
    assert len(rows) == 2 and rows[0]["reward"]["search_recall"] == 1.0 and rows[1]["reward"]["gate/submission"] == 0
    assert metrics["rlvr/search_recall"] == 0.5 and metrics["rollout/tool_calls"] == 1.5


def test_one_grpo_step_with_the_packaged_model(built_index, papers, tmp_path):
    qfile = write_jsonl(tmp_path / "q.jsonl", [
        {"qid": f"t{i}", "query": p.title, "gold_in_corpus": [p.arxiv_id], "difficulty": "easy"}
        for i, p in enumerate(papers[:3])])
    cfg = preset("cpu-demo", queries=str(qfile), split="all", max_steps=1, num_generations=2,
                 max_completion_length=48, max_tool_calling_iterations=1, save_steps=1, lora_r=2, threads=2)
    out = tmp_path / "run"
    train(cfg, out, index=built_index)
    _check_first_step(out)
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))  # TRL's logs, live in TensorBoard


def _check_first_step(out):
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    step1 = next(m for m in metrics if m.get("step") == 1 and "loss" in m)
    assert "entropy" in step1 and "rlvr/search_recall" in step1 and "reward" in step1
    assert len(load_rollouts(out / "rollouts.jsonl")) == 2 and (out / "checkpoint-1").is_dir()
    timing = [json.loads(x) for x in (out / "timing.jsonl").read_text().splitlines()]
    assert timing[0]["step"] == 1 and timing[0]["generation"] > 0 and timing[0]["backward_optimizer"] > 0
    assert timing[0]["loss_forward"] > 0 and timing[0]["total"] >= timing[0]["generation"] + timing[0]["loss_forward"]
    assert timing[0]["lora_norm"] >= 0.0  # logged every step: 0 until a group has a reward signal
    assert json.loads((out / "config.json").read_text())["max_steps"] == 1


def test_a_run_resumes_is_read_back_exported_and_evaluated_on_a_file_it_never_saw(tiny_qwen, built_index, papers,
                                                                                   tmp_path):
    qfile = write_jsonl(tmp_path / "q.jsonl", [
        {"qid": f"t{i}", "query": p.title, "gold_in_corpus": [p.arxiv_id], "difficulty": "easy"}
        for i, p in enumerate(papers[:3])])
    cfg = preset("cpu-demo", model=tiny_qwen, queries=str(qfile), split="all", max_steps=1, num_generations=2,
                 max_completion_length=48, max_tool_calling_iterations=1, save_steps=1, lora_r=2, threads=2,
                 dtype="float32")
    out = tmp_path / "run"
    train(cfg, out, index=built_index)
    _check_first_step(out)
    # resume: one more step continues from checkpoint-1 and keeps step 1's rollouts
    train(cfg.model_copy(update={"max_steps": 2}), out, resume=True, index=built_index)
    steps = [r["step"] for r in load_rollouts(out / "rollouts.jsonl")]
    assert steps == [1, 1, 2, 2]
    run = load_run(out)  # what notebooks 04/05 read back
    assert list(run["summary"]["step"]) == [1, 2] and set(run["log"]["step"].dropna()) >= {1, 2}
    assert "reward/search_recall" in run["rollouts"] and len(run["timing"]) == 2
    assert {"signal_share", "lora_norm"} <= set(run["log"].columns)
    from arxivqa.diagnostics import DiagnosticsConfig, rediagnose

    strict = DiagnosticsConfig(min_search_turns=5)  # other thresholds, recomputed without reading the run again
    pd.testing.assert_frame_equal(rediagnose(run, strict)["rollouts"], load_run(out, strict)["rollouts"])
    # what notebooks 06/07 evaluate: the base model with the run's adapter merged (`run:<folder>`)
    from arxivqa.agent import make_policy, tool_schemas

    policy = make_policy(f"run:{out}")
    turn = policy.chat([{"role": "user", "content": "Find papers on sparse attention."}], tool_schemas(), 4)
    assert policy.name == "run:run" and 0 < turn.completion_tokens <= 4
    # kept in the repository: the compact outputs, the adapter in bf16 naming its base by name, no checkpoints
    from safetensors.torch import load_file

    from arxivqa.evaluate import main as evaluate_main
    from arxivqa.train import export_run, read_run

    kept = export_run(out, tmp_path / "committed" / "run")
    assert read_run(kept).steps_done == 2 and read_run(kept).finished and not list(kept.glob("checkpoint-*"))
    assert {v.dtype for v in load_file(str(kept / "final" / "adapter_model.safetensors")).values()} == {torch.bfloat16}
    assert json.loads((kept / "final" / "adapter_config.json").read_text())["base_model_name_or_path"] == cfg.model
    # evaluated on a query file it never saw, with the prompt, tool view and budgets it was trained with
    unseen = write_jsonl(tmp_path / "unseen.jsonl", [
        {"qid": "u0", "query": "message passing for molecules", "gold_in_corpus": [papers[0].arxiv_id]}])
    # next to its base model, which gets the run's view too (one table, the same queries and budgets)
    evaluate_main(["--policy", f"run:{kept}", "--policy", f"local:{cfg.model}", "--view", str(kept),
                   "--queries", str(unseen), "--split", "all", "--index",
                   str(built_index.folder), "--out", str(tmp_path / "eval"), "--name", "kept"])
    result = json.loads((tmp_path / "eval" / "kept.json").read_text())
    assert result["bench"]["episodes"] == 2 and result["bench"]["split"] == "all"
    assert [r["method"] for r in result["table"]][:2] == ["run:run", f"local:{cfg.model}"]
    assert result["bench"]["budgets"]["max_tokens"] == cfg.max_completion_length
    assert result["bench"]["view"] == f"run:{kept}" and result["bench"]["run_steps"] == {f"run:{kept}": 2}
    from arxivqa.evaluate import heldout_of_run

    (found,) = heldout_of_run("run", tmp_path / "eval")  # what notebook 04 shows of the run held out
    assert found["steps"] == 2 and list(found["table"]["method"])[:2] == ["run:run", f"local:{cfg.model}"]
    assert heldout_of_run("another-run", tmp_path / "eval") == []


def test_tool_calls_written_as_bare_or_fenced_json_are_read_during_training():
    import trl.trainer.grpo_trainer as grpo
    from transformers import AutoTokenizer
    from trl.chat_template_utils import add_response_schema

    from arxivqa.models import resolve_model
    from arxivqa.train import tolerant_tool_parsing

    tok = add_response_schema(AutoTokenizer.from_pretrained(resolve_model()))
    fenced = tok('Let me search.\n```json\n{"name": "keyword_search", "arguments": {"query": "sparse attention"}}\n```'
                 '<|im_end|>')["input_ids"]
    tagged = tok('<tool_call>\n{"name": "finish", "arguments": {"paper_ids": ["P-1"]}}\n</tool_call><|im_end|>')["input_ids"]
    assert not grpo.parse_response(tok, fenced).get("tool_calls")  # TRL alone misses it
    with tolerant_tool_parsing():
        msg = grpo.parse_response(tok, fenced)
        assert msg["tool_calls"] == [{"type": "function", "function": {"name": "keyword_search",
                                                                       "arguments": {"query": "sparse attention"}}}]
        assert msg["content"].strip() == "Let me search."
        assert grpo.parse_response(tok, tagged)["tool_calls"][0]["function"]["name"] == "finish"  # unchanged
    assert not grpo.parse_response(tok, fenced).get("tool_calls")  # restored afterwards


def test_the_reachable_filter_keeps_queries_a_search_of_their_text_can_answer(built_index, papers):
    from arxivqa.train import reachable_queries

    moe = by_title(papers, "Mixture-of-experts language models").arxiv_id
    music = by_title(papers, "Music generation with transformers").arxiv_id
    answerable = Query(qid="a", query="sparse mixture-of-experts layers route tokens", gold_in_corpus=[moe])
    off = Query(qid="b", query="federated averaging drift correction clients", gold_in_corpus=[music])
    kept = reachable_queries([answerable, off], built_index, k=2)
    assert [q.qid for q in kept] == ["a"]
    assert TrainConfig(query_filter="reachable").query_filter == "reachable"
    with pytest.raises(ValueError):
        TrainConfig(query_filter="easy")


def test_a_turn_after_tool_results_asks_only_for_the_budget_a_rollout_can_keep():
    """TRL asks every turn for max_completion_length new tokens and cuts the excess afterwards;
    bound_turns asks for the largest budget left in the call, and restores the setting after it."""
    from types import SimpleNamespace

    from arxivqa.train import bound_turns

    asked = []

    class FakeTrainer:
        use_vllm = False
        generation_config = SimpleNamespace(max_new_tokens=100)
        generation_kwargs = {"max_new_tokens": 100}

        def _generate_single_turn(self, prompt_ids, images, fields, num_generations, has_tool_images=False):
            asked.append((self.generation_config.max_new_tokens, self.generation_kwargs["max_new_tokens"]))
            return prompt_ids

        def _generate(self, steps):
            for ids in steps:
                self._generate_single_turn(ids, None, {}, 1)

    t = FakeTrainer()
    bound_turns(t, 100)
    p1, p2 = [1, 2, 3], [7, 8]
    t._generate([[p1, p2],                                # the step's prompts: the full budget
                 [p1 + [0] * 60, p2 + [0] * 90],          # 60 and 90 used: the first can keep 40
                 [p2 + [0] * 95],                         # 5 left
                 [[5, 5] + [0] * 10]])                    # not a continuation of a prompt: left alone
    assert asked == [(100, 100), (40, 40), (5, 5), (100, 100)]
    t._generate([[p2 + [0] * 90]])  # a new step: its first call records its prompts
    assert asked[-1] == (100, 100) and t.generation_config.max_new_tokens == 100


def test_trls_tool_loop_generates_nothing_after_an_episode_ended():
    """After a finish (or a call refused because of one), end_finished_episodes gives the rollout the
    end-of-turn token instead of asking the model for another turn; open rollouts are generated as before."""
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    from arxivqa.models import resolve_model
    from arxivqa.tools import EPISODE_OVER, FINISHED
    from arxivqa.train import end_finished_episodes

    tok = AutoTokenizer.from_pretrained(resolve_model())
    asked = []

    class FakeTrainer:
        use_vllm = False
        processing_class = _tokenizer = tok
        chat_template, chat_template_kwargs, _is_vlm = None, {}, False
        _get_tool_suffix_ids = GRPOTrainer._get_tool_suffix_ids

        def _generate_single_turn(self, prompt_ids, images, fields, num_generations, has_tool_images=False):
            asked.append([list(p) for p in prompt_ids])
            return [[101, 102] for _ in prompt_ids], None

    def after(name, result):
        msgs = [{"role": "user", "content": "q"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": name, "arguments": {}}}]},
                {"role": "tool", "name": name, "content": result}]
        return tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)

    t = FakeTrainer()
    end_finished_episodes(t)
    searched = after("keyword_search", "5 papers for \"x\" (keyword search):\n[1] id: P-1 | title: The episode is over")
    rows = [after("finish", f"Submitted 2 papers. {EPISODE_OVER}"), searched, after("finish", f"Error: {FINISHED}"),
            after("finish", "Error: unknown paper IDs P-9; submit only IDs shown by search results of this session")]
    ids, logprobs = t._generate_single_turn(rows, None, {}, 1)
    assert ids == [[tok.eos_token_id], [101, 102], [tok.eos_token_id], [101, 102]] and logprobs is None
    assert asked == [[rows[1], rows[3]]]  # one call, the open rollouts only (a refused finish leaves it open)
    assert t._generate_single_turn(rows[:1], None, {}, 1)[0] == [[tok.eos_token_id]] and len(asked) == 1
    assert t._generate_single_turn([rows[1]], None, {}, 4)[0] == [[101, 102]]  # nothing ended: passed through


def test_gradient_accumulation_slices_the_update_not_the_step(tiny_qwen, built_index, papers, tmp_path):
    """gradient_accumulation_steps=2: the step's 4 completions are generated once and trained on in two
    slices of 2, and the adapter after the step is the one a single slice of 4 gives (TRL's DAPO loss is
    normalised over the whole generation batch)."""
    from peft import get_peft_model_state_dict

    from arxivqa.train import grpo_args, run_identity

    qfile = write_jsonl(tmp_path / "q.jsonl", [
        {"qid": f"t{i}", "query": p.title, "gold_in_corpus": [p.arxiv_id], "difficulty": "easy"}
        for i, p in enumerate(papers[:2])])

    def score(traj):  # differs between completions of a group, so the step has a gradient
        value = (sum(map(ord, "".join(s.assistant.text for s in traj.steps))) % 97) / 97
        return value, {"total": value}

    adapters, rollouts, norms = {}, {}, {}
    for n in (1, 2):
        cfg = preset("cpu-demo", model=tiny_qwen, queries=str(qfile), split="all", max_steps=1, num_generations=4,
                     max_completion_length=16, max_tool_calling_iterations=1, save_steps=1, lora_r=2, threads=1,
                     tensorboard=False, dtype="float32", learning_rate=1e-2, gradient_accumulation_steps=n)
        args = grpo_args(cfg, tmp_path)
        assert (args["per_device_train_batch_size"], args["gradient_accumulation_steps"]) == (4 // n, n)
        trainer = train(cfg, tmp_path / f"ga{n}", index=built_index, scorer=score)
        model = trainer.accelerator.unwrap_model(trainer.model)
        adapters[n] = {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}
        rollouts[n] = [r["trajectory"]["steps"] for r in load_rollouts(tmp_path / f"ga{n}" / "rollouts.jsonl")]
        logged = [json.loads(x) for x in (tmp_path / f"ga{n}" / "metrics.jsonl").read_text().splitlines()]
        norms[n] = next(m["grad_norm"] for m in logged if "grad_norm" in m)
    assert rollouts[1] == rollouts[2]  # the same 4 completions, generated once
    assert norms[2] == pytest.approx(norms[1], rel=1e-4) and norms[1] > 0  # the same gradient, not only the same Adam step
    moved = [k for k in adapters[1] if "lora_B" in k and adapters[1][k].abs().sum() > 0]
    assert moved
    # Adam's first step is about lr * sign(grad): an element whose gradient is near Adam's eps moves by a
    # fraction of lr that float summation order changes, so the adapters agree to 1% of lr, not to 1e-6
    # (a different update would differ by the order of lr = 1e-2)
    for k in adapters[1]:
        torch.testing.assert_close(adapters[2][k], adapters[1][k], rtol=1e-3, atol=1e-4)
    assert run_identity(cfg) == run_identity(cfg.model_copy(update={"gradient_accumulation_steps": 1}))
    with pytest.raises(ValueError, match="gradient_accumulation_steps=3"):
        grpo_args(cfg.model_copy(update={"gradient_accumulation_steps": 3}), tmp_path)


def test_an_unfinished_run_kept_in_the_repository_continues_where_it_stopped(tiny_run, built_index, tmp_path):
    """A run exported unfinished (logs and its last checkpoint's adapter) is made resumable on a fresh
    machine: it continues at the next step with the queries a run never interrupted (the shared
    ``tiny_run``) trains on, and the learning rate continues its decay instead of starting again."""
    import shutil

    from arxivqa.train import export_run, read_run, revive_run

    _sets, cfg, straight = tiny_run
    # the same run stopped after step 1 (its config still says 3 steps) and kept in the repository
    stopped = tmp_path / "stopped"
    train(cfg.model_copy(update={"max_steps": 1}), stopped, index=built_index)
    shutil.rmtree(stopped / "final")
    (stopped / "config.json").write_text(json.dumps(cfg.model_dump(mode="json")))
    kept = export_run(stopped, tmp_path / "committed" / "stopped")
    assert not read_run(kept).finished and (kept / "checkpoint-1" / "adapter_model.safetensors").exists()
    with pytest.raises(ValueError, match="nothing to continue"):
        revive_run(straight, tmp_path / "nowhere")
    out = revive_run(kept, tmp_path / "fresh-machine" / "stopped")
    with pytest.raises(ValueError, match="not empty"):
        revive_run(kept, out)
    train(cfg, out, resume=True, index=built_index)
    assert read_run(out).finished and read_run(out).steps_done == 3

    def queries(run):
        return [(r["step"], r["trajectory"]["qid"]) for r in load_rollouts(run / "rollouts.jsonl")]

    assert queries(out) == queries(straight)  # step 1 kept, steps 2-3 the queries of the uninterrupted run

    def rates(run):
        return {m["step"]: m["learning_rate"] for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
                if "learning_rate" in m}

    assert rates(out) == pytest.approx(rates(straight)) and rates(out)[2] < rates(out)[1]
    revived = json.loads((export_run(out, tmp_path / "committed" / "again") / "revived.json").read_text())
    assert [r["step"] for r in revived["revivals"]] == [1] and "Adam moment estimates" in revived["revivals"][0]["reset"]


def test_only_a_revived_checkpoint_has_its_schedule_advanced_by_hand(tmp_path):
    """A checkpoint without optimizer.pt that revive_run did not rebuild (DeepSpeed keeps its optimizer state
    elsewhere) is left to the Trainer; the one it rebuilt gets the learning-rate schedule stepped forward."""
    from arxivqa.train import _resume_schedule

    run = tmp_path / "run"
    (run / "checkpoint-5").mkdir(parents=True)
    (run / "config.json").write_text(preset("cpu-demo").model_dump_json())
    assert _resume_schedule(None) == [] and _resume_schedule(run / "checkpoint-5") == []
    (run / "revived.json").write_text(json.dumps({"revivals": [{"step": 5}]}))
    assert len(_resume_schedule(run / "checkpoint-5")) == 1
    (run / "checkpoint-5" / "optimizer.pt").write_bytes(b"")  # trained on since: a full checkpoint again
    assert _resume_schedule(run / "checkpoint-5") == []
    (run / "checkpoint-10").mkdir()
    assert _resume_schedule(run / "checkpoint-10") == []


def test_a_run_continues_and_loads_only_on_the_warm_start_build_it_was_trained_from(tiny_qwen, built_index, papers,
                                                                                    tmp_path, monkeypatch):
    """Warm-start weights are not committed and a rebuild is another model: a run records the build it was
    trained from, and resuming, reviving or loading it on another build is refused with the two builds named."""
    import shutil

    from arxivqa.agent import run_policy
    from arxivqa.models import warm_start_identity
    from arxivqa.train import read_run, revive_run

    monkeypatch.setenv("ARXIVQA_MODELS_DIR", str(tmp_path / "models"))
    shutil.copytree(tiny_qwen, tmp_path / "models" / "tiny-warm")
    record = tmp_path / "models" / "tiny-warm" / "sft.json"
    first = json.dumps({"base": "tiny", "demos": 46, "first_loss": 0.71, "lora_norm": 2.17})
    record.write_text(first)
    assert warm_start_identity("tiny-warm")["demos"] == 46
    assert warm_start_identity(tiny_qwen) is None and warm_start_identity("qwen2.5-coder-0.5b-instruct") is None
    qfile = write_jsonl(tmp_path / "q.jsonl", [
        {"qid": f"t{i}", "query": p.title, "gold_in_corpus": [p.arxiv_id], "difficulty": "easy"}
        for i, p in enumerate(papers[:2])])
    cfg = preset("cpu-demo", model="tiny-warm", queries=str(qfile), split="all", max_steps=1, num_generations=2,
                 max_completion_length=16, max_tool_calling_iterations=1, save_steps=1, lora_r=2, threads=1,
                 dtype="float32", tensorboard=False)
    out = tmp_path / "run"
    train(cfg, out, index=built_index)
    assert read_run(out).warm_start == warm_start_identity("tiny-warm")
    # the warm start rebuilt: same name, other demonstrations and losses
    record.write_text(json.dumps({"base": "tiny", "demos": 48, "first_loss": 1.28, "lora_norm": 2.29}))
    longer = cfg.model_copy(update={"max_steps": 2})
    with pytest.raises(ValueError, match="first loss 0.71.*first loss 1.28"):
        train(longer, out, resume=True, index=built_index)
    with pytest.raises(ValueError, match="load run:run"):
        run_policy(out)
    kept = tmp_path / "kept"  # an unfinished run kept in the repository, as export_run leaves it
    (kept / "checkpoint-1").mkdir(parents=True)
    for name in ("config.json", "warm_start.json"):
        shutil.copy(out / name, kept / name)
    shutil.copy(out / "checkpoint-1" / "adapter_model.safetensors", kept / "checkpoint-1")
    with pytest.raises(ValueError, match="revive"):
        revive_run(kept, tmp_path / "revived")
    assert not (tmp_path / "revived").exists()
    record.unlink()  # not built here at all
    with pytest.raises(ValueError, match="not built on this machine"):
        run_policy(out)
    record.write_text(first)  # the build it was trained from: it continues
    train(longer, out, resume=True, index=built_index)
    assert read_run(out).steps_done == 2 and read_run(out).warm_start["demos"] == 46
