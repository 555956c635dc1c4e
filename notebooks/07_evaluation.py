import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell
def _():
    import os

    import marimo as mo
    import pandas as pd

    from arxivqa import ablations, config, plots
    from arxivqa.evaluate import (baseline_rows, bootstrap_ci, cached_agent_eval, comparison_table, eval_budgets,
                                  eval_queries, trajectory_cache, trajectory_metrics)
    from arxivqa.files import atomic_write_json
    from arxivqa.index import build_for_scale
    from arxivqa.judge import Judge
    from arxivqa.llm import get_endpoint, open_llm
    from arxivqa.models import DEFAULT_MODEL
    from arxivqa.plots import save, save_table
    from arxivqa.train import env_preset, run_folder, train_or_load

    return (DEFAULT_MODEL, Judge, ablations, atomic_write_json, baseline_rows, bootstrap_ci, build_for_scale,
            cached_agent_eval, comparison_table, config, eval_budgets, eval_queries, get_endpoint, mo, open_llm, os,
            pd, plots, env_preset, run_folder, save, save_table, train_or_load, trajectory_cache, trajectory_metrics)


@app.cell
def _(mo):
    mo.md(r"""
    # 07 · Held-out evaluation: every policy in one table

    One-shot BM25 / dense / hybrid, the untrained base model, the RLVR policy (notebook 04), the RaR
    policies with the global rubric (notebooks 05/06, one per training judge) and with query-specific
    rubrics (trained here), and — when its key is set — an OpenAI-compatible frontier agent, all on the
    same held-out queries with the same budgets: recall@10, search recall, judge scores, tool calls,
    turns, tokens, latency, with 95 % bootstrap intervals over queries.

    The query file is a parameter: `ARXIVQA_EVAL_QUERIES_FILE=<any file in the queries_train.jsonl format>`
    with `ARXIVQA_EVAL_SPLIT=all` evaluates a held-out file (the CLI does the same for one policy:
    `python -m arxivqa.evaluate --policy run:<run folder> --queries <file> --split all`). Other settings:
    `ARXIVQA_EVAL_LIMIT`, `ARXIVQA_EVAL_BUDGETS`, `ARXIVQA_EVAL_JUDGES`, `ARXIVQA_TRAIN_JUDGES`,
    `ARXIVQA_RAR_STEPS`, `ARXIVQA_TRAIN_STEPS`, `ARXIVQA_FRONTIER` (an endpoint name; default
    `openai-gpt-4.1-mini`, used only when its key variable is set).
    """)
    return


@app.cell
def _(build_for_scale, eval_budgets, eval_queries, get_endpoint, os, env_preset):
    index, _ = build_for_scale()
    queries, qtag = eval_queries()
    budgets = eval_budgets()
    eval_judges = [j.strip() for j in os.environ.get("ARXIVQA_EVAL_JUDGES", "local,local-smollm2").split(",") if j.strip()]
    train_judges = [j.strip() for j in os.environ.get("ARXIVQA_TRAIN_JUDGES", "local,local-smollm2").split(",") if j.strip()]
    rlvr_cfg = env_preset("rlvr", "ARXIVQA_TRAIN_STEPS", 20)
    rar_global = {j: env_preset("rar", "ARXIVQA_RAR_STEPS", 10, judge_endpoint=None if j == "local" else j)
                  for j in train_judges}
    rar_query_cfg = env_preset("rar", "ARXIVQA_RAR_STEPS", 10, judge_rubric="query")
    _frontier = get_endpoint(os.environ.get("ARXIVQA_FRONTIER", "openai-gpt-4.1-mini"))
    frontier = _frontier if _frontier.api_key_env and os.environ.get(_frontier.api_key_env) else None
    return budgets, eval_judges, frontier, index, qtag, queries, rar_global, rar_query_cfg, rlvr_cfg


@app.cell
def _(index, mo, rar_query_cfg, train_or_load):
    with mo.status.spinner(title=f"RaR with query-specific rubrics: {rar_query_cfg.max_steps} steps (or read back)"):
        query_run = train_or_load(rar_query_cfg, index)
    mo.md(f"RaR (query-specific rubric) run `{query_run['run']}`: "
          + (f"trained now in {query_run['seconds']:.0f} s" if query_run["trained_now"] else "read back"))
    return (query_run,)


