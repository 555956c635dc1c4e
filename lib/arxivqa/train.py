"""GRPO training of the retrieval agent: TRL's ``GRPOTrainer`` with the tools environment, LoRA, two rewards.

    python -m arxivqa.train --preset cpu-demo --reward rlvr --out runs/rlvr-demo     # CPU, packaged 0.5B
    python -m arxivqa.train --preset paper --reward rar --out runs/rar-paper          # one GPU, Qwen3-8B

- **Environment**: ``environment_factory`` = ``ArxivEnv`` over the index (one instance per rollout; TRL
  exposes its public methods as tools, runs the calls the model makes, and masks tool tokens out of
  the loss). A compact tool view (``tool_max_results``, ``tool_abstract_chars``) keeps tool output
  within the completion budget on a CPU.
- **Rewards**: ``rlvr`` (``rewards.rlvr_reward``: recall over all tool results − redundancy + multi-turn
  bonus, behind the four gates) or ``rar`` (the rubric judge, ``judge``). Each rollout is rebuilt as a
  ``Trajectory`` from TRL's completion messages and the environment's records, scored, and kept with
  its reward components in ``<out>/rollouts.jsonl`` for the collapse diagnostics; the component means
  go into TRL's logs (``log_metric``).
- **Presets**: ``paper`` (the seed's hyper-parameters: lr 1e-6, 8 prompts × 8 generations, 4 update
  epochs, KL β 0.02, clip ε 0.2 / 0.28, Qwen3-8B, Unsloth + vLLM on a GPU) and ``cpu-demo`` (the same
  algorithm, sized for 2 CPU cores: the packaged Qwen2.5-Coder-0.5B-Instruct in bfloat16 where the CPU
  has bf16 units, 1 prompt × 2 generations, LoRA r 8, 512 completion tokens (tool output included), 2
  tool rounds, a compact system prompt and tool view, a higher learning rate so 20 LoRA steps move at
  all; the step time is measured in ``timing.jsonl``). Any field can be
  overridden (``--set key=value``).
- **GPU path** (``gpu=True``, the ``paper`` preset): ``unsloth.FastLanguageModel`` loads the model with
  LoRA and vLLM rollouts (``fast_inference=True``); unsloth is imported only then, before
  transformers/trl/peft (install ``requirements-gpu.txt``). The CPU path is plain TRL + PEFT.
- **Context**: TRL's tool loop keeps the whole conversation; it bounds it by ``max_completion_length``
  (generated and tool tokens of a rollout; a tool result that would not fit is dropped), so a rollout's
  prompt never exceeds the prompt plus ``max_completion_length`` — set that below the model's context
  window. The agent's context budget (``context.fit_context``: older tool results to IDs and titles,
  then the oldest turns dropped with a note) is not applied inside TRL's loop, which gives no hook
  between turns; a rollout loop of our own would call it before each generation exactly as
  ``Agent.episode`` does — ``fit_context(messages, count_tokens, window − max_new_tokens, previous)``,
  passing the previous turn's ``ContextTrim`` so that the prompt prefix stays stable — and evaluation of
  a trained policy (``run:``) does use it.
- **Outputs** in ``<out>``: ``config.json``, ``metrics.jsonl`` (TRL's log per step), ``rollouts.jsonl``,
  ``timing.jsonl`` (per step: generation incl. tools, tools, rewards, reference log-probs, the loss
  forward, backward + optimizer; ``update`` = everything after generation and rewards),
  ``checkpoint-N/`` (``save_steps``); ``--resume`` continues from the last checkpoint.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from .agent import SYSTEM_PROMPT
from .config import Settings, process_rank, run_roots, set_library_default, settings
from .corpus import Query
from .files import atomic_write_json, atomic_write_text
from .records import AssistantTurn, ToolCall, ToolCallRecord, Trajectory, clean_text
from .rewards import RewardConfig, rlvr_reward

DIFFICULTY_ORDER = {"easy": 0, "medium": 1, None: 1, "hard": 2}

COMPACT_SYSTEM_PROMPT = """You are a research retrieval agent for arXiv AI papers: find the papers that best answer the user's query. Do not answer the query yourself: your only answer is a finish call with paper IDs. Think briefly, then call tools. Search from several angles (keyword_search for terms and names, semantic_search for ideas), use read_page when unsure, and end with finish, listing up to 10 paper IDs that tools returned, best first. Call a tool by writing:
<tool_call>
{"name": "keyword_search", "arguments": {"query": "your search terms"}}
</tool_call>
Submit by writing:
<tool_call>
{"name": "finish", "arguments": {"paper_ids": ["P-...", "P-..."]}}
</tool_call>"""


class TrainConfig(BaseModel):
    """Everything a training run depends on; saved as ``config.json`` next to its outputs."""

    @field_validator("user_template")
    @classmethod
    def _one_query_slot(cls, v: str) -> str:
        try:
            v.format(query="q")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"user_template must contain {{query}} and no other field: {exc}") from None
        if "{query}" not in v:
            raise ValueError("user_template must contain {query}")
        return v

    preset: str = "cpu-demo"
    reward: Literal["rlvr", "rar"] = "rlvr"
    model: str = "qwen2.5-coder-0.5b-instruct"  # a packaged name, local folder or hub ID
    # GRPO (names follow TRL's GRPOConfig)
    learning_rate: float = 5e-5
    prompts_per_step: int = 1
    num_generations: int = 2
    num_iterations: int = 1  # update epochs per generation batch (the seed: 4)
    beta: float = 0.02  # KL coefficient
    epsilon: float = 0.2
    epsilon_high: float = 0.28
    temperature: float = 1.0
    min_p: float | None = Field(None, ge=0.0, le=1.0)  # sampling keeps tokens with p >= min_p × the top p (TRL's)
    max_steps: int = 20
    max_completion_length: int = 512  # generated + tool tokens per rollout (TRL drops a tool result that would not fit)
    max_tool_calling_iterations: int = 2
    system_prompt: Literal["full", "compact"] = "compact"  # compact: the tool list is in the chat template anyway
    # the tools' JSON schemas in every prompt (tools.make_env): full (ArxivEnv: 652 tokens in Qwen2.5's template)
    # or compact (CompactArxivEnv: one argument each, one-line descriptions)
    tool_schemas: Literal["full", "compact"] = "full"
    user_template: str = "{query}"  # the user message of a rollout (cpu-warm: "Search query: {query}")
    tolerant_tool_calls: bool = True  # also read tool calls written as bare / fenced JSON (small models do)
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: bfloat16 where the CPU has bf16 units (AMX / AVX512-BF16)
    # LoRA
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_targets: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    # data
    queries: str | None = None  # query file (default: the data folder's queries_train.jsonl)
    split: Literal["train", "dev", "all"] = "train"
    limit: int | None = None
    curriculum: Literal["uniform", "easy-to-hard"] = "uniform"
    query_filter: Literal["all", "reachable"] = "all"  # reachable: only queries a search of their text can answer
    index: str | None = None  # index name or folder (default: the scale's index)
    embedder: str | None = None  # the semantic side of the index (default: the setting `embedder`)
    tool_max_results: int = 3
    tool_abstract_chars: int = 0  # cpu-demo: titles only (IDs, dates, titles), so two search rounds fit in 512 tokens
    tool_snippet_chars: int = 120
    tool_max_snippets: int = 0
    # reward settings
    rewards: RewardConfig = Field(default_factory=RewardConfig)
    judge_endpoint: str | None = None  # rar: an endpoint of configs/endpoints.toml (default: local), a probability judge (blend:<model>) or a mean of them
    judge_rubric: Literal["global", "query"] = "global"
    # run
    seed: int = 0
    save_steps: int = 10
    gpu: bool = False
    use_vllm: bool = False
    vllm_mode: Literal["colocate", "server"] = "colocate"  # server: rollouts from `trl vllm-serve` on GPUs of their own
    vllm_server_url: str = "http://127.0.0.1:8000"  # vllm_mode="server": where that server listens
    unsloth: bool = True  # GPU path through Unsloth; False: plain TRL + PEFT on the GPU (what DeepSpeed ZeRO-3 needs)
    gradient_checkpointing: bool = False
    # the loss and backward of a step in this many slices of the step's completions: the same gradient (TRL's
    # DAPO loss is normalised by the completion tokens of the whole generation batch), 1/N of the update's
    # activations and logits in memory (cpu-warm: 2; at 1 its training process reached 21.5 GB and was
    # OOM-killed on the 24 GB machine)
    gradient_accumulation_steps: int = Field(1, ge=1)
    max_seq_length: int = 4096  # GPU path (unsloth)
    gpu_memory_utilization: float = 0.6
    threads: int | None = None
    tensorboard: bool = True  # TRL's logs also go to <out>/tensorboard (`tensorboard --logdir <out>`), when installed


PRESETS: dict[str, dict[str, Any]] = {
    "cpu-demo": {},
    # the policy chosen by measurement (README "Warm start"): the packaged Qwen2.5-Coder-0.5B, no SFT (it
    # finished 10 of 10 dev episodes in the agent loop; the SmolLM2-135M warm starts 0-2 of 20, and a
    # 20-demonstration LoRA SFT of the 0.5B stopped it calling tools); 3 tool rounds + a finishing turn in
    # 768 tokens (the titles-only view), temperature 0.7 (at 1.0 its calls degrade into prose or broken
    # JSON), 4 rollouts a group so that rewards can differ within it, the demo index with the MiniLM
    # semantic side (`python -m arxivqa.index build --embedder minilm-128`), LoRA r 8 on attention and MLP,
    # checkpoints every 5 steps (a long run resumes where it stopped); the query framed as a search request
    # (asked the bare question, the 0.5B answers it from memory in prose instead of calling a tool);
    # the duplication gate allows one repeat of a call (the seed's number is not given; ours elsewhere is
    # 0): the 0.5B repeats its first search in almost every rollout, the environment refuses the repeat,
    # and with 0 allowed every reward of a group was 0 (README "Warm start"). Repeats still cost through
    # the redundancy penalty, and a second repeat fails the gate. The penalty scales the recall instead
    # of being subtracted from it (subtracted, one repeat cancelled a found gold paper: 1 of the first
    # run's 10 groups had reward variance, 4 of 10 when its rollouts are re-scored scaled), and searches
    # show 5 hits (keyword recall of the verbatim train queries 0.217 at 3, 0.241 at 5; semantic 0.159, 0.209).
    # Only queries a search of their own text can answer (74 of 121 at 5 hits): of the first 16 groups of
    # two runs, re-scored with the scaled penalty, 5 of 8 such groups had reward variance, 1 of 8 others.
    "cpu-warm": dict(model="qwen2.5-coder-0.5b-instruct", embedder="minilm-128", num_generations=4,
                     max_completion_length=768, max_tool_calling_iterations=3, temperature=0.7,
                     user_template="Search query: {query}", tool_max_results=5, query_filter="reachable",
                     rewards=RewardConfig(max_duplicate_calls=1, redundancy_mode="scale"),
                     learning_rate=5e-5, lora_r=8, lora_alpha=16, save_steps=5, gradient_accumulation_steps=2,
                     lora_targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
    "paper": dict(model="Qwen/Qwen3-8B", learning_rate=1e-6, prompts_per_step=8, num_generations=8, num_iterations=4,
                  beta=0.02, epsilon=0.2, epsilon_high=0.28, max_steps=250 * 24, max_completion_length=8192,
                  max_tool_calling_iterations=10, lora_r=64, lora_alpha=128, tool_max_results=10,
                  tool_abstract_chars=600, tool_snippet_chars=400, tool_max_snippets=2, system_prompt="full", gpu=True, use_vllm=True, gradient_checkpointing=True, max_seq_length=16384,
                  save_steps=50),
}
# cpu-warm with the terse tool schemas (tools.CompactArxivEnv): 611 prompt tokens instead of 853 in Qwen2.5's
# template; a new view, so a warm start for it is made with it (`make warm-start-rsf WARM_PRESET=cpu-warm-compact`)
PRESETS["cpu-warm-compact"] = {**PRESETS["cpu-warm"], "tool_schemas": "compact"}
# paper: 250 epochs over the seed's ~200 training queries at 8 prompts per step = 6,250 steps; here
# 250 × ceil(134 train queries / 8 = 17) ≈ 4,250 — max_steps is set generously and is a setting.


def preset(name: str, **overrides: Any) -> TrainConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return TrainConfig(preset=name, **{**PRESETS[name], **overrides})


def configured(reward: str, s: Settings | None = None, **overrides: Any) -> TrainConfig:
    """The notebooks' training config from the settings: preset ``preset`` (``cpu-demo``; ``paper`` on a
    GPU), steps ``train_steps`` (RLVR) or ``rar_steps`` (RaR) — their defaults apply to cpu-demo, the
    paper preset keeps its own unless they were set — plus ``overrides``. Scale is configuration: the
    same notebook runs either preset."""
    s = s or settings()
    field = "train_steps" if reward == "rlvr" else "rar_steps"
    if "max_steps" not in overrides and (s.preset == "cpu-demo" or field in s.model_fields_set):
        overrides["max_steps"] = getattr(s, field)
    return preset(s.preset, reward=reward, **overrides)


# --------------------------------------------------------------------------- data


def order_queries(queries: Sequence[Query], curriculum: str, seed: int = 0) -> list[Query]:
    """``uniform``: as given (the trainer shuffles); ``easy-to-hard``: easy, then medium (and unrated),
    then hard, shuffled within each stage by ``seed`` (the trainer must then not shuffle)."""
    import random

    if curriculum == "uniform":
        return list(queries)
    if curriculum != "easy-to-hard":
        raise ValueError(f"unknown curriculum {curriculum!r}")
    rng = random.Random(seed)
    stages: dict[int, list[Query]] = {}
    for q in queries:
        stages.setdefault(DIFFICULTY_ORDER.get(q.difficulty, 1), []).append(q)
    out = []
    for k in sorted(stages):
        stage = list(stages[k])
        rng.shuffle(stage)
        out += stage
    return out


def load_training_queries(cfg: TrainConfig) -> list[Query]:
    """The scorable queries of ``cfg.split`` (a query without gold in the corpus gives no recall signal), in
    curriculum order, the first ``cfg.limit`` of them."""
    from .corpus import select_queries

    queries = order_queries(select_queries(cfg.queries, cfg.split).queries, cfg.curriculum, cfg.seed)
    return queries[: cfg.limit] if cfg.limit else queries


def reachable_queries(queries: Sequence[Query], index, k: int) -> list[Query]:
    """The queries whose text, searched as written, shows a gold paper in the top ``k`` of the keyword or
    the semantic search: those where a group of rollouts can earn recall at all. The rest give every
    rollout of a group the same recall of 0 unless the policy already rephrases well, and GRPO learns
    nothing from a group without reward variance (the filter of zero-signal prompts of DAPO's dynamic
    sampling, decided once before training instead of per batch). Gold selects; the policy never sees it."""
    kept = []
    for q in queries:
        gold = set(q.gold_in_corpus)
        shown = {h.arxiv_id for h in index.keyword_search(q.query, k=k)[0]}
        shown |= {h.arxiv_id for h in index.semantic_search(q.query, k=k)}
        if gold & shown:
            kept.append(q)
    return kept


def tool_view(cfg: TrainConfig) -> dict[str, Any]:
    """The ``tools.make_env`` keyword arguments of a run's tool view: its schemas and how much a search
    shows (rollouts, demonstrations and the evaluation of a trained policy all use it)."""
    return dict(schemas=getattr(cfg, "tool_schemas", "full"), result_cap=cfg.tool_max_results,
                abstract_chars=cfg.tool_abstract_chars, snippet_chars=cfg.tool_snippet_chars,
                max_snippets=cfg.tool_max_snippets)


def rollout_budgets(cfg: TrainConfig):
    """The agent's ``Budgets`` that match a run's rollouts: its tool rounds (+ the final turn) and its
    completion length (here: generated tokens only; TRL also counts tool tokens in it)."""
    from .records import Budgets

    return Budgets(max_turns=cfg.max_tool_calling_iterations + 1, max_tool_calls=30,
                   max_tokens=cfg.max_completion_length, max_new_tokens=min(256, cfg.max_completion_length))


def prompt_for(cfg: TrainConfig) -> str:
    """The system prompt of a run's rollouts (and of the evaluation of its policy). The compact prompt also
    states the turn budget: TRL runs the calls of ``max_tool_calling_iterations`` turns, and of the turn
    after those only a ``finish`` (``rollout_trajectory``)."""
    if cfg.system_prompt == "full":
        return SYSTEM_PROMPT
    n = getattr(cfg, "max_tool_calling_iterations", None)  # a demonstration config has none: no budget sentence
    if n is None:
        return COMPACT_SYSTEM_PROMPT
    return COMPACT_SYSTEM_PROMPT + (f"\nYou have {n} turns of tool calls, then one more turn in which only finish "
                                    f"runs: call finish by turn {n + 1} at the latest.")


def rollout_view(cfg: TrainConfig) -> dict:
    """What an episode of a run's policy sees outside the model: the system prompt, the user message, the
    tool view and the budgets (rollouts, the evaluation of the trained policy and benchmarks share it)."""
    return {"system_prompt": prompt_for(cfg), "user_template": cfg.user_template, "env_kwargs": tool_view(cfg),
            "budgets": rollout_budgets(cfg)}


def build_dataset(queries: Sequence[Query], system_prompt: str = SYSTEM_PROMPT, user_template: str = "{query}"):
    """Rows for GRPOTrainer: a chat ``prompt`` plus the columns ``ArxivEnv.reset`` and the rewards read."""
    from datasets import Dataset

    return Dataset.from_list([{"prompt": [{"role": "system", "content": system_prompt},
                                          {"role": "user", "content": user_template.format(query=q.query)}],
                               "qid": q.qid, "query": q.query, "gold_in_corpus": list(q.gold_in_corpus),
                               "difficulty": q.difficulty or ""} for q in queries])


# --------------------------------------------------------------------------- rollouts -> trajectories


def rollout_trajectory(row: dict[str, Any], completion: Sequence[dict], env, completion_tokens: int = 0,
                       policy: str = "grpo") -> Trajectory:
    """Rebuild a ``Trajectory`` from TRL's completion messages (assistant turns and tool messages) and the
    environment's call records (the same ``ToolCallRecord`` objects the agent loop keeps). TRL runs a
    turn's calls in order, so the records line up with the tool messages; a call TRL could not run
    (unknown tool, bad arguments) has no record and becomes an error record with TRL's message."""
    records = list(env.episode.calls)
    traj = Trajectory.start(row, policy, completion_tokens=completion_tokens)
    ri = 0
    for msg in completion:
        role = msg.get("role")
        if role == "assistant":
            if env.episode.finished and not msg.get("tool_calls") and not (msg.get("content") or "").strip():
                continue  # the end of turn after the episode ended (end_finished_episodes): not a turn
            calls = []
            for tc in msg.get("tool_calls") or []:
                fn = tc.get("function", tc) if isinstance(tc, dict) else {}
                calls.append(ToolCall(name=str(fn.get("name", "")), arguments=fn.get("arguments", {})))
            text = msg.get("content") or ""
            text = text if isinstance(text, str) else json.dumps(text, default=str)
            traj.add_step(AssistantTurn(text=text, raw=text, tool_calls=calls))
        elif role == "tool" and traj.steps:
            content = msg.get("content")
            content = content if isinstance(content, str) else json.dumps(content, default=str)
            step = traj.steps[-1]
            pending = step.assistant.tool_calls[len(step.results):]
            call_id = pending[0].id if pending else f"call_{len(step.results)}"
            # a call TRL refused itself (arguments not an object) left no record: pair by name *and* text
            if ri < len(records) and records[ri].name == msg.get("name") and records[ri].result == clean_text(content, 20000):
                rec = records[ri].model_copy(update={"call_id": call_id, "turn": step.turn, "result": content})
                ri += 1
            else:
                rec = ToolCallRecord(call_id=call_id, turn=step.turn, name=str(msg.get("name", "")),
                                     arguments=pending[0].arguments if pending else {}, result=content, error=True)
            step.results.append(rec)
    run_trailing_finish(traj, env)
    traj.submitted = env.episode.submitted
    traj.tool_seconds = sum(r.seconds for r in traj.tool_results)
    if env.episode.finished:
        traj.stop_reason = "finished"
    elif traj.steps and traj.steps[-1].assistant.tool_calls:
        traj.stop_reason = "budget"  # TRL stopped the loop (iterations or completion length)
    else:
        traj.stop_reason = "no_tool_call"
    return traj


