import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell
def _():
    import os
    import time

    import marimo as mo
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    from arxivqa import config
    from arxivqa.diagnostics import load_run
    from arxivqa.files import atomic_write_json
    from arxivqa.index import build_for_scale
    from arxivqa.judge import Judge
    from arxivqa.llm import open_llm
    from arxivqa.plots import save, save_table
    from arxivqa.train import env_preset, run_folder, train_or_load

    return (Judge, atomic_write_json, build_for_scale, config, load_run, mo, open_llm, os, pd, plt, env_preset, run_folder, save,
            save_table, sns, time, train_or_load)


@app.cell
def _(mo):
    mo.md(r"""
    # 05 · RaR: an LLM judge as the reward, side by side with RLVR

    The seed's main result: replacing the recall reward by **Rubrics as Rewards** keeps rollouts rich and
    multi-turn. The judge (`arxivqa.judge`) reads the whole trajectory — compactly rendered and escaped so
    that nothing the policy writes can pose as instructions — and scores search diversity, thoroughness,
    thoughtfulness and document relevance (0–5 each), then a holistic 1–10, mapped to [0, 1]; the reward
    subtracts a stepped length penalty and keeps RLVR's four gates. A failed judgment gets an explicit,
    counted fallback (the batch mean), never a silent 0 or 1.

    **Runs here**: the `cpu-demo` preset with `reward=rar` and the offline default judge (the packaged
    Qwen2.5-Coder-0.5B-Instruct behind `transformers serve`; a 0.5B judge is coarse — the seed used
    frontier and open 8B+ judges). Then RLVR (notebook 04's run) vs. RaR on the same diagnostics, and the
    query-specific rubric (RaR-Explicit) vs. the global rubric as judges of the same rollouts.
    Settings: `ARXIVQA_RAR_STEPS` (default 10), `ARXIVQA_JUDGE` (an endpoint name; default `local`).
    GPU: `python -m arxivqa.train --preset paper --reward rar` (Unsloth + vLLM, Qwen3-8B).
    """)
    return


@app.cell
def _(build_for_scale, config, env_preset, os, run_folder):
    index, _ = build_for_scale()
    _judge = os.environ.get("ARXIVQA_JUDGE") or None
    rar_cfg = env_preset("rar", "ARXIVQA_RAR_STEPS", 10, judge_endpoint=None if _judge == "local" else _judge)
    rlvr_cfg = env_preset("rlvr", "ARXIVQA_TRAIN_STEPS", 20)
    judge_name = rar_cfg.judge_endpoint or "local"
    rar_dir, rlvr_dir = run_folder(rar_cfg), run_folder(rlvr_cfg)
    return index, judge_name, rar_cfg, rar_dir, rlvr_dir


@app.cell
def _(index, mo, rar_cfg, train_or_load):
    with mo.status.spinner(title=f"RaR GRPO ({rar_cfg.max_steps} steps) with the judge (or read back)"):
        _info = train_or_load(rar_cfg, index)
    judge_counts, train_seconds = _info.get("judge", {}), _info["seconds"]
    return judge_counts, train_seconds


@app.cell
def _(atomic_write_json, config, judge_counts, load_run, mo, rar_dir, rlvr_dir, save_table, train_seconds):
    rar = load_run(rar_dir)
    rlvr = load_run(rlvr_dir) if (rlvr_dir / "final").exists() else None
    save_table(rar["log"], "05_rar_trl_log")
    save_table(rar["summary"], "05_rar_step_summary")
    _fallback_rate = float(rar["rollouts"]["reward/judge_fallback"].mean()) if len(rar["rollouts"]) else float("nan")
    atomic_write_json(config.results_dir() / "05_run.json",
                      {"run": rar_dir.name, "config": rar["config"], "rollouts": len(rar["rollouts"]),
                       "judge_fallback_rate": _fallback_rate, "judge_this_session": judge_counts,
                       "train_seconds_this_session": train_seconds,
                       "total_step_seconds": float(rar["timing"]["total"].sum()) if len(rar["timing"]) else None})
    mo.md(f"RaR run: {len(rar['rollouts'])} rollouts over {rar['rollouts']['step'].nunique()} steps; judge fallbacks "
          f"(failed judgments replaced by the batch mean): **{_fallback_rate:.1%}** of rollouts. "
          + ("" if rlvr is not None else f"_No finished RLVR run in `{rlvr_dir}`: run notebook 04 first for the comparison._"))
    return rar, rlvr