@app.cell
def _(DEFAULT_MODEL, ablations, budgets, cached_agent_eval, frontier, index, mo, qtag, queries, query_run,
      rar_global, rar_query_cfg, rlvr_cfg, run_folder, trajectory_cache):
    # name -> (policy spec, label: model · scale · seed, policy kwargs)
    specs = {"base (untrained)": ("local", ablations.cell_label(DEFAULT_MODEL, "untrained", "-"), {})}
    if (run_folder(rlvr_cfg) / "final").exists():
        specs["RLVR"] = (f"run:{run_folder(rlvr_cfg).name}", ablations.cell_label(rlvr_cfg.model, rlvr_cfg.preset,
                                                                             rlvr_cfg.seed, rlvr_cfg.max_steps), {})
    for _j, _cfg in rar_global.items():
        if (run_folder(_cfg) / "final").exists():
            specs[f"RaR global · judge {_j}"] = (f"run:{run_folder(_cfg).name}", ablations.cell_label(
                _cfg.model, _cfg.preset, _cfg.seed, _cfg.max_steps), {})
    specs["RaR query-specific · judge local"] = (f"run:{run_folder(rar_query_cfg).name}", ablations.cell_label(
        rar_query_cfg.model, rar_query_cfg.preset, rar_query_cfg.seed, rar_query_cfg.max_steps), {})
    if frontier is not None:
        specs[f"frontier {frontier.model}"] = (f"openai:{frontier.model}@{frontier.base_url}",
                                               f"{frontier.model} · hosted · -", {"api_key_env": frontier.api_key_env})
    trajs = {}
    for _name, (_spec, _label, _kw) in specs.items():
        with mo.status.spinner(title=f"{_name}: {len(queries)} episodes (cached ones are reused)"):
            trajs[_name] = cached_agent_eval(_spec, queries, trajectory_cache(_spec, qtag), index, budgets, **_kw)
    labels = {n: v[1] for n, v in specs.items()}
    mo.md(f"{len(specs)} agent policies on {len(queries)} held-out queries (`{qtag}`), budgets {budgets}; "
          f"frontier agent: {'included' if frontier else 'skipped (no key in the environment)'}. {query_run['run']}")
    return labels, trajs


@app.cell
def _(Judge, ablations, eval_judges, labels, mo, open_llm, trajs):
    _llms = {j: open_llm(j) for j in eval_judges}
    try:
        with mo.status.spinner(title="evaluation judges (cached judgments from notebook 06 are reused)"):
            judged = ablations.judge_scores({n: ("", t) for n, t in trajs.items()},
                                            {j: Judge(llm) for j, llm in _llms.items()}, labels)
    finally:
        for _llm in _llms.values():
            _llm.close()
    return (judged,)


@app.cell
def _(baseline_rows, bootstrap_ci, comparison_table, index, judged, labels, pd, queries, trajectory_metrics, trajs):
    _rows = []
    for _name, _ts in trajs.items():
        for _t in _ts:
            _rows.append(trajectory_metrics(_t) | {"method": _name})
    per_query = pd.concat([pd.DataFrame(_rows), baseline_rows(index, queries)], ignore_index=True)
    # judge scores: one column per evaluation judge (failed judgments left out)
    _judges = list(dict.fromkeys(judged["eval_judge"]))
    _valid = judged[~judged["fallback"]]
    _wide = (_valid.pivot_table(index=["policy", "qid"], columns="eval_judge", values="score")
             .reindex(columns=_judges).add_prefix("judge "))
    _failed = (judged.pivot_table(index=["policy", "qid"], columns="eval_judge", values="fallback", aggfunc="mean")
               .reindex(columns=_judges).add_prefix("judge failed ").astype(float))
    per_query = per_query.merge(_wide.join(_failed), left_on=["method", "qid"], right_index=True, how="left")
    _judge_cols = list(_wide.columns)
    table = comparison_table(per_query, metrics=("recall@10", "search_recall", *_judge_cols, *_failed.columns,
                                                 "tool_calls", "turns", "tokens", "seconds"))
    for _c in _judge_cols:
        table[f"{_c} 95% CI"] = [("[%.3f, %.3f]" % bootstrap_ci(g[_c].dropna().to_numpy())) if g[_c].notna().any() else ""
                                for _, g in per_query.groupby("method", sort=False)]
    table.insert(1, "model · scale · seed", [labels.get(m, "one-shot retrieval, no model") for m in table["method"]])
    return per_query, table


@app.cell
def _(atomic_write_json, config, judged, mo, per_query, plots, qtag, save, save_table, table):
    save_table(table, "07_eval")
    save_table(per_query, "07_eval_per_query")
    _fig = plots.agent_vs_baselines(per_query, title=f"Held-out evaluation ({qtag})")
    save(_fig, "07_eval.png")
    _judge_cols = [c for c in per_query.columns if c.startswith("judge ") and not c.startswith("judge failed")]
    _fig2 = plots.recall_per_policy(table, "method",
                                    title="Mean judge score per policy (0–1)", metrics=_judge_cols) if _judge_cols else None
    if _fig2 is not None:
        save(_fig2, "07_judge_scores.png")
    atomic_write_json(config.results_dir() / "07_run.json",
                      {"queries": qtag, "policies": table["method"].tolist(),
                       "judge_fallback_rate": float(judged["fallback"].mean()) if len(judged) else None})
    mo.vstack([mo.md(f"## Every policy on `{qtag}` (means; 95 % bootstrap intervals over queries)"),
               mo.ui.table(table, selection=None), _fig] + ([_fig2] if _fig2 is not None else []))
    return


if __name__ == "__main__":
    app.run()