def run_trailing_finish(traj: Trajectory, env) -> None:
    """Run a ``finish`` that the rollout's last turn wrote but TRL's loop did not run.

    TRL stops after ``max_tool_calling_iterations`` rounds of tools (or when the next tool result would not
    fit ``max_completion_length``) and leaves the calls of the last generated turn unrun. A ``finish`` is
    terminal (nothing it returns is read by the policy), so running it after the loop changes no token the
    policy saw; it gives the rollout the same last turn as ``Agent.episode``, whose ``max_turns`` =
    rounds + 1 runs the last turn's calls. Only ``finish`` runs here; the turn's other calls stay unrun
    (no result, so they count for no reward term)."""
    if env.episode.finished or not traj.steps:
        return
    step = traj.steps[-1]
    if len(step.results) >= len(step.assistant.tool_calls):
        return  # every call of the last turn ran
    for call in step.assistant.tool_calls[len(step.results):]:
        if call.name != "finish":
            continue
        before = len(env.episode.calls)
        env._call("finish", call.arguments)
        for rec in env.episode.calls[before:]:
            step.results.append(rec.model_copy(update={"call_id": call.id, "turn": step.turn}))
        return


class RolloutLog:
    """Every scored rollout of a run, with its step and reward components, in ``rollouts.jsonl``.

    In a run of several processes (``accelerate launch``) each process scores its own share of the batch;
    ``flush`` gathers every process's rollouts, each tagged with its ``rank``, in rank order (the order of
    TRL's gathered rewards), and rank 0 alone writes the file."""

    def __init__(self, path: Path, keep_until_step: int | None = None) -> None:
        self.path = path
        self.rank, self.world = process_rank()
        self.rows: list[dict] = []
        self._batch: list[dict] = []
        if path.exists() and keep_until_step is not None:  # resuming: drop what the checkpoint did not keep
            self.rows = [r for r in load_rollouts(path) if r["step"] <= keep_until_step]

    def add(self, step: int, traj: Trajectory, components: dict[str, float]) -> None:
        self._batch.append({"step": step, "reward": components, "trajectory": traj.model_dump(mode="json")})

    def flush(self) -> None:
        batch, self._batch = self._batch, []
        if self.world > 1:  # a collective: every process flushes once per reward call
            from accelerate.utils import gather_object

            batch = gather_object([{**r, "rank": self.rank} for r in batch])
        self.rows.extend(batch)
        if self.rank == 0:
            atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in self.rows))


