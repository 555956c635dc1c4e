import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell
def _():
    import marimo as mo

    from arxivqa import ablations, config, plots
    from arxivqa.config import settings
    from arxivqa.evaluate import cached_agent_eval, eval_budgets, eval_queries, trajectory_cache
    from arxivqa.files import atomic_write_json
    from arxivqa.index import build_for_scale
    from arxivqa.judge import opened_judges
    from arxivqa.llm import get_endpoint, load_endpoints
    from arxivqa.validity import measured_judges
    from arxivqa.plots import save, save_table
    from arxivqa.train import configured, find_run, read_run, train_or_load

    return (ablations, atomic_write_json, build_for_scale, cached_agent_eval, config, configured, eval_budgets,
            eval_queries, find_run, get_endpoint, load_endpoints, measured_judges, mo, opened_judges, plots, read_run,
            save, save_table, settings, train_or_load, trajectory_cache)


@app.cell
def _(mo):
    mo.md(r"""
    # 06 · Judge ablations: training judge × evaluation judge

    The seed trains RaR policies with different **training judges** and scores every policy with
    different **evaluation judges**: does a policy only please the judge it was trained with, do judges
    agree, and does a judge's score track recall? Here every training judge chosen below gets a RaR run
    (the training preset of the settings; a finished run with the same configuration — notebook 05's for
    `local` — is found by the run registry and reused), every policy — plus the untrained base model and
    notebook 04's RLVR policy as references — runs the same held-out queries, and every evaluation judge
    scores every trajectory (the same compact, defanged rendering as in training; an endpoint's judgments
    are cached, so notebook 07 reuses them; a probability judge scores again).

    The judges are endpoint names of `configs/endpoints.toml` or probability judges run in this process
    (`blend:<model>`, `expected:<model>`, `docs:<model>`, ...; those measured in
    `results/judge_validity.json` are offered below, best first); the defaults of the two lists below come
    from `ARXIVQA_TRAIN_JUDGES` and `ARXIVQA_EVAL_JUDGES` (`local` and `local-smollm2`: the packaged
    Qwen2.5-Coder-0.5B and SmolLM2-135M, both offline — any OpenAI-compatible judge such as an Olmo or
    GLM model on vLLM, or a hosted one, is one more name). Other settings: `ARXIVQA_RAR_STEPS`,
    `ARXIVQA_TRAIN_STEPS` (which runs to read), `ARXIVQA_EVAL_QUERIES_FILE`, `ARXIVQA_EVAL_SPLIT`,
    `ARXIVQA_EVAL_LIMIT`, `ARXIVQA_EVAL_BUDGETS`.

    Training RaR policies and judging every held-out trajectory takes hours on 2 cores, so an ablation is
    also measured once by a command and kept in the repository, like the training runs:
    `python -m arxivqa.ablations score --eval <committed evaluations> --judges <judges> --name <name>` judges
    the trajectories of committed held-out evaluations (`results/eval/`) with each evaluation judge and keeps
    the scores in `results/ablation/<name>.scores.csv`. Where one is kept, this notebook reads it (picked
    below); `ARXIVQA_TRAIN_NOW=1` (as `make demo` sets) trains, evaluates and judges at the settings' scale
    instead.
    """)
    return


@app.cell
def _(ablations, mo, s):
    _options, use_kept, _why = ablations.kept_choice(s.train_now)
    kept_pick = mo.ui.dropdown(options=_options, value=_options[-1], label="committed ablation (results/ablation/)")
    mo.vstack([kept_pick, mo.md(_why)])
    return kept_pick, use_kept


@app.cell
def _(build_for_scale, eval_budgets, eval_queries, settings):
    s = settings()
    index, _ = build_for_scale()
    queries, qtag = eval_queries()
    budgets = eval_budgets()
    return budgets, index, qtag, queries, s


@app.cell
def _(load_endpoints, measured_judges, mo, s):
    # endpoints, and the probability judges of results/judge_validity.json (best pairwise accuracy first)
    _names = list(dict.fromkeys([*load_endpoints(), *measured_judges(), *s.train_judges, *s.eval_judges]))
    train_judges = mo.ui.multiselect(options=_names, value=s.train_judges, label="training judges (one RaR run each)")
    eval_judges = mo.ui.multiselect(options=_names, value=s.eval_judges, label="evaluation judges")
    mo.vstack([train_judges, eval_judges])
    return eval_judges, train_judges


@app.cell
def _(configured, index, mo, s, train_judges, train_or_load, use_kept):
    trained = {}
    for _j in [] if use_kept else train_judges.value:
        _cfg = configured("rar", s, judge_endpoint=None if _j == "local" else _j)
        with mo.status.spinner(title=f"RaR with training judge {_j}: {_cfg.max_steps} steps (or read back)"):
            trained[_j] = train_or_load(_cfg, index)
    mo.md("Training runs: " + (", ".join(f"`{v['run']}` ({'trained now, %.0f s' % v['seconds'] if v['trained_now'] else 'read back'})"
                                         for v in trained.values()) or "_none (no training judge chosen)_"))
    return (trained,)


