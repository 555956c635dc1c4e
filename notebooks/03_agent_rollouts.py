import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell
def _():
    import time

    import marimo as mo

    from arxivqa import config
    from arxivqa.agent import Agent, make_policy
    from arxivqa.config import settings
    from arxivqa.corpus import select_queries
    from arxivqa.evaluate import evaluate_trajectories
    from arxivqa.files import atomic_write_json
    from arxivqa.index import build_for_scale
    from arxivqa.plots import agent_vs_baselines, save, save_table
    from arxivqa.records import Budgets, save_trajectories, trajectory_markdown
    from arxivqa.tools import ArxivEnv

    return (Agent, ArxivEnv, Budgets, agent_vs_baselines, atomic_write_json, build_for_scale, config,
            evaluate_trajectories, make_policy, mo, save, save_table, save_trajectories, select_queries, settings,
            time, trajectory_markdown)


@app.cell
def _(mo):
    mo.md(r"""
    # 03 · The agent: rollouts and evaluation

    A ReAct agent searches with the four tools over several turns (parallel calls within a turn) and
    submits at most 10 papers with `finish`. The policy is a setting (`ARXIVQA_POLICY`): the packaged
    Qwen2.5-Coder-0.5B-Instruct in-process (`local`, the default, CPU), any endpoint of
    `configs/endpoints.toml`, `openai:<model>@<base_url>`, or a trained run (`run:<run folder>`).
    Below: a few dev-split episodes (`ARXIVQA_DEMO_EPISODES`), a trajectory viewer, and the evaluation
    against the one-shot baselines of notebook 01. A 0.5B model on 2 CPU cores writes a few tokens a
    second: expect minutes per episode.
    """)
    return


@app.cell
def _(Budgets, build_for_scale, config, select_queries, settings):
    index, _ = build_for_scale()  # reuses notebook 01's index (a rebuild adds only what is missing)
    policy_spec = settings().policy
    n_episodes = settings().demo_episodes
    budgets = Budgets(max_turns=4, max_tool_calls=12, max_tokens=1200, max_new_tokens=192)
    dev_queries = select_queries(split="dev", limit=n_episodes).queries
    scale_name = config.scale()
    return budgets, dev_queries, index, policy_spec, scale_name


@app.cell
def _(budgets, dev_queries, mo, policy_spec, scale_name):
    mo.md(f"This run: policy `{policy_spec}`, {len(dev_queries)} dev episodes on the `{scale_name}` index, budgets "
          f"{budgets.max_turns} turns · {budgets.max_tool_calls} tool calls · {budgets.max_tokens} tokens · "
          f"{budgets.max_new_tokens} new tokens a turn.")
    return


@app.cell
def _(Agent, ArxivEnv, budgets, config, dev_queries, index, make_policy, mo, policy_spec, save_trajectories, time):
    _agent = Agent(make_policy(policy_spec), budgets)
    _t0 = time.perf_counter()
    trajectories = []
    for _q in mo.status.progress_bar(dev_queries, title=f"episodes with {policy_spec}"):
        trajectories.append(_agent.run(_q, ArxivEnv(index)))
    wall_seconds = time.perf_counter() - _t0
    save_trajectories(config.results_dir() / "03_trajectories.jsonl", trajectories)
    return trajectories, wall_seconds


@app.cell
def _(mo, trajectories):
    _options = {f"{t.qid}: {t.query[:70]}": i for i, t in enumerate(trajectories)}
    pick = mo.ui.dropdown(options=_options, value=next(iter(_options), None), label="trajectory")
    mo.hstack([pick], justify="start")
    return (pick,)


@app.cell
def _(index, mo, pick, trajectories, trajectory_markdown):
    if trajectories and pick.value is not None:
        _t = trajectories[pick.value]
        _gold, _seen, _submitted = set(_t.gold_in_corpus), _t.seen_ids(), list(_t.submitted or [])
        _ids = sorted(_gold | set(_submitted))
        _papers = index.docs.get_many(_ids)
        _rows = [{"arxiv_id": pid, "title": _papers[pid].title if pid in _papers else "?", "gold": pid in _gold,
                  "seen in a tool result": pid in _seen, "submitted": pid in _submitted} for pid in _ids]
        _out = mo.vstack([
            mo.md(trajectory_markdown(_t)),
            mo.md(f"{_t.completion_tokens} tokens written · {_t.seconds:.0f} s"),
            mo.accordion({f"raw model output, turn {st.turn}": mo.plain_text(st.assistant.raw[:1500]) for st in _t.steps}),
            mo.md("**Found vs. gold**"), mo.ui.table(_rows, selection=None),
        ])
    else:
        _out = mo.md("_No trajectory._")
    _out
    return


@app.cell
def _(agent_vs_baselines, atomic_write_json, config, dev_queries, evaluate_trajectories, index, mo, policy_spec, save,
      save_table, scale_name, trajectories, wall_seconds):
    per_query, eval_table, eval_by_difficulty, agent_bench = evaluate_trajectories(trajectories, index, dev_queries, wall_seconds)
    agent_bench |= {"scale": scale_name, "split": "dev"}
    save_table(eval_table, "03_eval")
    save_table(per_query, "03_eval_per_query")
    atomic_write_json(config.results_dir() / "bench_agent.json", agent_bench)
    _fig = agent_vs_baselines(per_query, title=f"{trajectories[0].policy if trajectories else policy_spec} (greedy) · "
                                               f"{len(trajectories)} dev queries · {scale_name} index")
    save(_fig, "03_eval.png")
    mo.vstack([
        mo.md(f"""
    ## Evaluation on {len(trajectories)} dev queries ({scale_name} index)
    Throughput: **{agent_bench['episodes_per_minute']:.2f} episodes/min**; tools take
    **{100 * (agent_bench['tool_share_of_episode_time'] or 0):.1f} %** of episode time (target ≤ 10 %),
    generation {100 * (agent_bench['generation_share_of_episode_time'] or 0):.1f} %
    ({agent_bench['completion_tokens_per_second'] or 0:.1f} tokens/s). Stop reasons: {agent_bench['stop_reasons']}.
    For a full evaluation: `python -m arxivqa.evaluate --policy local --limit 20`.
    """),
        mo.ui.table(eval_table, selection=None),
        _fig,
    ])
    return


if __name__ == "__main__":
    app.run()