def load_rollouts(path: str | Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def rollout_trajectories(rows: Sequence[dict]) -> list[tuple[int, Trajectory]]:
    return [(r["step"], Trajectory.model_validate(r["trajectory"])) for r in rows]


# --------------------------------------------------------------------------- reward functions for TRL


class StepClock:
    """Per-step wall time split into generation (TRL's rollout loop, tools included), tools, rewards, update."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}
        self.rows: list[dict] = []

    def add(self, key: str, seconds: float) -> None:
        self.current[key] = self.current.get(key, 0.0) + seconds


def make_reward_func(cfg: TrainConfig, log: RolloutLog, clock: StepClock, scorer: Callable | None = None) -> Callable:
    """The reward function TRL calls with the batch: rebuilds each rollout, scores it (``rlvr`` or the
    given ``scorer`` returning (total, components)), logs component means, and records the rollouts."""

    def score(traj: Trajectory) -> tuple[float, dict[str, float]]:
        if scorer is not None:
            return scorer(traj)
        b = rlvr_reward(traj, cfg.rewards)
        return b.total, b.components()

    def reward(prompts, completions, environments=None, completion_ids=None, trainer_state=None, log_metric=None,
               **columns) -> list[float]:
        t0 = time.perf_counter()
        step = (trainer_state.global_step + 1) if trainer_state is not None else 0
        totals, comps = [], []
        trajs = []
        for i, completion in enumerate(completions):
            row = {k: columns[k][i] for k in ("qid", "query", "gold_in_corpus", "difficulty") if k in columns}
            n_tokens = len(completion_ids[i]) if completion_ids is not None else 0
            trajs.append(rollout_trajectory(row, completion, environments[i], n_tokens, policy=cfg.model))
        if scorer is not None and hasattr(scorer, "batch"):
            scored = scorer.batch(trajs)
        else:
            scored = [score(t) for t in trajs]
        for traj, (total, components) in zip(trajs, scored):
            totals.append(float(total))
            comps.append(components)
            log.add(step, traj, components)
        log.flush()
        if log_metric is not None and comps:
            for key in comps[0]:
                vals = [c[key] for c in comps if key in c]
                log_metric(f"{cfg.reward}/{key}", sum(vals) / len(vals))
            log_metric("rollout/tool_calls", sum(len(t.tool_results) for t in trajs) / len(trajs))
        clock.add("tools", sum(t.tool_seconds for t in trajs))
        clock.add("reward", time.perf_counter() - t0)
        return totals

    reward.__name__ = cfg.reward
    return reward


@contextlib.contextmanager
def tolerant_tool_parsing(enabled: bool = True):
    """TRL reads tool calls with the chat template's response schema (Qwen: ``<tool_call>`` tags). Small
    models often write the call as bare JSON or in a code fence instead; during a run, this wraps TRL's
    ``parse_response`` so that such calls are read too (``agent.parse_tool_calls``, the agent's own
    tolerant parser), exactly as the evaluation agent reads them."""
    import trl.trainer.grpo_trainer as grpo

    from .agent import parse_tool_calls

    original = grpo.parse_response

    def parse(tokenizer, ids, *args, **kwargs):
        msg = original(tokenizer, ids, *args, **kwargs)
        if not enabled or msg.get("tool_calls") or not isinstance(msg.get("content"), str):
            return msg
        text, calls, _problems = parse_tool_calls(msg["content"])
        calls = [c for c in calls if isinstance(c.arguments, dict)]
        if not calls:
            return msg
        return {**msg, "content": text, "tool_calls": [
            {"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]}

    grpo.parse_response = parse
    try:
        yield
    finally:
        grpo.parse_response = original


# --------------------------------------------------------------------------- model loading


def gpu_available() -> bool:
    import torch

    return torch.cuda.is_available()


def load_unsloth(cfg: TrainConfig):
    """``(model, tokenizer)`` from unsloth with LoRA attached (GPU only; import unsloth first)."""
    if not gpu_available():
        raise RuntimeError("the GPU path needs a CUDA GPU (and `pip install -r requirements-gpu.txt`); "
                           "on a CPU use the cpu-demo preset (gpu=false)")
    late = [m for m in ("transformers", "trl", "peft") if m in sys.modules]
    if late:
        print(f"warning: {late} imported before unsloth; unsloth patches them best when imported first",
              file=sys.stderr)
    from unsloth import FastLanguageModel  # noqa: PLC0415 - lazy on purpose: GPU-only dependency

    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=cfg.model, max_seq_length=cfg.max_seq_length, load_in_4bit=False,
        fast_inference=cfg.use_vllm and cfg.vllm_mode == "colocate",  # server mode: TRL's client to `trl vllm-serve`
        max_lora_rank=cfg.lora_r, gpu_memory_utilization=cfg.gpu_memory_utilization)
    model = FastLanguageModel.get_peft_model(
        model, r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
        target_modules=cfg.lora_targets + ["gate_proj", "up_proj", "down_proj"],
        use_gradient_checkpointing="unsloth" if cfg.gradient_checkpointing else False, random_state=cfg.seed)
    return model, tokenizer


def lora_config(cfg: TrainConfig):
    from peft import LoraConfig

    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=cfg.lora_targets, task_type="CAUSAL_LM")


def per_process_batch(cfg: TrainConfig) -> int:
    """Completions per process and step: the global batch split evenly over the processes."""
    total, world = cfg.prompts_per_step * cfg.num_generations, process_rank()[1]
    if total % world:
        raise ValueError(f"prompts_per_step × num_generations = {total} completions a step do not split over "
                         f"{world} processes; make it a multiple of {world}")
    return total // world


def micro_batch(cfg: TrainConfig) -> int:
    """Completions in one forward/backward: a process's share of the step in ``gradient_accumulation_steps``
    slices."""
    share, n = per_process_batch(cfg), cfg.gradient_accumulation_steps
    if share % n:
        raise ValueError(f"{share} completions a process and step do not split into gradient_accumulation_steps="
                         f"{n} slices; make it a divisor of {share}")
    return share // n


def grpo_args(cfg: TrainConfig, out: Path) -> dict[str, Any]:
    """The GRPOConfig keyword arguments of a run (kept as a dict so it is inspectable without TRL).
    ``prompts_per_step × num_generations`` completions is the global batch of a step: under ``accelerate
    launch`` with N processes each process generates and trains on its N-th of it."""
    args = dict(
        output_dir=str(out), learning_rate=cfg.learning_rate,
        per_device_train_batch_size=micro_batch(cfg),  # counts completions
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,  # TRL generates once a step all the same
        num_generations=cfg.num_generations, num_iterations=cfg.num_iterations,
        beta=cfg.beta, epsilon=cfg.epsilon, epsilon_high=cfg.epsilon_high, temperature=cfg.temperature,
        min_p=cfg.min_p, max_completion_length=cfg.max_completion_length, max_tool_calling_iterations=cfg.max_tool_calling_iterations,
        max_steps=cfg.max_steps, logging_steps=1, save_strategy="steps", save_steps=cfg.save_steps,
        seed=cfg.seed, data_seed=cfg.seed, report_to="none", shuffle_dataset=cfg.curriculum == "uniform",
        log_completions=False, disable_tqdm=False,
    )
    # TRL turns gradient checkpointing on by default; on a CPU with room to spare it only costs time
    args["gradient_checkpointing"] = cfg.gradient_checkpointing
    if cfg.gpu:
        args |= dict(bf16=True, use_vllm=cfg.use_vllm)  # colocated: unsloth's fast_inference (or TRL's) runs vLLM
        if cfg.use_vllm and cfg.vllm_mode == "server":
            args |= dict(vllm_mode="server", vllm_server_base_url=cfg.vllm_server_url)
        if not cfg.unsloth:
            args["model_init_kwargs"] = {"dtype": "bfloat16"}
    else:
        from .models import resolve_dtype

        dtype = resolve_dtype(cfg.dtype)
        args |= dict(use_cpu=True, bf16=dtype == "bfloat16", model_init_kwargs={"dtype": dtype})
    return args




# --------------------------------------------------------------------------- the run


def _callbacks(out: Path, clock: StepClock, tensorboard: bool = False):
    from transformers import TrainerCallback

    class Recorder(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, model=None, **kw):
            total = time.perf_counter() - self.t0
            c = clock.current
            gen, reward, tools = c.get("generation", 0.0), c.get("reward", 0.0), c.get("tools", 0.0)
            prepare = c.get("prepare", gen + reward)  # generation + rewards + reference/old log-probs
            forward = c.get("loss_forward", 0.0)
            row = {"step": state.global_step, "total": total, "generation": gen,
                   "generation_model": max(0.0, gen - tools), "tools": tools, "reward": reward,
                   "ref_logprobs": max(0.0, prepare - gen - reward), "loss_forward": forward,
                   "backward_optimizer": max(0.0, total - prepare - forward),
                   "update": max(0.0, total - gen - reward)}
            if model is not None:  # has the adapter left its zero initialisation? (lora_B starts at 0)
                row["lora_norm"] = lora_norm(model)
            clock.rows.append(row)
            clock.current = {}
            if main:  # several processes: rank 0's timing
                atomic_write_text(out / "timing.jsonl", "".join(json.dumps(r) + "\n" for r in clock.rows))

        def on_log(self, args, state, control, logs=None, **kw):
            if main:  # TRL logs metrics gathered over the processes: the same on every rank
                atomic_write_text(out / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in state.log_history))

    main = process_rank()[0] == 0
    callbacks = [Recorder()]
    if tensorboard and main:
        try:
            from torch.utils.tensorboard import SummaryWriter
            from transformers.integrations import TensorBoardCallback
        except ImportError:  # tensorboard not installed: the JSONL logs are the record
            pass
        else:  # what report_to="tensorboard" adds, with the writer in the run folder
            callbacks.append(TensorBoardCallback(tb_writer=SummaryWriter(str(out / "tensorboard"))))
    return callbacks


def lora_norm(model) -> float:
    """The L2 norm of every LoRA ``B`` matrix: exactly 0 until the policy has moved."""
    total = 0.0
    for name, p in model.named_parameters():
        if "lora_B" in name:
            total += float(p.detach().float().pow(2).sum())
    return total ** 0.5


def _timed(fn: Callable, clock: StepClock, key: str) -> Callable:
    @functools.wraps(fn)
    def wrapper(*a, **kw):
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            clock.add(key, time.perf_counter() - t0)

    return wrapper


def bound_turns(trainer, max_completion_length: int) -> None:
    """Ask each generation call of TRL's tool loop for no more new tokens than a rollout of the call can
    still keep. TRL asks for ``max_completion_length`` new tokens at every turn and afterwards cuts what
    goes past the rollout's budget (prompt excluded, tool results included), so a rollout that runs on
    in its last turn was decoded for up to a whole budget of tokens that were then thrown away (the
    batch waits for it). Here a call after a tool round asks for the largest budget left among its
    rollouts: the tokens kept are the same, only the discarded ones are no longer generated. The
    transformers path only (vLLM and continuous batching are left alone)."""
    if getattr(trainer, "use_vllm", False) or getattr(trainer, "use_transformers_continuous_batching", False):
        return
    prompts: list[list[int]] = []
    generate, single_turn = trainer._generate, trainer._generate_single_turn

    @functools.wraps(generate)
    def new_step(*a, **kw):
        prompts.clear()  # the step's prompts are recorded by its first generation call
        return generate(*a, **kw)

    @functools.wraps(single_turn)
    def bounded(prompt_ids, *a, **kw):
        seqs = [list(p) for p in prompt_ids]
        if not prompts:
            prompts.extend(seqs)
            return single_turn(prompt_ids, *a, **kw)
        used = []
        for seq in seqs:
            own = [len(p) for p in prompts if len(p) <= len(seq) and seq[:len(p)] == p]
            if not own:  # not a continuation of this step's prompts: ask for the full budget
                return single_turn(prompt_ids, *a, **kw)
            used.append(len(seq) - max(own))
        left = max(1, max_completion_length - min(used))
        cfg, kwargs = trainer.generation_config, getattr(trainer, "generation_kwargs", None)
        before = cfg.max_new_tokens
        cfg.max_new_tokens = min(before or left, left)
        if isinstance(kwargs, dict):
            kwargs["max_new_tokens"] = cfg.max_new_tokens
        try:
            return single_turn(prompt_ids, *a, **kw)
        finally:
            cfg.max_new_tokens = before
            if isinstance(kwargs, dict):
                kwargs["max_new_tokens"] = before

    trainer._generate, trainer._generate_single_turn = new_step, bounded


def end_finished_episodes(trainer) -> None:
    """End a rollout at its ``finish``. TRL's tool loop knows no end of an episode: after a ``finish``'s
    result it asks the model for another turn, and again for as long as the model keeps calling tools (in
    the committed base run, 358 of 400 rollouts went on after their finish: 663 of their 1,524 turns), so
    those turns were generated, counted in the completion length and trained on with the rollout's
    advantage, though the episode had ended (the environment refuses every call after it). Here a rollout
    whose last tool result says the episode is over (``tools.ends_episode``) gets the end-of-turn token
    instead of a generated turn — a token the policy is trained on, as the stop the agent loop makes — and,
    with no tool call in it, TRL's loop leaves it. The transformers path only, like ``bound_turns``."""
    if getattr(trainer, "use_vllm", False) or getattr(trainer, "use_transformers_continuous_batching", False):
        return
    from .tools import ends_episode

    tok = trainer._tokenizer
    mark = "EPISODE-END-PROBE"
    rendered = tok.decode(trainer._get_tool_suffix_ids([{"role": "tool", "name": "finish", "content": mark}]))
    after = rendered.split(mark, 1)[1]  # what the template puts after a tool result, up to the next turn
    end_turn = tok.eos_token_id
    single_turn = trainer._generate_single_turn

    def over(ids) -> bool:
        tail = tok.decode(list(ids)[-96:])
        return tail.endswith(after) and ends_episode(tail[:len(tail) - len(after)])

    @functools.wraps(single_turn)
    def ended(prompt_ids, images=None, multimodal_fields=None, *a, **kw):
        done = [over(p) for p in prompt_ids]
        if not any(done) or images is not None or multimodal_fields:
            return single_turn(prompt_ids, images, multimodal_fields, *a, **kw)
        live = [p for p, d in zip(prompt_ids, done) if not d]
        # the transformers path returns no logprobs (None), so only the token IDs are merged back
        ids, logprobs = single_turn(live, images, multimodal_fields, *a, **kw) if live else ([], None)
        ids = iter(ids)
        return [[end_turn] if d else next(ids) for d in done], logprobs

    trainer._generate_single_turn = ended


# --------------------------------------------------------------------------- the run registry

# Fields that do not change what a run is (how it was executed, not what it learned).
_NOT_IDENTITY = frozenset({"threads", "save_steps", "preset", "tensorboard",
                           "vllm_mode", "vllm_server_url", "unsloth", "gradient_accumulation_steps"})


class RunInfo(BaseModel):
    """A run folder and what it is: its config, whether it finished, how many steps it logged, and where it
    was continued on another machine from the adapter kept in the repository (``revive_run``)."""

    path: Path
    config: TrainConfig
    finished: bool
    steps_done: int
    revivals: list[dict] = []
    warm_start: dict | None = None  # the warm-start build it was trained from (models.warm_start_identity)

    @property
    def name(self) -> str:
        return self.path.name

    def label(self) -> str:
        """model · scale · steps · seed — what a figure title states."""
        c = self.config
        judge = f" · judge {c.judge_endpoint or 'local'} ({c.judge_rubric})" if c.reward == "rar" else ""
        steps = f"{self.steps_done} step" + ("" if self.steps_done == 1 else "s")
        if not self.finished:
            steps += f" of {self.config.max_steps} (unfinished)"
        return f"{c.model} · {c.preset} · {steps}{judge} · seed {c.seed}"

    def option(self) -> str:
        """A unique, readable name for a run picker: the label, what else tells runs apart, and where it is."""
        c = self.config
        what = c.curriculum if c.reward == "rlvr" else c.judge_rubric
        return f"{self.label()} · {what} · {self.path.parent.name}/{self.name}"


def run_options(runs: Sequence[RunInfo]) -> dict[str, RunInfo]:
    """Runs keyed by ``RunInfo.option()`` (what a dropdown shows), in the registry's order."""
    return {r.option(): r for r in runs}


def same_run(a: RunInfo | str | Path | None, b: RunInfo | str | Path | None) -> bool:
    """Whether two runs (or run folders) are the same folder."""
    if a is None or b is None:
        return False
    pa, pb = (x.path if isinstance(x, RunInfo) else Path(x) for x in (a, b))
    return pa.resolve() == pb.resolve()


def run_identity(cfg: TrainConfig | dict) -> dict:
    c = cfg if isinstance(cfg, TrainConfig) else TrainConfig.model_validate(cfg)
    return c.model_dump(mode="json", exclude=set(_NOT_IDENTITY))


def read_run(path: str | Path) -> RunInfo:
    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path} is not a training run folder (no config.json)")
    cfg = TrainConfig.model_validate_json((path / "config.json").read_text())
    steps = 0
    if (path / "metrics.jsonl").exists():
        steps = max((int(r.get("step", 0)) for r in load_rollouts(path / "metrics.jsonl")), default=0)
    revived = json.loads((path / "revived.json").read_text())["revivals"] if (path / "revived.json").exists() else []
    warm = json.loads((path / "warm_start.json").read_text()) if (path / "warm_start.json").exists() else None
    return RunInfo(path=path, config=cfg, finished=(path / "final" / "adapter_config.json").exists(), steps_done=steps,
                   revivals=revived, warm_start=warm)


