import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell
def _():
    import marimo as mo
    import pandas as pd

    from arxivqa import ablations, config, plots
    from arxivqa.config import secret, settings
    from arxivqa.evaluate import (baseline_rows, bootstrap_ci, cached_agent_eval, comparison_table, eval_budgets,
                                  eval_queries, trajectory_cache, trajectory_metrics)
    from arxivqa.files import atomic_write_json
    from arxivqa.index import build_for_scale
    from arxivqa.judge import opened_judges
    from arxivqa.llm import get_endpoint, load_endpoints
    from arxivqa.validity import measured_judges
    from arxivqa.plots import save, save_table
    from arxivqa.train import configured, find_run, read_run, train_or_load

    return (ablations, atomic_write_json, baseline_rows, bootstrap_ci, build_for_scale, cached_agent_eval,
            comparison_table, config, configured, eval_budgets, eval_queries, find_run, get_endpoint, load_endpoints,
            measured_judges, mo, opened_judges, pd, plots, read_run, save, save_table, secret, settings, train_or_load,
            trajectory_cache, trajectory_metrics)


@app.cell
def _(mo):
    mo.md(r"""
    # 07 · Held-out evaluation: every policy in one table

    One-shot BM25 / dense / hybrid, the untrained base model, the RLVR policy (notebook 04), the RaR
    policies with the global rubric (notebooks 05/06, one per training judge) and with query-specific
    rubrics (trained here), and — when its key is set — an OpenAI-compatible frontier agent, all on the
    same held-out queries with the same budgets: recall@10, search recall, judge scores, tool calls,
    turns, tokens, latency, with 95 % bootstrap intervals over queries. Trained policies are found by the
    run registry (by their configuration), not by folder names.

    The query file is a parameter: `ARXIVQA_EVAL_QUERIES_FILE=<any file in the queries_train.jsonl format>`
    with `ARXIVQA_EVAL_SPLIT=all` evaluates a held-out file (the CLI does the same for one policy:
    `python -m arxivqa.evaluate --policy run:<run folder> --queries <file> --split all`). Other settings:
    `ARXIVQA_EVAL_LIMIT`, `ARXIVQA_EVAL_BUDGETS`, `ARXIVQA_EVAL_JUDGES` and `ARXIVQA_TRAIN_JUDGES` (the
    defaults of the two lists below), `ARXIVQA_RAR_STEPS`, `ARXIVQA_TRAIN_STEPS`, `ARXIVQA_FRONTIER` (an
    endpoint name, used only when its key variable is set).

    Where the repository keeps a judged ablation (`results/ablation/`, `python -m arxivqa.ablations score`:
    committed held-out evaluations judged by several evaluation judges), this notebook reads it — its
    policies' per-query rows, the one-shot baselines on the same queries and index, and its judges' scores
    — instead of training and running episodes; `ARXIVQA_TRAIN_NOW=1` (as `make demo` sets) runs everything
    at the settings' scale.
    """)
    return


@app.cell
def _(ablations, mo, s):
    _options, use_kept, _why = ablations.kept_choice(s.train_now)
    kept_pick = mo.ui.dropdown(options=_options, value=_options[-1], label="committed ablation (results/ablation/)")
    mo.vstack([kept_pick, mo.md(_why)])
    return kept_pick, use_kept


@app.cell
def _(ablations, kept_pick, use_kept):
    kept_scores, kept_meta = ablations.read_ablation(kept_pick.value) if use_kept else (None, None)
    return kept_meta, kept_scores


@app.cell
def _(build_for_scale, eval_budgets, eval_queries, get_endpoint, secret, settings):
    s = settings()
    index, _ = build_for_scale()
    queries, qtag = eval_queries()
    budgets = eval_budgets()
    _frontier = get_endpoint(s.frontier)
    frontier = _frontier if _frontier.api_key_env and secret(_frontier.api_key_env) else None
    return budgets, frontier, index, qtag, queries, s


@app.cell
def _(load_endpoints, measured_judges, mo, s):
    # endpoints, and the probability judges of results/judge_validity.json (best pairwise accuracy first)
    _names = list(dict.fromkeys([*load_endpoints(), *measured_judges(), *s.train_judges, *s.eval_judges]))
    train_judges = mo.ui.multiselect(options=_names, value=s.train_judges,
                                     label="training judges (their RaR runs, global rubric, are evaluated)")
    eval_judges = mo.ui.multiselect(options=_names, value=s.eval_judges, label="evaluation judges")
    mo.vstack([train_judges, eval_judges])
    return eval_judges, train_judges


@app.cell
def _(configured, index, mo, s, train_or_load, use_kept):
    rar_query_cfg = configured("rar", s, judge_rubric="query")
    if use_kept:
        query_run = None
        _msg = "The RaR run with query-specific rubrics is the committed ablation's, if it holds one."
    else:
        with mo.status.spinner(title=f"RaR with query-specific rubrics: {rar_query_cfg.max_steps} steps (or read back)"):
            query_run = train_or_load(rar_query_cfg, index)
        _msg = (f"RaR (query-specific rubric) run `{query_run['run']}`: "
                + (f"trained now in {query_run['seconds']:.0f} s" if query_run["trained_now"] else "read back"))
    mo.md(_msg)
    return query_run, rar_query_cfg