@app.cell
def _(ablations, configured, find_run, get_endpoint, read_run, s, trained, use_kept):
    # name -> (training judge, policy spec, (model, steps, seed)); trained policies are found by the run registry
    specs = {} if use_kept else {"base (untrained)": ("none (base model)", "local", (get_endpoint("local").model, 0, "-"))}
    _runs = {}
    _rlvr = None if use_kept else find_run(configured("rlvr", s, curriculum=s.curriculum))
    if _rlvr is not None:
        _runs["RLVR"] = ("none (RLVR reward)", _rlvr)
    for _j, _t in trained.items():
        _runs[f"RaR · judge {_j}"] = (_j, read_run(_t["path"]))
    for _name, (_tj, _info) in _runs.items():
        specs[_name] = (_tj, f"run:{_info.path}", (_info.config.model, _info.steps_done, _info.config.seed))
    labels = {n: ablations.cell_label(m, s.scale, seed, steps) for n, (_, _, (m, steps, seed)) in specs.items()}
    return labels, specs


@app.cell
def _(ablations, budgets, cached_agent_eval, index, kept_pick, mo, plots, qtag, queries, s, specs,
      trajectory_cache, use_kept):
    policies = {}
    for _name, (_tj, _spec, _) in specs.items():
        with mo.status.spinner(title=f"{_name}: {len(queries)} episodes (cached ones are reused)"):
            policies[_name] = (_tj, cached_agent_eval(_spec, queries, trajectory_cache(_spec, qtag), index, budgets))
    if use_kept:
        kept_scores, kept_meta = ablations.read_ablation(kept_pick.value)
        _info = kept_meta["policies"]
        caption = ablations.kept_caption(kept_meta)
        _evals = ", ".join(f"`{e}`" for e in kept_meta["evaluations"])
        _sizes = ", ".join(f"{n}: {i['queries']} queries" for n, i in _info.items())
        _msg = (f"Committed ablation `{kept_pick.value}`: {len(_info)} policies from the held-out evaluation(s) {_evals} "
                f"({_sizes}), judged by {len(kept_meta['judges'])} evaluation judges.  \n{caption}")
    else:
        kept_scores, kept_meta = None, None
        caption = plots.policy_caption({n: v[2] for n, v in specs.items()}, f"{s.scale} index")
        _msg = f"{len(policies)} policies × {len(queries)} held-out queries (`{qtag}`), budgets {budgets}.  \n{caption}"
    mo.md(_msg)
    return caption, kept_meta, kept_scores, policies


@app.cell
def _(ablations, eval_judges, kept_meta, kept_scores, labels, mo, opened_judges, policies, use_kept):
    if use_kept:
        scores, judge_stats = kept_scores, kept_meta["judges"]
        labels_used = {n: i["label"] for n, i in kept_meta["policies"].items()}
    else:
        mo.stop(not eval_judges.value, mo.md("_Choose at least one evaluation judge._"))
        with opened_judges(eval_judges.value) as _judges:  # endpoints' judges, or probability judges in this process
            with mo.status.spinner(title=f"{len(_judges)} evaluation judges × {sum(len(t) for _, t in policies.values())} trajectories"):
                scores = ablations.judge_scores(policies, _judges, labels)
            judge_stats = {j: {"judged": jd.judged, "fallbacks": jd.fallbacks,
                               **({"llm": jd.llm.stats.as_dict()} if hasattr(jd, "llm") else {})}
                           for j, jd in _judges.items()}
        labels_used = labels
    return judge_stats, labels_used, scores


@app.cell
def _(ablations, caption, mo, plots, save, save_table, scores):
    mean, count = ablations.score_matrix(scores)
    _fig = plots.judge_matrix(mean, count, title=f"Mean judge score (0–1): training judge × evaluation judge\n{caption}")
    save(_fig, "06_judge_matrix.png")
    save_table(mean.reset_index(), "06_judge_matrix")
    by_tj = ablations.recall_by_training_judge(scores)
    save_table(by_tj, "06_recall_by_training_judge")
    _fig2 = plots.recall_per_policy(by_tj, "training_judge", title=f"Recall per training judge (held-out queries)\n{caption}")
    save(_fig2, "06_recall_by_training_judge.png")
    mo.vstack([mo.md("## Training judge × evaluation judge (mean score; n = valid judgments)"), _fig,
               mo.md("## Recall per training judge"), mo.ui.table(by_tj, selection=None), _fig2])
    return by_tj, count, mean