def list_runs(roots: Sequence[str | Path] | None = None) -> list[RunInfo]:
    """Every run folder under ``roots`` (default ``run_roots()``), newest first within each root."""
    out = []
    for root in map(Path, roots or run_roots()):
        if not root.is_dir():
            continue
        folders = sorted((p for p in root.iterdir() if (p / "config.json").exists()),
                         key=lambda p: -(p / "config.json").stat().st_mtime)
        for folder in folders:
            try:
                out.append(read_run(folder))
            except (ValueError, OSError):
                continue  # a folder from an older config format: not a run this code can read
    return out


def find_runs(roots: Sequence[str | Path] | None = None, finished: bool | None = None, **what: Any) -> list[RunInfo]:
    """Runs whose config has the given field values, e.g. ``find_runs(reward="rar", judge_endpoint=None)``."""
    unknown = set(what) - set(TrainConfig.model_fields)
    if unknown:
        raise ValueError(f"not TrainConfig fields: {sorted(unknown)}")
    return [r for r in list_runs(roots) if (finished is None or r.finished == finished)
            and all(getattr(r.config, k) == v for k, v in what.items())]


def committed_runs(**what: Any) -> list[RunInfo]:
    """Runs kept with the repository (``<results>/runs``) whose config has the given field values, finished
    ones first, longest first, and of runs as long, one trained from a warm start (``warm_start.json``) first
    (the runs a notebook shows by default; an unfinished one says so in its label)."""
    runs = find_runs([settings().results_dir / "runs"], **what)
    return sorted(runs, key=lambda r: (-r.finished, -r.steps_done, r.warm_start is None))


