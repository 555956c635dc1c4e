import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell
def _():
    import typing

    import marimo as mo
    import pandas as pd

    from arxivqa import config
    from arxivqa.config import settings
    from arxivqa.evaluate import heldout_of_run, method_steps, same_policy
    from arxivqa.diagnostics import (DiagnosticsConfig, early_late, gold_by_tool, load_run, rediagnose, rollout_choices,
                                     rollout_detail, seed_verdict, signature_window, verdict_window)
    from arxivqa.files import atomic_write_json
    from arxivqa.index import build_for_scale
    from arxivqa.plots import (drop_table, failure_mode_rates, save, save_table, step_time, tool_calls_per_rollout,
                               training_curves)
    from arxivqa.records import trajectory_markdown
    from arxivqa.report import limits_markdown
    from arxivqa.train import (TrainConfig, committed_runs, configured, find_run, find_runs, read_run, run_options,
                               same_run, train_or_load, twin_run)

    return (DiagnosticsConfig, TrainConfig, atomic_write_json, build_for_scale, committed_runs, config, configured, drop_table, early_late,
            failure_mode_rates, find_run, find_runs, gold_by_tool, heldout_of_run, limits_markdown, load_run, method_steps, seed_verdict, mo, pd, read_run, rediagnose, rollout_choices, rollout_detail,
            run_options, same_policy, same_run, save,
            save_table, settings, signature_window, step_time, tool_calls_per_rollout, train_or_load, training_curves,
            trajectory_markdown, twin_run, typing, verdict_window)


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

    **What runs here** is the training preset of the settings (`ARXIVQA_PRESET`: `cpu-demo` on 2 CPU
    cores — the same algorithm with a small model, few rollouts and a short completion budget — or
    `paper` on a GPU); what exactly the run is (model, steps, rollouts, tokens, tool rounds) is read from
    the run below. Settings: `ARXIVQA_TRAIN_STEPS`, `ARXIVQA_CURRICULUM` (the default of the dropdown
    below), `ARXIVQA_COMPARE_CURRICULUM=1` also trains the other schedule and compares. A finished run
    with the same configuration is found by the run registry and read back, not retrained; a partial
    one resumes. The files under `results/` are written from the run and thresholds selected here
    (headless: the run of the settings, the default thresholds).
    """)
    return


@app.cell
def _(build_for_scale, settings):
    from arxivqa.report import counted as plural  # "1 step", "3 steps"

    s = settings()
    index, _ = build_for_scale()
    return index, plural, s


@app.cell
def _(TrainConfig, mo, s, typing):
    curricula = list(typing.get_args(TrainConfig.model_fields["curriculum"].annotation))
    curriculum = mo.ui.dropdown(options=curricula, value=s.curriculum,
                                label="curriculum of the RLVR run to train or read back")
    mo.hstack([curriculum], justify="start")
    return curricula, curriculum


@app.cell
def _(committed_runs, configured, curriculum, index, mo, s, train_or_load):
    cfg = configured("rlvr", s, curriculum=curriculum.value)
    committed = committed_runs(reward="rlvr", curriculum=curriculum.value)
    if s.train_now or not committed:
        with mo.status.spinner(title=f"GRPO ({cfg.preset}, {cfg.curriculum}, {cfg.max_steps} steps): train or read back"):
            trained = train_or_load(cfg, index)
        _msg = (f"RLVR run `{trained['run']}` ({cfg.curriculum}): "
                + (f"trained now in {trained['seconds']:.0f} s." if trained["trained_now"]
                   else "read back (the registry holds a finished run with exactly this configuration)."))
    else:
        trained = {"run": None, "path": None, "trained_now": False, "seconds": 0.0}
        _msg = (f"Not training: the repository holds {len(committed)} `{curriculum.value}` RLVR run(s) under "
                "`results/runs/`, read below. `ARXIVQA_TRAIN_NOW=1` (as `make demo` sets) also trains the configured "
                f"run ({cfg.preset}, {cfg.max_steps} steps); `make train-long` retrains the committed ones.")
    mo.md(_msg)
    return cfg, committed, trained


@app.cell
def _(committed, find_runs, mo, run_options, same_run, trained):
    _options = run_options(find_runs(reward="rlvr", finished=True) + [r for r in committed if not r.finished])
    # default: the longest committed run of this curriculum (the long run a reader came for), else the run trained now
    _want = committed[0].path if committed else trained["path"]
    _default = next((k for k, r in _options.items() if same_run(r, _want)), next(iter(_options), None))
    run_pick = mo.ui.dropdown(options=_options, value=_default, label="RLVR run to read (finished runs of the registry, and committed ones)")
    mo.hstack([run_pick], justify="start")
    return (run_pick,)


@app.cell
def _(atomic_write_json, config, limits_markdown, load_run, mo, plural, run_pick, same_run, save_table, trained):
    info = run_pick.value
    run_cfg = info.config
    run = load_run(info.path)
    save_table(run["log"], "04_trl_log")
    _t = run["timing"]
    _parts = [p for p in ["total", "generation", "generation_model", "tools", "reward", "ref_logprobs", "loss_forward",
                          "backward_optimizer", "update"] if p in _t]
    step_seconds = _t[_parts].describe().loc[["mean", "50%", "max"]].reset_index(names="stat") if len(_t) else _t
    save_table(step_seconds, "04_step_time")
    _this_session = same_run(info, trained["path"])
    atomic_write_json(config.results_dir() / "04_run.json",
                      {"run": info.name, "label": info.label(), "config": run["config"],
                       "steps_logged": info.steps_done, "rollouts": len(run["rollouts"]), "revivals": info.revivals,
                       "train_seconds_this_session": trained["seconds"] if _this_session else 0.0,
                       "total_step_seconds": float(_t["total"].sum()) if len(_t) else None})
    rollouts_per_step = run_cfg.prompts_per_step * run_cfg.num_generations
    _steps_note = (f" {plural(info.steps_done, 'step')} cannot reach the seed's step 100: read the curves as the start of the "
                   "dynamics, not its end." if info.steps_done < 100 else "")
    mo.vstack([mo.md(f"""
    ## The run
    `{info.name}`: **{run_cfg.model}**, preset `{run_cfg.preset}`, **{plural(info.steps_done, 'step')}** logged (of {run_cfg.max_steps} configured),
    {run_cfg.prompts_per_step} prompt(s) × {run_cfg.num_generations} rollouts = **{rollouts_per_step} rollouts per step**
    ({len(run['rollouts'])} in all), LoRA r {run_cfg.lora_r}, learning rate {run_cfg.learning_rate:g},
    **{run_cfg.max_completion_length} completion tokens** per rollout (tool output included),
    **{run_cfg.max_tool_calling_iterations} tool rounds**, curriculum `{run_cfg.curriculum}`, seed {run_cfg.seed}.{_steps_note}
    """), mo.md(limits_markdown("04"))])
    return info, rollouts_per_step, run, run_cfg, step_seconds


@app.cell
def _(info, s):
    run_title = f"{info.label()} · {s.scale} index"
    return (run_title,)


@app.cell
def _(mo, run, run_cfg, run_title, save, step_seconds, step_time, tool_calls_per_rollout, training_curves):
    fig_curves = training_curves(run["log"], title=f"RLVR ({run_cfg.curriculum}): {run_title}",
                                 keys=("reward", "reward_std", "signal_share", "lora_norm", "rlvr/search_recall",
                                       "entropy", "kl", "rollout/tool_calls"))
    save(fig_curves, "04_training_curves.png")
    fig_tools = tool_calls_per_rollout(run["rollouts"], title=f"Tool calls per rollout (each dot a rollout)\n{run_title}")
    save(fig_tools, "04_tool_calls_per_rollout.png")
    _mean = f"{step_seconds.loc[0, 'total']:.0f} s" if "total" in step_seconds else "time"
    fig_time = step_time(run["timing"], title=f"Where a step's {_mean} go (mean)\n{run_title}")
    save(fig_time, "04_step_time.png")
    mo.vstack([mo.md("## Training curves (TRL's logs)"), fig_curves, mo.md("## Tool calls per rollout"), fig_tools,
               mo.md("## Step time"), mo.ui.table(step_seconds, selection=None), fig_time])
    return


@app.cell
def _(DiagnosticsConfig, mo):
    # slider ranges of the detector thresholds; a field added to DiagnosticsConfig later gets a generic range
    _ranges = {"min_search_turns": (0, 6, 1), "refine_max_jaccard": (0.0, 1.0, 0.05), "min_refined_queries": (0, 5, 1),
               "latent_min_reasoning_tokens": (0, 200, 5), "latent_min_terms": (0, 10, 1),
               "latent_threshold": (0.0, 1.0, 0.05), "silent_max_words": (0, 20, 1),
               "rephrase_threshold": (0.0, 1.0, 0.05), "rephrase_min_share": (0.0, 1.0, 0.05)}
    _defaults = DiagnosticsConfig()

    def _slider(name):
        value = getattr(_defaults, name)
        start, stop, step = _ranges.get(name, (0.0, 1.0, 0.05) if isinstance(value, float) else (0, max(10, 4 * value), 1))
        return mo.ui.slider(start, stop, step, value=value, show_value=True, label=name)

    thresholds = mo.ui.dictionary({name: _slider(name) for name in DiagnosticsConfig.model_fields},
                                  label="failure-mode detector thresholds (`arxivqa.diagnostics.DiagnosticsConfig`)")
    mo.vstack([mo.md("## The collapse signature\nThe four failure-mode detectors have thresholds of our choosing "
                     "(the seed gives none); move them and the plot and tables below are recomputed."), thresholds])
    return (thresholds,)


@app.cell
def _(DiagnosticsConfig, early_late, pd, rediagnose, run, save_table, signature_window, thresholds):
    diag_cfg = DiagnosticsConfig(**thresholds.value)
    diag = rediagnose(run, diag_cfg)  # the run read once; only the measures are recomputed
    save_table(diag["summary"], "04_step_summary")
    save_table(pd.DataFrame([{"threshold": k, "value": v, "default": getattr(DiagnosticsConfig(), k)}
                             for k, v in diag_cfg.model_dump().items()]), "04_thresholds")
    n_steps = int(diag["summary"]["step"].nunique()) if len(diag["summary"]) else 0
    window = signature_window(n_steps)  # first and last never overlap (unless the run has a single step)
    signature = early_late(diag["summary"], diag["log"], window=window)
    save_table(signature, "04_signature")
    return diag, n_steps, signature, window


@app.cell
def _(diag, failure_mode_rates, mo, n_steps, plural, rollouts_per_step, run_title, save, signature, window):
    fig_fm = failure_mode_rates(diag["summary"], title=f"Failure modes and the 1 keyword + 1 semantic share\n{run_title}")
    save(fig_fm, "04_failure_modes.png")
    _overlap = (" This run has a single step, so first and last are the same step and the table cannot show a change."
                if n_steps < 2 else "")
    mo.vstack([mo.md(f"""
    The seed expects, as training goes on: reward up then flat, entropy down, fewer and less diverse tool
    calls converging on 1 keyword + 1 semantic + finish, and more of the four failure modes. The table puts
    the first {plural(window, 'step')} and the last {plural(window, 'step')} of this run's {n_steps} side by side;
    with {plural(rollouts_per_step, 'rollout')} a step, a change of a few rollouts is noise-sized.{_overlap}
    """), mo.ui.table(signature, selection=None), fig_fm])
    return


@app.cell
def _(diag, mo, n_steps, plural, save_table, seed_verdict, verdict_window):
    _window = verdict_window(n_steps)
    verdict = seed_verdict(diag["summary"], diag["log"], _window)
    save_table(verdict, "04_seed_verdict")
    if verdict.empty:
        _text = f"This run's {plural(n_steps, 'step')} are too few to compare its first and last steps with the seed."
    else:
        _counts = verdict["this run"].value_counts()
        _text = (f"Between its first and last {plural(_window, 'step')} (of {n_steps}), this run shows "
                 f"{_counts.get('as the seed', 0)} of the seed's {len(verdict)} RLVR changes beyond noise, "
                 f"{_counts.get('the opposite', 0)} the other way, and {_counts.get('no clear change', 0)} not at all. "
                 + ("The seed's plateau near step 100 and entropy collapse near step 200 lie beyond this run's "
                    f"{plural(n_steps, 'step')}." if n_steps < 200 else ""))
    mo.vstack([mo.md("## What this run reproduces of the seed, and what it does not\n" + _text),
               mo.ui.table(verdict, selection=None)])
    return


@app.cell
def _(gold_by_tool, mo, run, save_table):
    _trajs = [t for _, t in run["trajectories"]]
    by_tool = gold_by_tool(_trajs)
    save_table(by_tool, "04_gold_by_tool")
    mo.vstack([mo.md("## Which tool found the gold papers\nOver all rollouts of the run: the (rollout, gold paper) "
                     "pairs each search tool's results showed, and those only that tool showed."),
               mo.ui.table(by_tool, selection=None)])
    return


@app.cell
def _(drop_table, heldout_of_run, info, method_steps, mo, pd, plural, save_table):
    # held out: the run's adapter next to its base model on dev queries (`python -m arxivqa.evaluate`, committed)
    _found = heldout_of_run(info.name)
    if _found and _found[0]["includes_run"]:
        _h = _found[0]
        # the newest evaluation's rows, then the agent rows of earlier ones (an earlier adapter, its base model),
        # then those of other policies seen through the run's view (its warm start)
        _rows = []
        for _i, _e in enumerate(_found):
            _t = _e["table"] if _i == 0 else _e["table"][~_e["table"]["method"].str.startswith("one-shot")]
            _rows.append(_t.assign(evaluation=_e["file"], index=_e["bench"].get("scale"),
                                   steps=[method_steps(_e["bench"], m) for m in _t["method"]],
                                   hits=(f"{_e['result_cap_override']} (not the run's)" if _e["result_cap_override"]
                                         else "the run's")))
        _all = pd.concat(_rows, ignore_index=True)
        _cols = [c for c in ["method", "steps", "evaluation", "index", "hits", "n", "recall@10", "recall@10 95% CI", "search_recall",
                             "finished", "unreadable_share", "tool_calls", "distinct_tools", "turns", "tokens"] if c in _all]
        heldout = _all[_cols]
        save_table(heldout, "04_heldout")
        _b = _h["bench"]
        _when = (f"its adapter after **{plural(_h['steps'], 'step')}**"
                 + (f" (the run has {info.steps_done} now: evaluate it again for the latest)" if _h["steps"] != info.steps_done else "")
                 if _h["steps"] is not None else "its adapter at an unrecorded step")
        _out = mo.vstack([mo.md(f"""
    ## Held out: the trained policy next to its base model
    `results/eval/{_h['file']}`: {_when}, on {_b.get('episodes', 0) // max(1, len(_b.get('policies') or [1]))} `{_b.get('split')}`
    queries of `{_b.get('queries')}` ({_b.get('scale')} index, embedder `{_b.get('embedder')}`), every policy with the run's
    prompt, tool view and budgets, next to the one-shot baselines on the same queries (95 % bootstrap intervals);
    below them the agents of earlier evaluations of this run ({sum(_e["includes_run"] for _e in _found) - 1}), with the
    steps of the adapter they saw, and of other policies evaluated with the run's view (`--view`, e.g. a warm start:
    {sum(not _e["includes_run"] for _e in _found)}) on the same dev split (`hits`: the hits a search showed — the run's
    own view, or another one given by `--result-cap`).
    """), mo.ui.table(heldout, selection=None)])
    else:
        drop_table("04_heldout")  # an earlier run's table would otherwise stand beside this run's results
        _out = mo.md(f"_No held-out evaluation of `{info.name}` under `results/eval/` yet: `python -m arxivqa.evaluate "
                     f"--policy local:<base model> --policy run:<run folder> --view <run folder>`._")
    _out
    return


@app.cell
def _(mo, pd, run, run_cfg, save_table):
    _r = run["rollouts"]
    _gates = {g.removeprefix("reward/gate/"): float(_r[g].mean()) for g in _r.columns if g.startswith("reward/gate/")}
    gate_table = pd.DataFrame([{"gate": g, "pass rate": v} for g, v in _gates.items()] +
                              [{"gate": "all gates", "pass rate": float(_r["reward/gates_passed"].mean())}])
    save_table(gate_table, "04_gates")
    _zero = float(run["log"]["frac_reward_zero_std"].mean()) if "frac_reward_zero_std" in run["log"] else float("nan")
    _nonzero = float((_r["reward/total"] != 0).mean())
    mo.vstack([mo.md(f"""
    ## How much signal the reward gave
    {_nonzero:.0%} of rollouts got a non-zero reward; in {_zero:.0%} of the steps all {run_cfg.num_generations} rollouts
    of a group had the same reward, so GRPO's advantage — and the policy gradient — was zero. The gates decide this:
    a rollout that never calls `finish` (submission gate) scores 0 whatever its searches found
    (mean search recall of all rollouts: {_r['reward/search_recall'].mean():.3f}).
    """), mo.ui.table(gate_table, selection=None)])
    return


@app.cell
def _(mo, run, trajectory_markdown):
    _rows = run["rollouts"]
    _steps = sorted(_rows["step"].unique()) if len(_rows) else []
    _examples = []
    for _s in dict.fromkeys(_steps[:1] + _steps[-1:]):
        _best = max(_rows.index[_rows["step"] == _s], key=lambda i: _rows.loc[i, "reward/total"])
        _step, _traj = run["trajectories"][_best]
        _examples.append(mo.md(f"**Step {_step}** (best reward of the step)\n\n"
                               + trajectory_markdown(_traj, reward=float(_rows.loc[_best, "reward/total"]))))
    mo.vstack([mo.md("## Example rollouts: best of the first step vs. best of the last step"), *_examples])
    return


@app.cell
def _(mo, run):
    _steps = sorted(int(x) for x in run["rollouts"]["step"].unique()) if len(run["rollouts"]) else []
    step_pick = mo.ui.slider(steps=_steps, value=_steps[-1], show_value=True, label="step") if _steps else None
    (mo.vstack([mo.md("## Any rollout: pick a step, then a rollout"), step_pick]) if step_pick is not None
     else mo.md("_This run logged no rollouts._"))
    return (step_pick,)


@app.cell
def _(mo, rollout_choices, run, step_pick):
    _options, _best = rollout_choices(run, step_pick.value if step_pick is not None else None)
    rollout_pick = mo.ui.dropdown(options=_options, value=_best, label="rollout (default: the step's best reward)")
    mo.hstack([rollout_pick], justify="start")
    return (rollout_pick,)


@app.cell
def _(mo, rollout_detail, rollout_pick, run):
    if rollout_pick.value is None:
        _out = mo.md("_No rollout at this step._")
    else:
        _text, _components = rollout_detail(run, rollout_pick.value)
        _out = mo.vstack([mo.md(_text), mo.accordion({"reward components": mo.ui.table(_components, selection=None)})])
    _out
    return


@app.cell
def _(committed_runs, configured, curricula, curriculum, drop_table, find_run, heldout_of_run, index, load_run, mo, pd,
      plural, read_run, s, same_policy, save, save_table, seed_verdict, train_or_load, trained, twin_run, verdict_window):
    import matplotlib.pyplot as plt
    import seaborn as sns

    _other = next(x for x in curricula if x != curriculum.value)
    _mine, _theirs = (committed_runs(reward="rlvr", curriculum=c) for c in (curriculum.value, _other))
    _cfg2 = configured("rlvr", s, curriculum=_other)
    # the committed runs of both schedules, trained alike but for the schedule: the first committed run with such a twin
    _pair = next(((_m, _t) for _m in _mine for _t in [twin_run(_theirs, _m)] if _t is not None), None)
    # a committed pair is what a reader came for, also when a short run was trained now (make demo); only an asked-for
    # comparison (ARXIVQA_COMPARE_CURRICULUM=1 with ARXIVQA_TRAIN_NOW=1) sets the run trained now beside its new twin
    if _pair and not (s.train_now and s.compare_curriculum):
        _info1, _info2 = _pair
    else:
        if s.compare_curriculum:
            with mo.status.spinner(title=f"training the {_other} schedule for comparison (or reading it back)"):
                train_or_load(_cfg2, index)
        _info1 = read_run(trained["path"]) if trained["path"] is not None else _mine[0]
        _info2 = find_run(_cfg2)
    _run1 = load_run(_info1.path)
    if _info2 is not None:
        _run2 = load_run(_info2.path)
        # the table compares the steps both runs have (a shorter run is not set against a longer one's late steps)
        _common = min(_info1.steps_done, _info2.steps_done)
        _both = pd.concat([_run1["rollouts"].assign(schedule=curriculum.value), _run2["rollouts"].assign(schedule=_other)])
        _cmp = (_both[_both["step"] <= _common].groupby("schedule")
                [["reward/total", "reward/search_recall", "submitted", "tool_calls", "distinct_tools",
                  "single_kw_single_sem"]].mean().reset_index())
        _cmp["steps compared"] = _common
        _cmp["steps run"] = _cmp["schedule"].map({curriculum.value: _info1.steps_done, _other: _info2.steps_done})
        save_table(_cmp, "04_curriculum")
        _per_step = (_both.groupby(["schedule", "step"])["reward/search_recall"].mean().reset_index()
                     .sort_values("step"))
        _per_step["10-step mean"] = _per_step.groupby("schedule")["reward/search_recall"].transform(
            lambda x: x.rolling(10, min_periods=1).mean())
        _fig, _ax = plt.subplots(figsize=(7, 3.2))
        sns.lineplot(data=_per_step, x="step", y="10-step mean", hue="schedule", ax=_ax)
        _labels = " / ".join(dict.fromkeys([_info1.label(), _info2.label()]))
        _ax.set(title=f"Search recall of the rollouts (10-step mean): {curriculum.value} vs. {_other}\n{_labels} · {s.scale} index",
                ylabel="search recall")
        _ax.title.set_fontsize(9)
        save(_fig, "04_curriculum.png")
        # held out: each run's latest evaluation in its own view (python -m arxivqa.evaluate --policy run:<run>)
        _held = []
        for _sched, _inf in ((curriculum.value, _info1), (_other, _info2)):
            _ev = next((e for e in heldout_of_run(_inf.name) if e["includes_run"] and not e["result_cap_override"]), None)
            if _ev is not None:
                _row = _ev["table"][[same_policy(m, f"run:{_inf.name}") for m in _ev["table"]["method"]]].head(1)
                _held.append(_row.assign(schedule=_sched, steps=_ev["steps"], evaluation=_ev["file"],
                                         index=_ev["bench"].get("scale")))
        _held = pd.concat(_held, ignore_index=True) if _held else pd.DataFrame()
        if len(_held):
            _held = _held[[c for c in ["schedule", "steps", "evaluation", "index", "n", "recall@10", "recall@10 95% CI",
                                       "finished", "tool_calls", "distinct_tools"] if c in _held]]
            save_table(_held, "04_curriculum_heldout")
        else:
            drop_table("04_curriculum_heldout")
        # the seed's RLVR changes judged for both runs alike: each run's first and last steps (verdict_window)
        _verdicts = []
        for _sched, _r in ((curriculum.value, _run1), (_other, _run2)):
            _n = int(_r["summary"]["step"].nunique())
            _w = verdict_window(_n)
            _v = seed_verdict(_r["summary"], _r["log"], _w)
            if len(_v):
                _verdicts.append(_v.set_index(["measure", "seed"])["this run"].rename(
                    f"{_sched}: first vs last {plural(_w, 'step')} of {_n}"))
        _verdicts = pd.concat(_verdicts, axis=1).reset_index() if _verdicts else pd.DataFrame()
        if len(_verdicts):
            save_table(_verdicts, "04_curriculum_verdict")
        else:
            drop_table("04_curriculum_verdict")
        _out = mo.vstack([mo.md(f"## Curriculum: `{curriculum.value}` vs. `{_other}`\n"
                                f"Runs `{_info1.name}` and `{_info2.name}`; the table is the mean over the "
                                f"{plural(_common, 'step')} both have run, the figure every step each has. The "
                                "easy-to-hard run meets its easy queries first and its hard ones last, so the two "
                                "are not compared query for query."),
                          mo.ui.table(_cmp, selection=None), _fig]
                         + ([mo.md("Held out (greedy, each run's latest evaluation in its own view; the runs may be "
                                   "at different steps):"), mo.ui.table(_held, selection=None)] if len(_held) else [])
                         + ([mo.md("The seed's RLVR changes, judged for each run of the pair as the section above judges the "
                                   "run shown (as the seed / the opposite / no clear change):"),
                             mo.ui.table(_verdicts, selection=None)] if len(_verdicts) else []))
    else:
        for _stem in ("04_curriculum", "04_curriculum_heldout", "04_curriculum_verdict"):  # no pair this time: no earlier pair's tables
            drop_table(_stem)
        _t = _run1["timing"]
        _took = f" (the `{curriculum.value}` run's steps took {_t['total'].sum() / 60:.1f} min)" if len(_t) else ""
        _out = mo.md(f"_Curriculum comparison: set `ARXIVQA_COMPARE_CURRICULUM=1` to also train the `{_other}` "
                     f"schedule: another run of {plural(_cfg2.max_steps, 'step')}{_took}._")
    _out
    return


if __name__ == "__main__":
    app.run()