@app.cell
def _(configured, find_run, frontier, get_endpoint, kept_meta, mo, query_run, rar_query_cfg, read_run, s,
      train_judges, use_kept):
    # name -> (policy spec, (model, steps, seed), policy kwargs); trained policies come from the run registry
    specs = ({n: (i["policy"], (i["model"], i["steps"] or 0, i["seed"]), {}) for n, i in kept_meta["policies"].items()}
             if use_kept else {"base (untrained)": ("local", (get_endpoint("local").model, 0, "-"), {})})
    _runs, _missing = {}, []
    _rlvr = None if use_kept else find_run(configured("rlvr", s, curriculum=s.curriculum))
    if _rlvr is not None:
        _runs["RLVR"] = _rlvr
    elif not use_kept:
        _missing.append("RLVR (notebook 04)")
    for _j in [] if use_kept else train_judges.value:
        _info = find_run(configured("rar", s, judge_endpoint=None if _j == "local" else _j))
        if _info is not None:
            _runs[f"RaR global · judge {_j}"] = _info
        else:
            _missing.append(f"RaR global · judge {_j} (notebooks 05/06)")
    if query_run is not None:
        _runs[f"RaR query-specific · judge {rar_query_cfg.judge_endpoint or 'local'}"] = read_run(query_run["path"])
    for _name, _info in _runs.items():
        specs[_name] = (f"run:{_info.path}", (_info.config.model, _info.steps_done, _info.config.seed), {})
    if frontier is not None and not use_kept:
        specs[f"frontier {frontier.model}"] = (s.frontier, (frontier.model, 0, "-"), {})
    mo.md("Policies: " + ", ".join(f"**{n}**" for n in specs)
          + (f". Not trained yet, so left out: {', '.join(_missing)}." if _missing else "."))
    return (specs,)


@app.cell
def _(ablations, budgets, cached_agent_eval, frontier, index, kept_meta, kept_pick, mo, plots, qtag, queries, s,
      specs, trajectory_cache, use_kept):
    trajs = {}
    if use_kept:  # episodes were run by the committed evaluations; their rows are read below
        labels = {n: i["label"] for n, i in kept_meta["policies"].items()}
        caption = ablations.kept_caption(kept_meta)
        where = f"{', '.join(kept_meta['evaluations'])} (ablation {kept_pick.value})"
        _msg = f"{len(specs)} agent policies from the committed evaluation(s) `{where}`.  \n{caption}"
    else:
        for _name, (_spec, _, _kw) in specs.items():
            with mo.status.spinner(title=f"{_name}: {len(queries)} episodes (cached ones are reused)"):
                trajs[_name] = cached_agent_eval(_spec, queries, trajectory_cache(_spec, qtag), index, budgets, **_kw)
        labels = {n: ablations.cell_label(m, s.scale, seed, steps) for n, (_, (m, steps, seed), _) in specs.items()}
        caption = plots.policy_caption({n: v[1] for n, v in specs.items()}, f"{s.scale} index")
        where = qtag
        _msg = (f"{len(specs)} agent policies on {len(queries)} held-out queries (`{qtag}`), budgets {budgets}; "
                f"frontier agent: {'included' if frontier else f'skipped (no key for `{s.frontier}` in the environment)'}.  \n"
                f"{caption}")
    mo.md(_msg)
    return caption, labels, trajs, where


@app.cell
def _(ablations, eval_judges, kept_scores, labels, mo, opened_judges, trajs, use_kept):
    if use_kept:
        judged = kept_scores
    else:
        mo.stop(not eval_judges.value, mo.md("_Choose at least one evaluation judge._"))
        with opened_judges(eval_judges.value) as _judges:  # endpoints' judges, or probability judges in this process
            with mo.status.spinner(title="evaluation judges (an endpoint's cached judgments from notebook 06 are reused)"):
                judged = ablations.judge_scores({n: ("", t) for n, t in trajs.items()}, _judges, labels)
    return (judged,)


@app.cell
def _(ablations, baseline_rows, bootstrap_ci, comparison_table, index, judged, kept_meta, labels, pd, queries,
      trajectory_metrics, trajs, use_kept):
    _rows = []
    for _name, _ts in trajs.items():
        for _t in _ts:
            _rows.append(trajectory_metrics(_t) | {"method": _name})
    per_query = (ablations.kept_per_query(kept_meta) if use_kept
                 else pd.concat([pd.DataFrame(_rows), baseline_rows(index, queries)], ignore_index=True))
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
    table.insert(1, "model · scale · steps · seed", [labels.get(m, "one-shot retrieval, no model") for m in table["method"]])
    return per_query, table


@app.cell
def _(atomic_write_json, caption, config, judged, labels, mo, per_query, plots, save, save_table, table, where):
    save_table(table, "07_eval")
    save_table(per_query, "07_eval_per_query")
    _fig = plots.agent_vs_baselines(per_query, title=f"Held-out evaluation ({where})\n{caption}")
    save(_fig, "07_eval.png")
    _judge_cols = [c for c in per_query.columns if c.startswith("judge ") and not c.startswith("judge failed")]
    _fig2 = plots.recall_per_policy(table, "method", title=f"Mean judge score per policy (0–1)\n{caption}",
                                    metrics=_judge_cols) if _judge_cols else None
    if _fig2 is not None:
        save(_fig2, "07_judge_scores.png")
    atomic_write_json(config.results_dir() / "07_run.json",
                      {"queries": where, "policies": table["method"].tolist(), "labels": labels,
                       "judge_fallback_rate": float(judged["fallback"].mean()) if len(judged) else None})
    from arxivqa.report import limits_markdown as _limits

    mo.vstack([mo.md(f"## Every policy on `{where}` (means; 95 % bootstrap intervals over queries)"),
               mo.ui.table(table, selection=None), _fig] + ([_fig2] if _fig2 is not None else [])
              + [mo.md(_limits("07"))])
    return


if __name__ == "__main__":
    app.run()