def twin_run(runs: Sequence[RunInfo], of: RunInfo) -> RunInfo | None:
    """The first run of ``runs`` configured like ``of`` but for its curriculum (every identity field, and the
    same warm-start build), else None: what a comparison of two schedules sets side by side."""
    from .models import same_warm_start

    def rest(r: RunInfo) -> dict:
        return {k: v for k, v in run_identity(r.config).items() if k != "curriculum"}

    return next((r for r in runs if r.path != of.path and same_warm_start(r.warm_start, of.warm_start)
                 and rest(r) == rest(of)), None)


def reward_twin(runs: Sequence[RunInfo], of: RunInfo) -> RunInfo | None:
    """The run of ``runs`` that ``of`` (a RaR run) is compared with: the first trained like it but for its reward
    and judge (every other identity field, and the same warm-start build); else the first started from the same
    policy (model and warm-start build); else the first of ``runs``; None when there is none."""
    from .models import same_warm_start

    def rest(r: RunInfo) -> dict:
        return {k: v for k, v in run_identity(r.config).items() if k not in ("reward", "judge_endpoint", "judge_rubric")}

    same_start = [r for r in runs if r.path != of.path and r.config.model == of.config.model
                  and same_warm_start(r.warm_start, of.warm_start)]
    return next((r for r in same_start if rest(r) == rest(of)), None) or next(iter(same_start), None) or next(iter(runs), None)


