import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell
def _():
    import os

    import marimo as mo
    import pandas as pd

    from arxivqa import ablations, config, plots
    from arxivqa.evaluate import cached_agent_eval, eval_budgets, eval_queries
    from arxivqa.files import atomic_write_json
    from arxivqa.index import build_for_scale
    from arxivqa.judge import Judge
    from arxivqa.llm import open_llm
    from arxivqa.plots import save, save_table
    from arxivqa.train import env_preset, run_folder, train_or_load

    return (Judge, ablations, atomic_write_json, build_for_scale, cached_agent_eval, config, eval_budgets,
            eval_queries, mo, open_llm, os, pd, plots, env_preset, run_folder, save, save_table, train_or_load)


@app.cell
def _(mo):
    mo.md(r"""
    # 06 · Judge ablations: training judge × evaluation judge

    The seed trains RaR policies with different **training judges** and scores every policy with
    different **evaluation judges**: does a policy only please the judge it was trained with, do judges
    agree, and does a judge's score track recall? Here every training judge in the list gets a RaR run
    (`cpu-demo` preset; notebook 05's run is reused for `local`), every policy — plus the untrained base
    model and notebook 04's RLVR policy as references — runs the same held-out queries, and every
    evaluation judge scores every trajectory (the same compact, defanged rendering as in training;
    judgments are cached, so notebook 07 reuses them).

    Settings: `ARXIVQA_TRAIN_JUDGES` and `ARXIVQA_EVAL_JUDGES` (endpoint names of `configs/endpoints.toml`,
    comma-separated; default `local,local-smollm2`: the packaged Qwen2.5-Coder-0.5B and SmolLM2-135M, both
    offline — any OpenAI-compatible judge such as an Olmo or GLM model on vLLM, or a hosted one, is one
    more name), `ARXIVQA_RAR_STEPS`, `ARXIVQA_TRAIN_STEPS` (which runs to read), `ARXIVQA_EVAL_QUERIES_FILE`,
    `ARXIVQA_EVAL_SPLIT`, `ARXIVQA_EVAL_LIMIT`, `ARXIVQA_EVAL_BUDGETS`.
    """)
    return


@app.cell
def _(build_for_scale, eval_budgets, eval_queries, os, env_preset, run_folder):
    index, _ = build_for_scale()
    train_judges = [j.strip() for j in os.environ.get("ARXIVQA_TRAIN_JUDGES", "local,local-smollm2").split(",") if j.strip()]
    eval_judges = [j.strip() for j in os.environ.get("ARXIVQA_EVAL_JUDGES", "local,local-smollm2").split(",") if j.strip()]
    rar_cfgs = {j: env_preset("rar", "ARXIVQA_RAR_STEPS", 10, judge_endpoint=None if j == "local" else j)
                for j in train_judges}
    rlvr_cfg = env_preset("rlvr", "ARXIVQA_TRAIN_STEPS", 20)
    queries, qtag = eval_queries()
    budgets = eval_budgets()
    return budgets, eval_judges, index, qtag, queries, rar_cfgs, rlvr_cfg, run_folder


@app.cell
def _(index, mo, rar_cfgs, train_or_load):
    trained = {}
    for _j, _cfg in rar_cfgs.items():
        with mo.status.spinner(title=f"RaR with training judge {_j}: {_cfg.max_steps} steps (or read back)"):
            trained[_j] = train_or_load(_cfg, index)
    mo.md("Training runs: " + ", ".join(f"`{v['run']}` ({'trained now, %.0f s' % v['seconds'] if v['trained_now'] else 'read back'})"
                                        for v in trained.values()))
    return (trained,)


@app.cell
def _(ablations, budgets, cached_agent_eval, index, mo, qtag, queries, rar_cfgs, rlvr_cfg, run_folder, trained):
    from arxivqa.evaluate import trajectory_cache
    from arxivqa.models import DEFAULT_MODEL

    # name -> (training judge, policy spec, cell label)
    specs = {"base (untrained)": ("none (base model)", "local", ablations.cell_label(DEFAULT_MODEL, "untrained", "-"))}
    if (run_folder(rlvr_cfg) / "final").exists():
        specs["RLVR"] = ("none (RLVR reward)", f"run:{run_folder(rlvr_cfg).name}",
                         ablations.cell_label(rlvr_cfg.model, rlvr_cfg.preset, rlvr_cfg.seed, rlvr_cfg.max_steps))
    for _j, _cfg in rar_cfgs.items():
        specs[f"RaR · judge {_j}"] = (_j, f"run:{run_folder(_cfg).name}",
                                      ablations.cell_label(_cfg.model, _cfg.preset, _cfg.seed, _cfg.max_steps))
    policies = {}
    for _name, (_tj, _spec, _label) in specs.items():
        _path = trajectory_cache(_spec, qtag)
        with mo.status.spinner(title=f"{_name}: {len(queries)} episodes (cached ones are reused)"):
            policies[_name] = (_tj, cached_agent_eval(_spec, queries, _path, index, budgets))
    labels = {n: v[2] for n, v in specs.items()}
    mo.md(f"{len(policies)} policies × {len(queries)} held-out queries (`{qtag}`), budgets {budgets}.")
    return labels, policies, specs


