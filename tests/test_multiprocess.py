"""Training across processes: ``arxivqa.train`` under ``accelerate launch`` (data parallel), proven on the CPU.

One real GRPO step of a tiny random Qwen2 as two processes (configs/accelerate/cpu-2proc.yaml: the torchrun
launcher, gloo). Run as a script, this file is what each process runs: ``arxivqa.train.train`` on the tiny
index with a reward that differs between completions (so the step moves the adapter), then its own copy of
the adapter written next to the run. The test checks that the two ranks saw different prompts, that the
logged reward is the mean over both ranks' rollouts (TRL gathered them), and that the adapter both ranks hold
after the step is the same, moved, and the one saved. The launch settings (per-process batch, vLLM server
mode, the plain GPU path) and the layout files are checked without launching anything.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAYOUTS = REPO / "configs" / "accelerate"
LAUNCH_TIMEOUT_S = 600


# --------------------------------------------------------------------------- what each process runs


def completion_score(traj) -> tuple[float, dict[str, float]]:
    """A reward of query ``t<i>``: i/4 plus up to 0.25 from a hash of the rollout's text. Completions of one
    group differ (a random model writes different text each time), so advantages are non-zero and the
    adapter moves; two ranks' pairs of rollouts of different queries never sum to the same reward."""
    text = "\n".join(s.assistant.text for s in traj.steps)
    jitter = int.from_bytes(hashlib.sha256(text.encode()).digest()[:2], "big") / 65536 / 4
    value = int(traj.qid[1:]) / 4 + jitter
    return value, {"total": value}


def run_rank(argv: list[str]) -> None:
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    from arxivqa.train import preset, process_rank, train

    p = argparse.ArgumentParser()
    for name in ("--model", "--index", "--queries", "--out"):
        p.add_argument(name, required=True)
    a = p.parse_args(argv)
    cfg = preset("cpu-demo", model=a.model, index=a.index, queries=a.queries, split="all", max_steps=1,
                 prompts_per_step=2, num_generations=2, max_completion_length=16, max_tool_calling_iterations=1,
                 save_steps=1, lora_r=2, threads=1, tensorboard=False, dtype="float32", learning_rate=1e-2)
    trainer = train(cfg, a.out, scorer=completion_score)
    rank, _ = process_rank()
    model = trainer.accelerator.unwrap_model(trainer.model)
    state = {k: v.detach().contiguous() for k, v in get_peft_model_state_dict(model).items()}
    save_file(state, str(Path(a.out) / f"adapter-rank{rank}.safetensors"))


# --------------------------------------------------------------------------- the test


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_two_processes(tiny_qwen: str, index_folder: Path, queries: Path, out: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(LAYOUTS / "cpu-2proc.yaml"),
           "--main_process_port", str(free_port()), __file__,
           "--model", tiny_qwen, "--index", str(index_folder), "--queries", str(queries), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "lib"), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S, cwd=REPO,
                          check=False)


def test_two_processes_train_one_grpo_step_in_sync(tiny_qwen, built_index, papers, tmp_path):
    from safetensors.torch import load_file

    from arxivqa.train import load_rollouts

    from conftest import write_jsonl

    queries = write_jsonl(tmp_path / "q.jsonl", [
        {"qid": f"t{i}", "query": p.title, "gold_in_corpus": [p.arxiv_id], "difficulty": "easy"}
        for i, p in enumerate(papers[:4])])
    out = tmp_path / "run"
    done = launch_two_processes(tiny_qwen, built_index.folder, queries, out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]

    rows = load_rollouts(out / "rollouts.jsonl")  # both ranks' rollouts, written once by rank 0
    assert [r["rank"] for r in rows] == [0, 0, 1, 1] and {r["step"] for r in rows} == {1}
    seen = {rank: {r["trajectory"]["qid"] for r in rows if r["rank"] == rank} for rank in (0, 1)}
    assert len(seen[0]) == len(seen[1]) == 1 and seen[0] != seen[1]  # each rank: its own prompt, 2 generations

    totals = {rank: [r["reward"]["total"] for r in rows if r["rank"] == rank] for rank in (0, 1)}
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    step = next(m for m in logged if m.get("step") == 1 and "reward" in m)
    everyone = totals[0] + totals[1]
    assert step["reward"] == pytest.approx(sum(everyone) / 4, abs=1e-6)  # TRL's mean over the gathered rewards
    assert sum(totals[0]) != sum(totals[1])  # ... which differs from what either rank saw alone

    adapters = [load_file(str(out / f"adapter-rank{r}.safetensors")) for r in (0, 1)]
    saved = load_file(str(out / "final" / "adapter_model.safetensors"))
    assert set(adapters[0]) == set(adapters[1]) == set(saved)
    for name in saved:
        assert adapters[0][name].equal(adapters[1][name]), name  # gradients averaged over the ranks
        assert adapters[0][name].equal(saved[name]), name
    assert any(adapters[0][n].abs().sum() > 0 for n in saved if "lora_B" in n)  # the step moved the adapter
    assert not list(out.glob("tensorboard*")) and (out / "timing.jsonl").exists()


# --------------------------------------------------------------------------- settings, without launching


def test_the_step_batch_is_global_and_split_over_the_processes(monkeypatch, tmp_path):
    from arxivqa.train import grpo_args, preset

    cfg = preset("paper")  # 8 prompts x 8 generations
    assert grpo_args(cfg, tmp_path)["per_device_train_batch_size"] == 64
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert grpo_args(cfg, tmp_path)["per_device_train_batch_size"] == 8
    monkeypatch.setenv("WORLD_SIZE", "6")
    with pytest.raises(ValueError, match="multiple of 6"):
        grpo_args(cfg, tmp_path)
    assert grpo_args(cfg.model_copy(update={"prompts_per_step": 6}), tmp_path)["per_device_train_batch_size"] == 8


def test_vllm_server_mode_and_the_plain_gpu_path_are_settings(tmp_path):
    from trl import GRPOConfig

    from arxivqa.train import grpo_args, preset, run_identity

    colocated = grpo_args(preset("paper"), tmp_path)
    assert colocated["use_vllm"] and "vllm_mode" not in colocated and "model_init_kwargs" not in colocated
    served = preset("paper", vllm_mode="server", vllm_server_url="http://10.0.0.2:8000", unsloth=False)
    args = grpo_args(served, tmp_path)
    assert args["vllm_mode"] == "server" and args["vllm_server_base_url"] == "http://10.0.0.2:8000"
    assert args["model_init_kwargs"] == {"dtype": "bfloat16"}
    trl_args = GRPOConfig(**{**args, "bf16": False, "use_cpu": True})  # TRL accepts them (bf16 needs a GPU here)
    assert trl_args.vllm_mode == "server" and trl_args.vllm_server_base_url == "http://10.0.0.2:8000"
    assert run_identity(served) == run_identity(preset("paper"))  # how rollouts are served is not what a run is


@pytest.mark.parametrize("name,processes,kind", [("1gpu", 1, "NO"), ("zero3", 8, "DEEPSPEED"),
                                                 ("multinode-zero3", 16, "DEEPSPEED"), ("cpu-2proc", 2, "MULTI_GPU")])
def test_each_layout_file_is_an_accelerate_config(name, processes, kind):
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_config_from_file(str(LAYOUTS / f"{name}.yaml"))
    assert cfg.num_processes == processes and cfg.distributed_type.value == kind
    if kind == "DEEPSPEED":
        assert cfg.deepspeed_config["zero_stage"] == 3 and cfg.deepspeed_config["zero3_save_16bit_model"]


if __name__ == "__main__":
    run_rank(sys.argv[1:])
