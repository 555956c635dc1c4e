import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell
def _():
    import json
    import os
    import time

    import marimo as mo
    import pandas as pd

    from arxivqa import config
    from arxivqa.diagnostics import early_late, load_run
    from arxivqa.files import atomic_write_json
    from arxivqa.index import build_for_scale
    from arxivqa.plots import (failure_mode_rates, save, save_table, step_time, tool_calls_per_rollout,
                               training_curves)
    from arxivqa.train import env_preset, run_folder, train_or_load

    return (atomic_write_json, build_for_scale, config, early_late, failure_mode_rates, json, load_run, mo, os, pd,
            env_preset, run_folder, save, save_table, step_time, time, tool_calls_per_rollout, train_or_load, training_curves)


@app.cell
def _(mo):
    mo.md(r"""
    # 04 · RLVR: GRPO with a verifiable recall reward, and the collapse diagnostics

    The seed's first regime. GRPO (TRL's `GRPOTrainer`, the tools environment as `environment_factory`,
    LoRA) with the RLVR reward: **recall of the gold papers over all tool results − a Jaccard redundancy
    penalty across the emitted queries + a multi-turn bonus**, zeroed by the duplication / submission /
    citation / limit gates (`arxivqa.rewards`; weights are ours and configurable).

    **What the seed reports** (Qwen3-8B, ~200 queries, 8×8 rollouts per step): mean reward plateaus
    around step 100; entropy collapses around step 200; rollouts converge to one `keyword_search` + one
    `semantic_search` + `finish`, with four failure modes — no systematic exploration, reasoning from
    latent knowledge, no reasoning before the 2nd/3rd tool calls, queries that rephrase the user query.

    **What runs here** is the `cpu-demo` preset: the same algorithm on 2 CPU cores — the packaged
    Qwen2.5-Coder-0.5B-Instruct (bf16 where the CPU supports it), 1 prompt × 2 rollouts per step, LoRA r 8,
    256 completion tokens including tool output, 2 tool rounds, 20 steps.
    Twenty steps cannot reach step 100; read the curves as the start of the dynamics, not its end.
    Settings: `ARXIVQA_TRAIN_STEPS` (20), `ARXIVQA_CURRICULUM` (`uniform` or `easy-to-hard`),
    `ARXIVQA_COMPARE_CURRICULUM=1` also trains the other schedule and compares. A finished run is read
    back, not retrained (delete its folder under `data/runs/` to retrain); a partial one resumes.
    """)
    return


@app.cell
def _(build_for_scale, config, env_preset, os, run_folder):
    index, _ = build_for_scale()
    steps = env_preset("rlvr", "ARXIVQA_TRAIN_STEPS", 20).max_steps
    curriculum = os.environ.get("ARXIVQA_CURRICULUM", "uniform")
    compare = os.environ.get("ARXIVQA_COMPARE_CURRICULUM", "0") == "1"

    def run_config(schedule):
        return env_preset("rlvr", "ARXIVQA_TRAIN_STEPS", 20, curriculum=schedule)

    def run_dir(cfg):
        return run_folder(cfg)

    cfg = run_config(curriculum)
    out_dir = run_dir(cfg)
    return cfg, compare, curriculum, index, out_dir, run_config, run_dir, steps


@app.cell
def _(cfg, index, mo, out_dir, train_or_load):
    def ensure_run(c):
        """Train unless the run folder holds a finished run; resume a partial one. Returns wall seconds spent."""
        return train_or_load(c, index)["seconds"]

    with mo.status.spinner(title=f"GRPO ({cfg.preset}, {cfg.max_steps} steps) → {out_dir.name}"):
        train_seconds = ensure_run(cfg)
    return ensure_run, train_seconds


@app.cell
def _(atomic_write_json, cfg, config, load_run, out_dir, save_table, train_seconds):
    run = load_run(out_dir)
    save_table(run["log"], "04_trl_log")
    save_table(run["summary"], "04_step_summary")
    _t = run["timing"]
    _parts = [c for c in ["total", "generation", "generation_model", "tools", "reward", "ref_logprobs", "loss_forward",
                          "backward_optimizer", "update"] if c in _t]
    step_seconds = _t[_parts].describe().loc[["mean", "50%", "max"]].reset_index(names="stat") if len(_t) else _t
    save_table(step_seconds, "04_step_time")
    atomic_write_json(config.results_dir() / "04_run.json",
                      {"run": out_dir.name, "config": run["config"], "steps_logged": int(run["log"]["step"].max()),
                       "rollouts": len(run["rollouts"]), "train_seconds_this_session": train_seconds,
                       "total_step_seconds": float(_t["total"].sum()) if len(_t) else None})
    return run, step_seconds


@app.cell
def _(cfg, mo, run, save, step_seconds, step_time, tool_calls_per_rollout, training_curves):
    _title = f"RLVR, {cfg.preset}: {cfg.model}, {cfg.num_generations} rollouts/step, seed {cfg.seed}"
    fig_curves = training_curves(run["log"], title=_title,
                                 keys=("reward", "rlvr/search_recall", "entropy", "kl", "tools/call_frequency"))
    save(fig_curves, "04_training_curves.png")
    fig_tools = tool_calls_per_rollout(run["rollouts"], title="Tool calls per rollout (each dot a rollout)")
    save(fig_tools, "04_tool_calls_per_rollout.png")
    fig_time = step_time(run["timing"], title=f"Where a step's {step_seconds.loc[0, 'total']:.0f} s go (mean)")
    save(fig_time, "04_step_time.png")
    mo.vstack([mo.md("## Training curves (TRL's logs)"), fig_curves, mo.md("## Tool calls per rollout"), fig_tools,
               mo.md("## Step time"), mo.ui.table(step_seconds, selection=None), fig_time])
    return