@app.cell
def _(Judge, ablations, eval_judges, labels, mo, open_llm, policies):
    _llms = {j: open_llm(j) for j in eval_judges}
    try:
        _judges = {j: Judge(llm) for j, llm in _llms.items()}
        with mo.status.spinner(title=f"{len(eval_judges)} evaluation judges × {sum(len(t) for _, t in policies.values())} trajectories"):
            scores = ablations.judge_scores(policies, _judges, labels)
        judge_stats = {j: {"judged": jd.judged, "fallbacks": jd.fallbacks, "llm": _llms[j].stats.as_dict()}
                       for j, jd in _judges.items()}
    finally:
        for _llm in _llms.values():
            _llm.close()
    return judge_stats, scores


@app.cell
def _(ablations, mo, plots, save, save_table, scores):
    mean, count = ablations.score_matrix(scores)
    _fig = plots.judge_matrix(mean, count, title="Mean judge score (0–1): training judge × evaluation judge")
    save(_fig, "06_judge_matrix.png")
    save_table(mean.reset_index(), "06_judge_matrix")
    by_tj = ablations.recall_by_training_judge(scores)
    save_table(by_tj, "06_recall_by_training_judge")
    _fig2 = plots.recall_per_policy(by_tj, "training_judge", title="Recall per training judge (held-out queries)")
    save(_fig2, "06_recall_by_training_judge.png")
    mo.vstack([mo.md("## Training judge × evaluation judge (mean score; n = valid judgments)"), _fig,
               mo.md("## Recall per training judge"), mo.ui.table(by_tj, selection=None), _fig2])
    return by_tj, count, mean


@app.cell
def _(ablations, mo, plots, save, save_table, scores):
    corr = ablations.score_recall_correlation(scores)
    save_table(corr, "06_score_recall_correlation")
    _fig = plots.score_vs_recall(scores, title="Judge score vs. search recall (each trajectory)")
    save(_fig, "06_score_vs_recall.png")
    rho, mad, n_shared = ablations.judge_agreement(scores)
    _fig2 = plots.judge_matrix(rho, n_shared, title="Judge agreement: Spearman ρ on the same trajectories",
                               xlabel="evaluation judge", ylabel="evaluation judge", center=0.0)
    save(_fig2, "06_judge_agreement.png")
    save_table(rho.reset_index(names="eval_judge"), "06_judge_agreement_spearman")
    save_table(mad.reset_index(names="eval_judge"), "06_judge_agreement_mean_abs_diff")
    mo.vstack([mo.md("## Does a judge's score track recall?"), mo.ui.table(corr, selection=None), _fig,
               mo.md("## Do the judges agree?"), _fig2,
               mo.md("Mean absolute score difference:"), mo.ui.table(mad.reset_index(names="eval_judge"), selection=None)])
    return corr, rho


@app.cell
def _(atomic_write_json, config, corr, eval_judges, judge_stats, labels, mo, qtag, save_table, scores, trained):
    save_table(scores, "06_judge_scores")
    atomic_write_json(config.results_dir() / "06_run.json",
                      {"queries": qtag, "policies": labels, "eval_judges": eval_judges, "training": trained,
                       "judges": judge_stats, "fallback_rate": float(scores["fallback"].mean()) if len(scores) else None,
                       "correlation": corr.to_dict(orient="records")})
    _fb = scores.groupby("eval_judge")["fallback"].mean()
    mo.md("Failed judgments (explicit fallbacks, left out of every mean): "
          + ", ".join(f"{j} {v:.0%}" for j, v in _fb.items()) + ". Each policy: "
          + "; ".join(f"**{n}** = {lab}" for n, lab in labels.items()))
    return


if __name__ == "__main__":
    app.run()
