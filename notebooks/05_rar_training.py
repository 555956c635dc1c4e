import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell
def _():
    from pathlib import Path

    import marimo as mo
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    from arxivqa import config
    from arxivqa.config import settings
    from arxivqa.diagnostics import load_run, rollout_choices, rollout_detail
    from arxivqa.files import atomic_write_json
    from arxivqa.index import build_for_scale
    from arxivqa.judge import Judge
    from arxivqa.llm import load_endpoints, open_llm
    from arxivqa.plots import save, save_table
    from arxivqa.records import trajectory_markdown
    from arxivqa.train import committed_runs, configured, find_run, find_runs, reward_twin, run_options, same_run, train_or_load

    return (Judge, Path, atomic_write_json, build_for_scale, committed_runs, config, configured, find_run, find_runs,
            load_endpoints,
            load_run, mo, open_llm, pd, plt, reward_twin, rollout_choices, rollout_detail, run_options, same_run, save, save_table,
            settings, sns, train_or_load,
            trajectory_markdown)


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

    **Runs here**: a RaR run kept in the repository (`results/runs/rar-*`) is read by default, next to
    the committed RLVR run it was started like; with none there, or with `ARXIVQA_TRAIN_NOW=1` (as
    `make demo` sets), the training preset of the settings is trained with `reward=rar` and the judge
    chosen below (default `ARXIVQA_JUDGE`; `local` is the packaged Qwen2.5-Coder-0.5B-Instruct behind
    `transformers serve`, offline — a 0.5B judge is coarse; the seed used frontier and open 8B+ judges).
    Then RLVR (notebook 04's run) vs. RaR on the same diagnostics, and the query-specific rubric
    (RaR-Explicit) vs. the global rubric as judges of the same rollouts. Steps: `ARXIVQA_RAR_STEPS`.
    Runs are found by the run registry (a finished run with the same configuration is read back).
    GPU: `python -m arxivqa.train --preset paper --reward rar` (Unsloth + vLLM, Qwen3-8B).
    """)
    return


@app.cell
def _(build_for_scale, settings):
    s = settings()
    index, _ = build_for_scale()
    return index, s


@app.cell
def _(load_endpoints, mo, s):
    _names = list(dict.fromkeys([*load_endpoints(), s.judge]))
    judge = mo.ui.dropdown(options=_names, value=s.judge, label="training judge of the RaR run (an endpoint)")
    mo.hstack([judge], justify="start")
    return (judge,)


@app.cell
def _(committed_runs, configured, index, judge, mo, s, train_or_load):
    rar_cfg = configured("rar", s, judge_endpoint=None if judge.value == "local" else judge.value)
    committed = committed_runs(reward="rar")  # RaR runs kept in results/runs/, finished and longest first
    if s.train_now or not committed:
        with mo.status.spinner(title=f"RaR GRPO ({rar_cfg.max_steps} steps, judge {judge.value}): train or read back"):
            rar_trained = train_or_load(rar_cfg, index)
        _msg = (f"RaR run `{rar_trained['run']}` (judge `{judge.value}`): "
                + (f"trained now in {rar_trained['seconds']:.0f} s." if rar_trained["trained_now"]
                   else "read back (the registry holds a finished run with exactly this configuration)."))
    else:
        rar_trained = {"run": None, "path": None, "trained_now": False, "seconds": 0.0}
        _msg = (f"Not training: the repository holds {len(committed)} RaR run(s) under `results/runs/`, read below. "
                f"`ARXIVQA_TRAIN_NOW=1` (as `make demo` sets) trains the configured run ({rar_cfg.preset}, "
                f"{rar_cfg.max_steps} steps, judge `{judge.value}`) instead.")
    mo.md(_msg)
    return committed, rar_trained


@app.cell
def _(committed, committed_runs, configured, find_run, find_runs, mo, rar_trained, reward_twin, run_options, s, same_run):
    _rar = run_options(find_runs(reward="rar", finished=True) + [r for r in committed if not r.finished])
    _want = rar_trained["path"] or committed[0].path  # the run trained now, else the longest committed one
    rar_pick = mo.ui.dropdown(options=_rar, label="RaR run (finished runs of the registry, and committed ones)",
                              value=next((k for k, r in _rar.items() if same_run(r, _want)), next(iter(_rar), None)))
    _rlvr_runs = find_runs(reward="rlvr", finished=True)
    if rar_trained["path"] is None:  # a committed RaR run: the committed RLVR run it was started like
        _c = committed[0].config
        _same = committed_runs(reward="rlvr", preset=_c.preset, curriculum=_c.curriculum, seed=_c.seed)
        _rlvr_runs += [r for r in _same if not r.finished]
        _match = reward_twin(_same, committed[0])  # the same warm-start build and settings, else the same start
    else:  # notebook 04's run with these settings
        _match = find_run(configured("rlvr", s, curriculum=s.curriculum))
    _rlvr = run_options(_rlvr_runs)
    rlvr_pick = mo.ui.dropdown(options=_rlvr, allow_select_none=True,
                               value=next((k for k, r in _rlvr.items() if same_run(r, _match)), None),
                               label="RLVR run to compare with (default: the RLVR run of the RaR run's settings)")
    mo.vstack([rar_pick, rlvr_pick])
    return rar_pick, rlvr_pick


@app.cell
def _(Path, atomic_write_json, config, load_run, mo, rar_pick, rar_trained, rlvr_pick, s, save_table):
    rar_info, rlvr_info = rar_pick.value, rlvr_pick.value
    rar = load_run(rar_info.path)
    rlvr = load_run(rlvr_info.path) if rlvr_info is not None else None
    save_table(rar["log"], "05_rar_trl_log")
    save_table(rar["summary"], "05_rar_step_summary")
    _fallback_rate = float(rar["rollouts"]["reward/judge_fallback"].mean()) if len(rar["rollouts"]) else float("nan")
    _this_session = rar_trained["path"] is not None and rar_info.path.resolve() == Path(rar_trained["path"]).resolve()
    atomic_write_json(config.results_dir() / "05_run.json",
                      {"run": rar_info.name, "label": rar_info.label(), "config": rar["config"],
                       "rlvr_run": rlvr_info.name if rlvr_info else None, "rollouts": len(rar["rollouts"]),
                       "judge_fallback_rate": _fallback_rate,
                       "judge_this_session": rar_trained.get("judge", {}) if _this_session else {},
                       "train_seconds_this_session": rar_trained["seconds"] if _this_session else 0.0,
                       "total_step_seconds": float(rar["timing"]["total"].sum()) if len(rar["timing"]) else None})
    _steps = rar["rollouts"]["step"].nunique() if len(rar["rollouts"]) else 0
    from arxivqa.report import limits_markdown as _limits

    mo.md(f"RaR run `{rar_info.name}` ({rar_info.label()}, {s.scale} index): {len(rar['rollouts'])} rollouts over "
          f"{_steps} step{'' if _steps == 1 else 's'}; judge fallbacks (failed judgments replaced by the batch mean): **{_fallback_rate:.1%}** of "
          "rollouts. " + (f"RLVR run `{rlvr_info.name}` ({rlvr_info.label()})." if rlvr_info is not None else
                          "_No RLVR run selected: run notebook 04 with the same settings, or pick one above._")
          + "\n\n" + _limits("05"))
    return rar, rar_info, rlvr, rlvr_info


@app.cell
def _(mo, pd, plt, rar, rar_info, rlvr, rlvr_info, s, save, save_table, sns):
    _measures = [("tool_calls", "tool calls per rollout"), ("distinct_tools", "distinct tools"), ("turns", "turns"),
                 ("search_recall", "search recall"), ("reward/total", "reward")]
    _both = pd.concat([rar["rollouts"].assign(regime="RaR")] + ([rlvr["rollouts"].assign(regime="RLVR")] if rlvr else []),
                      ignore_index=True)
    _logs = pd.concat([rar["log"].assign(regime="RaR")] + ([rlvr["log"].assign(regime="RLVR")] if rlvr else []),
                      ignore_index=True)
    fig, _axes = plt.subplots(2, 3, figsize=(13, 6.4))
    for _ax, (_col, _name) in zip(_axes.flat, _measures):
        sns.lineplot(data=_both, x="step", y=_col, hue="regime", marker="o", ax=_ax)
        _ax.set(title=_name, ylabel="")
    sns.lineplot(data=_logs, x="step", y="entropy", hue="regime", marker="o", ax=_axes.flat[5])
    _axes.flat[5].set(title="entropy (TRL)", ylabel="")
    fig.suptitle(f"RLVR vs. RaR · {s.scale} index\nRaR: {rar_info.label()}"
                 + (f"\nRLVR: {rlvr_info.label()}" if rlvr_info is not None else " (no RLVR run selected)"))
    fig.tight_layout()
    save(fig, "05_rlvr_vs_rar.png")
    _cols = ["tool_calls", "distinct_tools", "turns", "search_turns", "search_recall", "single_kw_single_sem",
             "submitted", "fm_no_exploration", "fm_rephrasing", "fm_latent_knowledge", "fm_no_reasoning_between_calls"]
    # the means over the steps both runs trained: a run kept unfinished is compared with the other's same steps
    _last = int(_both.groupby("regime")["step"].max().min())
    table = _both[_both["step"] <= _last].groupby("regime")[_cols].mean().reset_index()
    _ent = _logs[_logs["step"] <= _last].groupby("regime")["entropy"].mean().rename("entropy").reset_index()
    table = table.merge(_ent, on="regime")
    table.insert(1, "steps", f"1-{_last}")
    save_table(table, "05_rlvr_vs_rar")
    mo.vstack([mo.md(f"## RLVR vs. RaR on the same diagnostics (means over steps 1–{_last}, which "
                     f"{'both runs trained' if rlvr is not None else 'the run trained'}; the curves show every step)"),
               mo.ui.table(table, selection=None), fig])
    return


@app.cell
def _(mo, rar, save_table):
    from arxivqa.judge import CRITERIA as _criteria

    # every reading a judge can leave: the rubric's criteria and holistic, a probability judge's parts
    _names = (*_criteria, "holistic", "docs_yes", *(f"yes_{c}" for c in _criteria), "judge_score", "length_penalty")
    _crit = [f"reward/{k}" for k in _names if f"reward/{k}" in rar["rollouts"]]
    judge_by_step = rar["rollouts"].groupby("step")[_crit].mean().reset_index()
    save_table(judge_by_step, "05_judge_scores_by_step")
    mo.vstack([mo.md("## What the judge said, per step (means)"), mo.ui.table(judge_by_step, selection=None)])
    return


@app.cell
def _(config, mo, pd, save):
    # Why recall is a noisy reward, measured on the committed RLVR rollouts (`python -m arxivqa.bench
    # reward-noise --judge <judge>` writes the two files; judging every rollout takes minutes, so the
    # notebook reads the measurement instead of repeating it).
    import json as _json

    from arxivqa.plots import reward_noise as _plot

    _path, _csv = config.results_dir() / "reward_noise.json", config.results_dir() / "reward_noise_rollouts.csv"
    if _path.exists() and _csv.exists():
        _r = _json.loads(_path.read_text())
        _runs = "; ".join(f"{x['run']} ({x['model']} · {x['steps']} steps · seed {x['seed']}, {x['rollouts']} rollouts)"
                          for x in _r["runs"])
        _fig = _plot(pd.read_csv(_csv), _r, title=f"RLVR vs. the judge {_r['judge']} on the same rollouts")
        save(_fig, "05_reward_noise.png")
        _t, _v = _r["ties"], _r["variance"]

        def _pct(d):
            return f"{d['n']} ({d['share']:.0%})" if d["share"] == d["share"] else "0"

        _text = (
            f"Runs: {_runs}. Judge: `{_r['judge']}` ({_r['fallbacks']} fallbacks); two rollouts are *separated* "
            f"when their judge scores differ by ≥ {_r['margin']:.3f} (one holistic point) or a failure-mode "
            f"detector flags one and not the other.\n\n"
            f"- Of {_t['pairs']} pairs of rollouts of the same prompt and step, RLVR gives {_t['tied_pairs']} "
            f"the same reward ({_t['tied_at_zero']['pairs']} at 0, {_t['tied_above_zero']['pairs']} above 0).\n"
            f"- Of the tied pairs the judge separates {_pct(_t['tied']['judge_separates'])}, the detectors "
            f"{_pct(_t['tied']['detectors_separate'])}, either {_pct(_t['tied']['either_separates'])}; "
            f"above 0 (the same recall, found differently) the judge separates "
            f"{_pct(_t['tied_above_zero']['judge_separates'])}.\n"
            f"- Groups with reward variance (a GRPO gradient): RLVR {_pct(_v['rlvr']['nonzero_variance'])}, "
            f"RaR on the same rollouts {_pct(_v['rar']['nonzero_variance'])} of {_v['rlvr']['groups']}; mean "
            f"within-group std {_v['rlvr']['mean_std']:.3f} vs {_v['rar']['mean_std']:.3f}.\n"
            + (f"- Of those groups, the {_v['all_passed_groups']['rar']['groups']} groups whose every rollout passed the "
               f"gates, where RaR's variance is the judge's own and not a gate's 0 against its siblings: RLVR "
               f"{_pct(_v['all_passed_groups']['rlvr']['nonzero_variance'])}, RaR "
               f"{_pct(_v['all_passed_groups']['rar']['nonzero_variance'])}; mean within-group std "
               f"{_v['all_passed_groups']['rlvr']['mean_std']:.3f} vs {_v['all_passed_groups']['rar']['mean_std']:.3f}.\n"
               if "all_passed_groups" in _v else "")
            + "\n"
            + "Whether the judge's separations are *right* is the validity question of notebook 06 "
            "(`results/judge_validity.json`): a judge that separates ties at random adds variance, not signal.")
        _out = mo.vstack([mo.md("## Why recall is a noisy reward (measured)"), mo.md(_text), _fig])
    else:
        _out = mo.md("## Why recall is a noisy reward\n\n_No `results/reward_noise.json` yet: "
                     "`python -m arxivqa.bench reward-noise --judge blend:qwen2.5-coder-1.5b-instruct` (after `make "
                     "setup-judge`; any judge name works)._")
    _out
    return


@app.cell
def _(Judge, mo, open_llm, pd, rar, rar_info, rlvr, s, save_table):
    # The same rollouts judged with the global rubric and with query-specific rubrics (RaR-Explicit), by the
    # RaR run's own training judge — or, when that is a probability judge or a mean of them (it reads score-token
    # probabilities and cannot write a rubric), by the generating judge of the settings (ARXIVQA_JUDGE). The
    # query-specific side reads the committed, grounded rubrics (results/query_rubrics.json) where a query has one.
    from arxivqa.judge import in_process_judge as _in_process
    from arxivqa.judge import load_rubrics as _load_rubrics
    from arxivqa.judge import rubrics_path as _committed_path

    def _last(run, regime):
        last = max(x for x, _ in run["trajectories"])
        return [(regime, t) for x, t in run["trajectories"] if x == last]

    _run_judge = rar_info.config.judge_endpoint or "local"
    _judge_name = s.judge if _in_process(_run_judge) else _run_judge
    _pool = (_last(rar, "RaR") + (_last(rlvr, "RLVR") if rlvr is not None else []))[:8]
    _trajs = [t for _, t in _pool]
    with mo.status.spinner(title=f"judging the last step's rollouts with both rubrics ({_judge_name})"):
        with open_llm(_judge_name) as _llm:
            _glob = Judge(_llm, rubric="global").score_batch(_trajs)
            _committed = _load_rubrics(missing_ok=True)
            _expl_judge = Judge(_llm, rubric="query", rubrics=_committed)
            _expl = _expl_judge.score_batch(_trajs)
            _rubrics = {t.query: _expl_judge.query_rubric(t.query) for t in _trajs}
    _queries = {t.query for t in _trajs}
    _from_file = sum(q in _committed for q in _queries)
    rubric_cmp = pd.DataFrame([{"regime": regime, "qid": t.qid, "global": g.score, "query_specific": e.score,
                                "global_fallback": g.fallback, "query_fallback": e.fallback,
                                "tool_calls": len(t.tool_results)}
                               for (regime, t), g, e in zip(_pool, _glob, _expl)])
    save_table(rubric_cmp, "05_rubric_global_vs_query")
    _corr = rubric_cmp[["global", "query_specific"]].corr().iloc[0, 1] if len(rubric_cmp) > 2 else float("nan")
    _example = next((rb for rb in _rubrics.values() if rb is not None), None)
    mo.vstack([
        mo.md(f"## Global vs. query-specific rubric on {len(rubric_cmp)} rollouts (judge `{_judge_name}`)\n"
              + (f"The run's training judge `{_run_judge}` is a probability judge (or a mean of them), which writes no rubric: both "
                 f"rubrics are asked of the settings' judge `{_judge_name}` instead. " if _judge_name != _run_judge else "")
              + f"Pearson r = {_corr:.2f}. "
              f"Of the {len(_queries)} queries, {_from_file} have a committed rubric (`{_committed_path().name}`, grounded "
              f"in the query's reference answer); {len(_queries) - _from_file} got one written now by `{_judge_name}` "
              "from the query alone. Each is scored as Σ w·c / Σ w over the criteria the judge says are met."),
        mo.ui.table(rubric_cmp, selection=None),
        mo.md("A rubric it used:\n\n" + ("\n".join(f"- [{cr.weight}] {cr.text}" for cr in _example.criteria)
                                         if _example else "_none could be written_")),
    ])
    return


@app.cell
def _(mo, pd, save_table):
    # The committed query-specific rubrics (RaR-Explicit: `python -m arxivqa.judge rubrics`, `make rubrics`), which
    # `explicit:<model>` asks criterion by criterion: what was written for the train queries, and what it is made of.
    from arxivqa.corpus import select_queries as _select
    from arxivqa.judge import rubric_coverage as _coverage
    from arxivqa.judge import rubric_rows as _rubric_rows
    from arxivqa.judge import read_rubric_file as _read_file
    from arxivqa.judge import rubrics_path as _rubrics_path
    from arxivqa.plots import drop_table as _drop

    _file = _rubrics_path()
    rubric_file, rubric_pick = None, None
    if _file.exists():
        rubric_file = _read_file(_file)
        _rows = _rubric_rows(rubric_file, _select(split="train").queries)
        _cov = _coverage(_rows)
        rubrics_df = pd.DataFrame(_rows)
        save_table(rubrics_df.drop(columns=["first_criterion"]), "05_query_rubrics")
        _bw = ", ".join(f"{v} {k}" for k, v in _cov["by_weight"].items() if v)
        _share = _cov["quote_gold_title_share"]
        _text = (f"`{_file.name}`: written by `{rubric_file['writer']}` (references: "
                 f"`{rubric_file.get('references', 'none')}`, prompt {rubric_file.get('prompt_sha256')}). Of the "
                 f"{_cov['queries']} train queries, {_cov['written']} have a rubric, {_cov['failed']} failed and "
                 f"{_cov['not_asked']} were not asked yet. {_cov['criteria']} criteria ({_bw}); "
                 + (f"{_cov['quote_gold_title']} of them ({_share:.0%}) quote a gold paper's title — that much of "
                    "the rubric restates the gold list, so `explicit` grading leans towards a soft recall check."
                    if _share is not None else "none written."))
        _written = [r for r in _rows if r["written"]]
        if _written:
            rubric_pick = mo.ui.dropdown({f"{r['qid']}: {r['query'][:90]}": r["query"] for r in _written},
                                         value=f"{_written[0]['qid']}: {_written[0]['query'][:90]}", label="query")
        _out = mo.vstack([mo.md("## The query-specific rubrics (RaR-Explicit), as committed"), mo.md(_text),
                          mo.ui.table(rubrics_df, selection=None)] + ([rubric_pick] if rubric_pick is not None else []))
    else:
        _drop("05_query_rubrics")
        _out = mo.md("## The query-specific rubrics (RaR-Explicit)\n\n_No `results/query_rubrics.json` yet: "
                     "`make rubrics` writes one per train query._")
    _out
    return rubric_file, rubric_pick


@app.cell
def _(mo, rubric_file, rubric_pick):
    from arxivqa.judge import QueryRubric as _QueryRubric

    if rubric_pick is not None and rubric_pick.value:
        _rb = _QueryRubric.model_validate(rubric_file["rubrics"][rubric_pick.value])
        _show = mo.md(f"**{rubric_pick.value}**\n\n" + "\n".join(f"- [{c.weight}] {c.text}" for c in _rb.criteria))
    else:
        _show = mo.md("")
    _show
    return


@app.cell
def _(mo, rar, rlvr, trajectory_markdown):
    def _best_last(run):
        last = max(x for x, _ in run["trajectories"])
        rows = run["rollouts"]
        i = max(rows.index[rows["step"] == last], key=lambda k: rows.loc[k, "reward/total"])
        return mo.md(f"step {last}\n\n" + trajectory_markdown(run["trajectories"][i][1],
                                                              reward=float(rows.loc[i, "reward/total"])))

    mo.vstack([mo.md("## Example rollouts at the last step (best reward)"), mo.md("### RaR"), _best_last(rar)]
              + ([mo.md("### RLVR"), _best_last(rlvr)] if rlvr is not None else []))
    return


@app.cell
def _(mo, rlvr):
    view_regime = mo.ui.radio(options=["RaR"] + (["RLVR"] if rlvr is not None else []), value="RaR", inline=True,
                              label="run")
    mo.vstack([mo.md("## Any rollout: pick a run, a step, then a rollout"), view_regime])
    return (view_regime,)


@app.cell
def _(mo, rar, rlvr, view_regime):
    view_run = rar if view_regime.value == "RaR" else rlvr
    _steps = sorted(int(x) for x in view_run["rollouts"]["step"].unique()) if len(view_run["rollouts"]) else []
    view_step = mo.ui.slider(steps=_steps, value=_steps[-1], show_value=True, label="step") if _steps else None
    mo.hstack([view_step], justify="start") if view_step is not None else mo.md("_This run logged no rollouts._")
    return view_run, view_step


@app.cell
def _(mo, rollout_choices, view_run, view_step):
    _options, _best = rollout_choices(view_run, view_step.value if view_step is not None else None)
    view_rollout = mo.ui.dropdown(options=_options, value=_best, label="rollout (default: the step's best reward)")
    mo.hstack([view_rollout], justify="start")
    return (view_rollout,)


@app.cell
def _(mo, rollout_detail, view_rollout, view_run):
    if view_rollout.value is None:
        _out = mo.md("_No rollout at this step._")
    else:
        _text, _components = rollout_detail(view_run, view_rollout.value)
        _out = mo.vstack([mo.md(_text),
                          mo.accordion({"reward components (judge criteria, penalty, gates)":
                                        mo.ui.table(_components, selection=None)})])
    _out
    return


if __name__ == "__main__":
    app.run()