@app.cell
def _(early_late, failure_mode_rates, mo, run, save, save_table):
    fig_fm = failure_mode_rates(run["summary"], title="Failure modes and the 1 keyword + 1 semantic share")
    save(fig_fm, "04_failure_modes.png")
    signature = early_late(run["summary"], run["log"])
    save_table(signature, "04_signature")
    mo.vstack([mo.md(r"""
    ## The collapse signature: seed vs. this run
    The seed expects, as training goes on: reward up then flat, entropy down, fewer and less diverse tool
    calls converging on 1 keyword + 1 semantic + finish, and more of the four failure modes. The table puts
    the first and last five steps of this run side by side; with 20 CPU steps of a 0.5B model, a change of
    a few rollouts is noise-sized (2 rollouts a step).
    """), mo.ui.table(signature, selection=None), fig_fm])
    return


@app.cell
def _(mo, pd, run, save_table):
    _r = run["rollouts"]
    _gates = {c.removeprefix("reward/gate/"): float(_r[c].mean()) for c in _r.columns if c.startswith("reward/gate/")}
    gate_table = pd.DataFrame([{"gate": g, "pass rate": v} for g, v in _gates.items()] +
                              [{"gate": "all gates", "pass rate": float(_r["reward/gates_passed"].mean())}])
    save_table(gate_table, "04_gates")
    _zero = float(run["log"]["frac_reward_zero_std"].mean()) if "frac_reward_zero_std" in run["log"] else float("nan")
    _nonzero = float((_r["reward/total"] != 0).mean())
    mo.vstack([mo.md(f"""
    ## How much signal the reward gave
    {_nonzero:.0%} of rollouts got a non-zero reward; in {_zero:.0%} of the steps both rollouts of the group
    had the same reward, so GRPO's advantage — and the policy gradient — was zero. The gates decide this:
    a rollout that never calls `finish` (submission gate) scores 0 whatever its searches found
    (mean search recall of all rollouts: {_r['reward/search_recall'].mean():.3f}).
    """), mo.ui.table(gate_table, selection=None)])
    return


@app.cell
def _(mo, run):
    def _render(step, traj, reward):
        lines = [f"step {step} · reward {reward:.3f} · {len(traj.tool_results)} tool calls · stop `{traj.stop_reason}`",
                 f"query: {traj.query}"]
        for s in traj.steps:
            if s.assistant.text.strip():
                lines.append(f"  [turn {s.turn}] thinks: {s.assistant.text.strip()[:300]}")
            for r in s.results:
                lines.append(f"  [turn {s.turn}] {r.name}({r.arguments}) -> " + ("ERROR " + r.result[:120] if r.error
                             else f"{len(r.result_ids)} papers, {len(set(r.result_ids) & set(traj.gold_in_corpus))} gold"))
        lines.append(f"  submitted: {traj.submitted}")
        return "\n".join(lines)

    _rows = run["rollouts"]
    _steps = sorted(_rows["step"].unique()) if len(_rows) else []
    _examples = []
    for _s in (_steps[:1] + _steps[-1:]) if _steps else []:
        _idx = _rows.index[_rows["step"] == _s]
        _best = max(_idx, key=lambda i: _rows.loc[i, "reward/total"])
        _step, _traj = run["trajectories"][_best]
        _examples.append(_render(_step, _traj, _rows.loc[_best, "reward/total"]))
    mo.vstack([mo.md("## Example rollouts: best of the first step vs. best of the last step"),
               *[mo.plain_text(e) for e in _examples]])
    return


@app.cell
def _(compare, curriculum, ensure_run, load_run, mo, pd, run, run_config, run_dir, save, save_table):
    import matplotlib.pyplot as plt
    import seaborn as sns

    _other = "easy-to-hard" if curriculum == "uniform" else "uniform"
    _cfg2 = run_config(_other)
    _dir2 = run_dir(_cfg2)
    if compare:
        with mo.status.spinner(title=f"training the {_other} schedule for comparison"):
            ensure_run(_cfg2)
    if (_dir2 / "final").exists():
        _run2 = load_run(_dir2)
        _both = pd.concat([run["rollouts"].assign(schedule=curriculum), _run2["rollouts"].assign(schedule=_other)])
        _cmp = (_both.groupby("schedule")[["reward/total", "reward/search_recall", "tool_calls", "distinct_tools",
                                          "single_kw_single_sem"]].mean().reset_index())
        save_table(_cmp, "04_curriculum")
        _fig, _ax = plt.subplots(figsize=(7, 3))
        sns.lineplot(data=_both, x="step", y="reward/search_recall", hue="schedule", marker="o", ax=_ax)
        _ax.set(title="Search recall per step: curriculum vs. uniform")
        save(_fig, "04_curriculum.png")
        _out = mo.vstack([mo.md("## Curriculum (easy → medium → hard) vs. uniform sampling"),
                          mo.ui.table(_cmp, selection=None), _fig])
    else:
        _out = mo.md(f"_Curriculum comparison: set `ARXIVQA_COMPARE_CURRICULUM=1` to also train the `{_other}` "
                     "schedule (another ~20 min on 2 cores)._")
    _out
    return


if __name__ == "__main__":
    app.run()