@app.cell
def _(mo, pd, plt, rar, rlvr, save, save_table, sns):
    _measures = [("tool_calls", "tool calls per rollout"), ("distinct_tools", "distinct tools"), ("turns", "turns"),
                 ("search_recall", "search recall"), ("reward/total", "reward")]
    _frames = [rar["rollouts"].assign(regime="RaR")] + ([rlvr["rollouts"].assign(regime="RLVR")] if rlvr else [])
    both = pd.concat(_frames, ignore_index=True)
    _logs = [rar["log"].assign(regime="RaR")] + ([rlvr["log"].assign(regime="RLVR")] if rlvr else [])
    logs = pd.concat(_logs, ignore_index=True)
    fig, _axes = plt.subplots(2, 3, figsize=(13, 6.4))
    for _ax, (_col, _name) in zip(_axes.flat, _measures):
        sns.lineplot(data=both, x="step", y=_col, hue="regime", marker="o", ax=_ax)
        _ax.set(title=_name, ylabel="")
    sns.lineplot(data=logs, x="step", y="entropy", hue="regime", marker="o", ax=_axes.flat[5])
    _axes.flat[5].set(title="entropy (TRL)", ylabel="")
    fig.suptitle("RLVR vs. RaR, cpu-demo (Qwen2.5-Coder-0.5B, LoRA r 8, 2 rollouts/step, seed 0)")
    fig.tight_layout()
    save(fig, "05_rlvr_vs_rar.png")
    _cols = ["tool_calls", "distinct_tools", "turns", "search_turns", "search_recall", "single_kw_single_sem",
             "submitted", "fm_no_exploration", "fm_rephrasing", "fm_latent_knowledge", "fm_no_reasoning_between_calls"]
    table = both.groupby("regime")[_cols].mean().reset_index()
    _ent = logs.groupby("regime")["entropy"].mean().rename("entropy").reset_index()
    table = table.merge(_ent, on="regime")
    save_table(table, "05_rlvr_vs_rar")
    mo.vstack([mo.md("## RLVR vs. RaR on the same diagnostics (means over all steps)"),
               mo.ui.table(table, selection=None), fig])
    return (both,)


@app.cell
def _(mo, rar, save_table):
    _crit = [c for c in ("reward/search_diversity", "reward/thoroughness", "reward/thoughtfulness",
                         "reward/document_relevance", "reward/holistic", "reward/judge_score", "reward/length_penalty")
             if c in rar["rollouts"]]
    judge_by_step = rar["rollouts"].groupby("step")[_crit].mean().reset_index()
    save_table(judge_by_step, "05_judge_scores_by_step")
    mo.vstack([mo.md("## What the judge said, per step (means)"), mo.ui.table(judge_by_step, selection=None)])
    return


@app.cell
def _(Judge, judge_name, mo, open_llm, pd, rar, rlvr, save_table):
    # The same rollouts judged with the global rubric and with query-specific rubrics (RaR-Explicit).
    def _last(run, regime):
        last = max(x for x, _ in run["trajectories"])
        return [(regime, t) for x, t in run["trajectories"] if x == last]

    _pool = (_last(rar, "RaR") + (_last(rlvr, "RLVR") if rlvr is not None else []))[:8]
    _trajs = [t for _, t in _pool]
    with mo.status.spinner(title="judging the last step's rollouts with both rubrics"):
        with open_llm(None if judge_name == "local" else judge_name) as _llm:
            _glob = Judge(_llm, rubric="global").score_batch(_trajs)
            _expl_judge = Judge(_llm, rubric="query")
            _expl = _expl_judge.score_batch(_trajs)
            _rubrics = {t.query: _expl_judge.query_rubric(t.query) for t in _trajs}
    rubric_cmp = pd.DataFrame([{"regime": regime, "qid": t.qid, "global": g.score, "query_specific": e.score,
                                "global_fallback": g.fallback, "query_fallback": e.fallback,
                                "tool_calls": len(t.tool_results)}
                               for (regime, t), g, e in zip(_pool, _glob, _expl)])
    save_table(rubric_cmp, "05_rubric_global_vs_query")
    _corr = rubric_cmp[["global", "query_specific"]].corr().iloc[0, 1] if len(rubric_cmp) > 2 else float("nan")
    _example = next((rb for rb in _rubrics.values() if rb is not None), None)
    mo.vstack([
        mo.md(f"## Global vs. query-specific rubric on {len(rubric_cmp)} rollouts\nPearson r = {_corr:.2f}. "
              "Query-specific rubrics are written once per query by the LLM (cached) and scored as Σ w·c / Σ w."),
        mo.ui.table(rubric_cmp, selection=None),
        mo.md("An LLM-written rubric:\n\n" + ("\n".join(f"- [{c.weight}] {c.text}" for c in _example.criteria)
                                             if _example else "_none could be written_")),
    ])
    return


@app.cell
def _(mo, rar, rlvr):
    def _best_last(run):
        last = max(s for s, _ in run["trajectories"])
        rows = run["rollouts"]
        idx = rows.index[rows["step"] == last]
        i = max(idx, key=lambda k: rows.loc[k, "reward/total"])
        t = run["trajectories"][i][1]
        lines = [f"step {last}, reward {rows.loc[i, 'reward/total']:.3f}: {t.query}"]
        for s in t.steps:
            if s.assistant.text.strip():
                lines.append(f"  [turn {s.turn}] {s.assistant.text.strip()[:240]}")
            lines += [f"  [turn {s.turn}] {r.name}({r.arguments})" for r in s.results]
        return "\n".join(lines)

    mo.vstack([mo.md("## Example rollouts at the last step (best reward)"), mo.md("**RaR**"),
               mo.plain_text(_best_last(rar))] +
              ([mo.md("**RLVR**"), mo.plain_text(_best_last(rlvr))] if rlvr is not None else []))
    return


if __name__ == "__main__":
    app.run()