def find_run(cfg: TrainConfig, roots: Sequence[str | Path] | None = None, finished: bool | None = True) -> RunInfo | None:
    """The run that is exactly ``cfg`` (same identity: every field but how it was executed), or None."""
    ident = run_identity(cfg)
    for r in list_runs(roots):
        if (finished is None or r.finished == finished) and run_identity(r.config) == ident:
            return r
    return None


def run_folder(cfg: TrainConfig) -> Path:
    """Where a new run of ``cfg`` is trained: a readable name under ``runs_dir`` (the registry finds
    runs by their config, not by this name)."""
    if cfg.reward == "rar":
        judge = re.sub(r"[^A-Za-z0-9._-]+", "-", cfg.judge_endpoint or "local").strip("-")  # blend:<model> -> blend-<model>
        name = f"rar-{cfg.preset}-{judge}-{cfg.judge_rubric}-{cfg.max_steps}steps-seed{cfg.seed}"
    else:
        name = f"rlvr-{cfg.preset}-{cfg.curriculum}-{cfg.max_steps}steps-seed{cfg.seed}"
    return settings().runs_dir / name


def train_or_load(cfg: TrainConfig, index=None) -> dict:
    """The run of ``cfg``: a finished one is found by the registry and read back; otherwise it is trained
    into ``run_folder(cfg)`` (a partial run there is resumed). A RaR run gets its judge here and stops its
    server afterwards. Returns what this call did, with the run's folder as ``path``."""
    import time as _time

    done = find_run(cfg)
    if done is not None:
        return {"run": done.name, "path": done.path, "trained_now": False, "seconds": 0.0}
    out, n = run_folder(cfg), 1
    while (out / "config.json").exists() and run_identity(read_run(out).config) != run_identity(cfg):
        n += 1  # the name is taken by a different run: keep both
        out = run_folder(cfg).with_name(f"{run_folder(cfg).name}-{n}")
    info = {"run": out.name, "path": out, "trained_now": False, "seconds": 0.0}
    t0 = _time.perf_counter()
    scorer = None
    if cfg.reward == "rar":
        from .judge import rar_scorer

        scorer = rar_scorer(cfg)
    try:
        train(cfg, out, resume=(out / "config.json").exists(), index=index, scorer=scorer)
    finally:
        if scorer is not None:
            llm = getattr(scorer.judge, "llm", None)  # a probability judge runs in this process: no endpoint
            info["judge"] = {"judged": scorer.judge.judged, "fallbacks": scorer.judge.fallbacks,
                             **({"llm": llm.stats.as_dict()} if llm is not None else {})}
            if llm is not None:
                llm.close()
    info |= {"trained_now": True, "seconds": _time.perf_counter() - t0}
    return info