@app.cell
def _(ablations, caption, mo, plots, save, save_table, scores):
    corr = ablations.score_recall_correlation(scores)
    save_table(corr, "06_score_recall_correlation")
    _fig = plots.score_vs_recall(scores, title=f"Judge score vs. search recall (each trajectory)\n{caption}")
    save(_fig, "06_score_vs_recall.png")
    rho, mad, n_shared = ablations.judge_agreement(scores)
    _fig2 = plots.judge_matrix(rho, n_shared, title=f"Judge agreement: Spearman ρ on the same trajectories\n{caption}",
                               xlabel="evaluation judge", ylabel="evaluation judge", center=0.0)
    save(_fig2, "06_judge_agreement.png")
    save_table(rho.reset_index(names="eval_judge"), "06_judge_agreement_spearman")
    save_table(mad.reset_index(names="eval_judge"), "06_judge_agreement_mean_abs_diff")
    mo.vstack([mo.md("## Does a judge's score track recall?"), mo.ui.table(corr, selection=None), _fig,
               mo.md("## Do the judges agree?"), _fig2,
               mo.md("Mean absolute score difference:"), mo.ui.table(mad.reset_index(names="eval_judge"), selection=None)])
    return corr, rho


@app.cell
def _(atomic_write_json, config, corr, eval_judges, judge_stats, kept_meta, kept_pick, labels_used, mo, qtag,
      save_table, scores, train_judges, trained, use_kept):
    save_table(scores, "06_judge_scores")
    if use_kept:  # the committed ablation: its evaluations and the largest number of queries a policy ran
        _queries = f"{', '.join(kept_meta['evaluations'])} · {max(i['queries'] for i in kept_meta['policies'].values())}"
        _tj = list(dict.fromkeys(i["training_judge"] for i in kept_meta["policies"].values()))
        _ej = kept_meta["eval_judges"]
    else:
        _queries, _tj, _ej = qtag, train_judges.value, eval_judges.value
    atomic_write_json(config.results_dir() / "06_run.json",
                      {"queries": _queries, "policies": labels_used, "train_judges": _tj, "eval_judges": _ej,
                       "ablation": kept_pick.value if use_kept else None,
                       "training": {j: {k: v for k, v in t.items() if k != "path"} for j, t in trained.items()},
                       "judges": judge_stats, "fallback_rate": float(scores["fallback"].mean()) if len(scores) else None,
                       "correlation": corr.to_dict(orient="records")})
    _fb = scores.groupby("eval_judge")["fallback"].mean()
    from arxivqa.report import limits_markdown as _limits

    mo.md("Failed judgments (explicit fallbacks, left out of every mean): "
          + (", ".join(f"{j} {v:.0%}" for j, v in _fb.items()) or "none") + ". Each policy: "
          + "; ".join(f"**{n}** = {lab}" for n, lab in labels_used.items()) + "\n\n" + _limits("06"))
    return


@app.cell
def _(config, mo, save_table):
    # measured outside this notebook (CPU-heavy): `python -m arxivqa.validity measure --judges ...` and
    # `python -m arxivqa.bench judge-safety --judge ...`; shown here when they exist
    import json as _json

    from arxivqa.validity import validity_table

    _vpath, _spath = config.results_dir() / "judge_validity.json", config.results_dir() / "judge_safety.json"
    _parts = [mo.md("## Can the judge grade? (validity set)")]
    if _vpath.exists():
        _report = _json.loads(_vpath.read_text())
        _table = validity_table(_report)
        save_table(_table, "06_judge_validity")
        _parts += [mo.md(f"Pairs of real train-split episodes whose order is known by construction: "
                         f"{_report['set']['kinds']}; pool of {_report['set']['pool']} policy rollouts."),
                   mo.ui.table(_table, selection=None)]
    else:
        _parts.append(mo.md("_No `results/judge_validity.json` yet: `python -m arxivqa.validity build`, then "
                            "`python -m arxivqa.validity measure --judges local expected:<model> yesno:<model>`._"))
    if _spath.exists():
        _safety = _json.loads(_spath.read_text())
        _lines = [f"- {name}: {r['caught']} / {r['attacks']} payloads caught, {r['altered']} / {r['legit']} "
                  f"legitimate texts altered" for name, r in _safety["redaction"].items()]
        if "judge" in _safety:
            _j = _safety["judge"]
            _lines += [f"- score shift with `{_j['judge']}` over {_j[k]['pairs']} payload × trajectory pairs, {k.replace('_', ' ')}: "
                       f"mean {_j[k]['mean_shift']:+.3f}, max {_j[k]['max_shift']:+.3f}, raised {_j[k]['raised']}"
                       for k in ("with_defence", "without_defence") if _j[k]["pairs"]]
        _parts += [mo.md("## Injection defence (`results/judge_safety.json`)\n\n" + "\n".join(_lines))]
    mo.vstack(_parts)
    return


if __name__ == "__main__":
    app.run()