def last_checkpoint(out: Path) -> Path | None:
    ckpts = sorted(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    return ckpts[-1] if ckpts else None


def train(cfg: TrainConfig, out: str | Path, resume: bool = False, index=None, scorer: Callable | None = None):
    """Run GRPO; returns the trainer. ``scorer`` replaces the RLVR reward (the RaR judge uses it)."""
    from .models import check_warm_start, warm_start_identity

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt = last_checkpoint(out) if resume else None
    if ckpt is not None:  # the adapter continues only on the warm-start build it was trained from
        check_warm_start(read_run(out).warm_start, cfg.model, f"resume {out}")
    elif (ident := warm_start_identity(cfg.model)) is not None:
        atomic_write_json(out / "warm_start.json", ident)
    else:
        (out / "warm_start.json").unlink(missing_ok=True)
    if cfg.gpu and cfg.unsloth:
        model, tokenizer = load_unsloth(cfg)  # before transformers / trl / peft are imported
    if cfg.threads:
        import torch

        torch.set_num_threads(cfg.threads)
    from trl import GRPOConfig, GRPOTrainer

    from .index import open_index_spec
    from .models import resolve_model
    from .tools import make_env

    if index is None:
        index = open_index_spec(cfg.index, embedder=cfg.embedder)
    queries = load_training_queries(cfg)
    if cfg.query_filter == "reachable":
        every = queries
        queries = reachable_queries(every, index, cfg.tool_max_results)
        atomic_write_json(out / "queries.json", {"filter": cfg.query_filter, "k": cfg.tool_max_results,
                                                 "candidates": len(every), "kept": [q.qid for q in queries]})
        print(f"query_filter=reachable: {len(queries)} of {len(every)} training queries show a gold paper "
              f"in the top {cfg.tool_max_results} of a search of their text")
    if not queries:
        raise ValueError("no training queries with gold papers in the corpus"
                         + (" reachable by a search of their text" if cfg.query_filter == "reachable" else ""))
    atomic_write_json(out / "config.json", cfg.model_dump(mode="json"))
    keep = int(ckpt.name.split("-")[1]) if ckpt else None
    log = RolloutLog(out / "rollouts.jsonl", keep_until_step=keep if resume else None)
    clock = StepClock()
    if resume and (out / "timing.jsonl").exists() and keep is not None:
        clock.rows = [r for r in load_rollouts(out / "timing.jsonl") if r["step"] <= keep]
    env_factory = functools.partial(make_env, index, **tool_view(cfg))
    args = GRPOConfig(**grpo_args(cfg, out))
    set_library_default("TRL_EXPERIMENTAL_SILENCE", "1")
    common = dict(reward_funcs=[make_reward_func(cfg, log, clock, scorer)], args=args,
                  train_dataset=build_dataset(queries, prompt_for(cfg), cfg.user_template), environment_factory=env_factory,
                  callbacks=_callbacks(out, clock, cfg.tensorboard) + _resume_schedule(ckpt))
    if cfg.gpu and cfg.unsloth:
        trainer = GRPOTrainer(model=model, processing_class=tokenizer, **common)
    else:
        trainer = GRPOTrainer(model=resolve_model(cfg.model), peft_config=lora_config(cfg), **common)
    bound_turns(trainer, cfg.max_completion_length)
    end_finished_episodes(trainer)
    for name, key in (("_generate", "generation"), ("_generate_and_score_completions", "prepare"),
                      ("compute_loss", "loss_forward")):
        setattr(trainer, name, _timed(getattr(trainer, name), clock, key))
    with tolerant_tool_parsing(cfg.tolerant_tool_calls):
        trainer.train(resume_from_checkpoint=str(ckpt) if ckpt else None)
    trainer.save_model(str(out / "final"))  # every process calls it (ZeRO-3 gathers the weights); rank 0 writes
    if process_rank()[0] == 0:
        atomic_write_text(out / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in trainer.state.log_history))
    return trainer


RUN_FILES = ("config.json", "metrics.jsonl", "rollouts.jsonl", "timing.jsonl", "queries.json", "revived.json",
             "warm_start.json")


def export_run(src: str | Path, dst: str | Path | None = None, max_adapter_mb: float = 10.0) -> Path:
    """A run's compact outputs copied where the repository keeps runs (default ``<results>/runs/<name>``):
    config, TRL's metrics, every scored rollout, the step timing, the TensorBoard events, and the final
    LoRA adapter stored in bfloat16 when that fits in ``max_adapter_mb`` (checkpoints stay behind).
    Returns the destination; ``read_run``/``load_run`` and ``run:<name>`` read it like any run."""
    import shutil

    from .models import shrink_adapter

    src = Path(src)
    info = read_run(src)
    ckpt = None if info.finished else last_checkpoint(src)
    if not info.finished and ckpt is None:
        raise ValueError(f"{src} has neither final/ nor a checkpoint: nothing to export yet")
    dst = Path(dst) if dst else settings().results_dir / "runs" / src.name
    tmp = dst.with_name(dst.name + ".export")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in RUN_FILES:
        if (src / name).exists():
            shutil.copy(src / name, tmp / name)
    if (src / "tensorboard").is_dir():
        shutil.copytree(src / "tensorboard", tmp / "tensorboard")
    # an unfinished run (to be continued with --resume where it was trained) keeps its last checkpoint's
    # adapter under that checkpoint's name, and only the logs up to it: read_run reports it as unfinished
    final = tmp / ("final" if info.finished else ckpt.name)
    final.mkdir()
    for f in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copy((src / "final" if info.finished else ckpt) / f, final / f)
    if ckpt is not None:
        upto = int(ckpt.name.split("-")[1])
        for name in ("metrics.jsonl", "rollouts.jsonl", "timing.jsonl"):
            if (tmp / name).exists():
                rows = [r for r in load_rollouts(tmp / name) if int(r.get("step", 0)) <= upto]
                atomic_write_text(tmp / name, "".join(json.dumps(r) + "\n" for r in rows))
    shrink_adapter(final, base=info.config.model)
    size = (final / "adapter_model.safetensors").stat().st_size / 2**20
    if size > max_adapter_mb:
        shutil.rmtree(final)  # too large to keep in git: the run is still readable, not loadable as a policy
        atomic_write_text(tmp / "ADAPTER.md", f"The final adapter ({size:.1f} MB in bfloat16) was not kept "
                          f"(limit {max_adapter_mb} MB); retrain with `python -m arxivqa.train` and the config here.\n")
    shutil.rmtree(dst, ignore_errors=True)
    tmp.rename(dst)
    return dst


def revive_run(src: str | Path, out: str | Path) -> Path:
    """An unfinished run kept in the repository (``export_run`` keeps its last checkpoint's adapter and its
    logs up to it) made resumable in ``out``: the logs copied, and ``checkpoint-N`` rebuilt from the kept
    adapter with the trainer state TRL's logs give (global step, log history), so that ``train(..., resume=True)``
    continues at step N+1 with the same queries in the same order and the learning-rate schedule where it was.
    What an export does not keep cannot come back: Adam's moment estimates start again at zero, the random
    state is new, and the adapter is the bfloat16 copy. ``revived.json`` in the run says so (export keeps it)."""
    import shutil

    from transformers import TrainerControl

    src, out = Path(src), Path(out)
    info = read_run(src)
    if info.finished:
        raise ValueError(f"{src} is finished: there is nothing to continue")
    ckpt = last_checkpoint(src)
    if ckpt is None or not (ckpt / "adapter_model.safetensors").exists():
        raise ValueError(f"{src} keeps no checkpoint adapter to continue from")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} exists and is not empty: continue it with --resume, or choose another folder")
    from .models import check_warm_start

    check_warm_start(info.warm_start, info.config.model, f"revive {src}")
    step = int(ckpt.name.split("-")[1])
    out.mkdir(parents=True, exist_ok=True)
    for name in RUN_FILES:
        if (src / name).exists():
            shutil.copy(src / name, out / name)
    if (src / "tensorboard").is_dir():
        shutil.copytree(src / "tensorboard", out / "tensorboard")
    dst = out / ckpt.name
    shutil.copytree(ckpt, dst)
    history = [r for r in load_rollouts(src / "metrics.jsonl") if int(r.get("step", 0)) <= step] \
        if (src / "metrics.jsonl").exists() else []
    cfg = info.config
    epoch = next((r["epoch"] for r in reversed(history) if "epoch" in r), 0.0)
    atomic_write_json(dst / "trainer_state.json", {
        "global_step": step, "max_steps": cfg.max_steps, "epoch": epoch, "log_history": history,
        "logging_steps": 1, "save_steps": cfg.save_steps,
        "train_batch_size": micro_batch(cfg),
        "stateful_callbacks": {"TrainerControl": TrainerControl().state()}})
    atomic_write_json(out / "revived.json", {"revivals": info.revivals + [{
        "from": str(src), "step": step, "adapter": "bfloat16 copy kept by export",
        "reset": ["Adam moment estimates", "random state"], "kept": ["query order", "learning-rate schedule"]}]})
    return out


def _resume_schedule(ckpt: Path | None):
    """A checkpoint ``revive_run`` rebuilt (no optimizer state): the Trainer then builds a fresh
    optimizer and scheduler, and the scheduler is stepped to the checkpoint's global step here so that the
    learning rate continues its decay instead of starting again."""
    from transformers import TrainerCallback

    class ResumeSchedule(TrainerCallback):
        def on_train_begin(self, args, state, control, lr_scheduler=None, **kw):
            if lr_scheduler is not None and state.global_step > 0:
                with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()": meant here
                    warnings.simplefilter("ignore", UserWarning)
                    for _ in range(state.global_step):
                        lr_scheduler.step()
                print(f"resumed at step {state.global_step} without optimizer state: Adam restarts, "
                      f"learning rate {lr_scheduler.get_last_lr()[0]:.3g}")

    if ckpt is None or (ckpt / "optimizer.pt").exists():
        return []
    # only the checkpoint revive_run rebuilt; any other (DeepSpeed keeps its optimizer state elsewhere) is
    # left to the Trainer, which restores its scheduler itself
    revived = read_run(ckpt.parent).revivals
    if not revived or f"checkpoint-{revived[-1]['step']}" != ckpt.name:
        return []
    return [ResumeSchedule()]


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main(argv: list[str] | None = None) -> None:
    import argparse

    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "export":
        e = argparse.ArgumentParser(prog="python -m arxivqa.train export",
                                    description="copy a run's compact outputs (finished, or up to its last checkpoint) to <results>/runs/<name>")
        e.add_argument("run", help="run folder")
        e.add_argument("--to", default=None, help="destination (default: <results>/runs/<run name>)")
        ea = e.parse_args(argv[1:])
        print(export_run(ea.run, ea.to))
        return
    if argv and argv[0] == "revive":
        r = argparse.ArgumentParser(prog="python -m arxivqa.train revive",
                                    description="make an unfinished run kept in results/runs resumable in --out "
                                                "(then: python -m arxivqa.train ... --out <out> --resume)")
        r.add_argument("run", help="an exported unfinished run, e.g. results/runs/<name>")
        r.add_argument("--out", required=True, help="the run folder to continue it in, e.g. data/runs/<name>")
        ra = r.parse_args(argv[1:])
        print(revive_run(ra.run, ra.out))
        return
    p = argparse.ArgumentParser(prog="python -m arxivqa.train", description=__doc__.split("\n\n")[0],
                                epilog="python -m arxivqa.train export <run> copies a run into results/runs/; "
                                       "python -m arxivqa.train revive <kept run> --out <folder> makes an unfinished one resumable")
    p.add_argument("--preset", default="cpu-demo", choices=sorted(PRESETS))
    p.add_argument("--reward", choices=["rlvr", "rar"], default=None)
    p.add_argument("--out", required=True, help="run folder (config, metrics, rollouts, timing, checkpoints)")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --out")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a TrainConfig field, e.g. --set max_steps=5 --set curriculum=easy-to-hard")
    a = p.parse_args(argv)
    overrides = dict(kv.split("=", 1) for kv in a.set)
    overrides = {k: _parse_value(v) for k, v in overrides.items()}
    if a.reward:
        overrides["reward"] = a.reward
    cfg = preset(a.preset, **overrides)
    scorer = None
    if cfg.reward == "rar":
        from .judge import rar_scorer
        from .llm import EndpointUnreachable

        try:
            scorer = rar_scorer(cfg)
        except EndpointUnreachable as exc:
            raise SystemExit(f"error: {exc}") from None
    train(cfg, a.out, resume=a.resume, scorer=scorer)


if __name__ == "__main__":
    main()
