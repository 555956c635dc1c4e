"""Retrieval metrics and the one-shot retrieval baselines (BM25, dense, hybrid RRF).

Recall is always scored against ``gold_in_corpus`` (the gold papers that the corpus holds); queries
without any such paper are left out and counted.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from .config import settings
from .corpus import Query, scorable, select_queries
from .records import (Budgets, jaccard, load_trajectories, recall_at_k, save_trajectories,
                      search_recall, submission_recall, word_set)

BASELINES = ("bm25", "dense", "hybrid")
RRF_K = 60


def rrf(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> list[str]:
    """Reciprocal-rank fusion: score(d) = Σ 1 / (k + rank_d), ranks from 1; ties keep first-seen order."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, 1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda d: -scores[d])


def one_shot_rankings(index, query: str, depth: int = 100) -> dict[str, list[str]]:
    """The three one-shot rankings for a query: BM25, dense and their RRF fusion."""
    kw, _ = index.keyword_search(query, depth)
    dense = index.semantic_search(query, depth)
    bm25 = [h.arxiv_id for h in kw]
    dn = [h.arxiv_id for h in dense]
    return {"bm25": bm25, "dense": dn, "hybrid": rrf([bm25, dn])}


def one_shot_baselines(index, queries: Sequence[Query], ks: Sequence[int] = (10, 50), depth: int = 100,
                       rank_fn: Callable[[object, str, int], dict[str, list[str]]] = one_shot_rankings) -> pd.DataFrame:
    """One row per (query, method) with recall@k for each k, on the queries that have gold in the corpus."""
    rows = []
    for q in tqdm(scorable(queries), desc="one-shot baselines", unit="query"):
        for method, ranking in rank_fn(index, q.query, max(depth, *ks)).items():
            row = {"qid": q.qid, "difficulty": q.difficulty or "unrated", "method": method}
            for k in ks:
                row[f"recall@{k}"] = recall_at_k(ranking, q.gold_in_corpus, k)
            rows.append(row)
    return pd.DataFrame(rows)


def bootstrap_ci(values: Sequence[float], n_boot: int = 1000, alpha: float = 0.05, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    return float(np.quantile(means, alpha / 2)), float(np.quantile(means, 1 - alpha / 2))


def summarize(per_query: pd.DataFrame, metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """Mean of each metric per method and difficulty (plus 'all'), with the number of queries and a
    95 % bootstrap interval of the first metric."""
    metrics = list(metrics or [c for c in per_query.columns if c.startswith("recall@")])
    parts = [per_query, per_query.assign(difficulty="all")]
    frame = pd.concat(parts, ignore_index=True)
    rows = []
    for (method, diff), g in frame.groupby(["method", "difficulty"], sort=False):
        row = {"method": method, "difficulty": diff, "n": len(g)}
        for m in metrics:
            row[m] = float(g[m].mean())
        lo, hi = bootstrap_ci(g[metrics[0]].to_numpy())
        row[f"{metrics[0]} 95% CI"] = f"[{lo:.3f}, {hi:.3f}]"
        rows.append(row)
    order = {"easy": 0, "medium": 1, "hard": 2, "unrated": 3, "all": 4}
    out = pd.DataFrame(rows)
    out["_o"] = out["difficulty"].map(order).fillna(5)
    return out.sort_values(["method", "_o"]).drop(columns="_o").reset_index(drop=True)


# --------------------------------------------------------------------------- agent trajectories

TRAJECTORY_METRICS = ("recall@10", "search_recall", "precision", "finished", "unreadable_share", "tool_calls", "turns",
                      "distinct_tools", "distinct_queries", "query_diversity", "tokens", "seconds")


def query_diversity(queries: Sequence[str]) -> float:
    """1 − mean pairwise Jaccard similarity of the queries' word sets (0 with fewer than two)."""
    sets = [word_set(q) for q in queries if q.strip()]
    sims = [jaccard(a, b) for i, a in enumerate(sets) for b in sets[i + 1:] if a | b]
    return 1.0 - float(np.mean(sims)) if sims else 0.0


def trajectory_metrics(traj) -> dict:
    """Per-trajectory metrics; recall against the trajectory's ``gold_in_corpus``."""
    gold = set(traj.gold_in_corpus)
    submitted = list(traj.submitted or [])[:10]
    results = traj.tool_results
    queries = [r.query for r in results if r.query and not r.error]
    return {
        "qid": traj.qid, "difficulty": traj.difficulty or "unrated", "method": traj.policy,
        "recall@10": submission_recall(traj, 10), "search_recall": search_recall(traj),
        "precision": len(gold.intersection(submitted)) / len(submitted) if submitted else 0.0,
        "tool_calls": len(results), "turns": len(traj.steps),
        "distinct_tools": len({r.name for r in results}),
        "keyword_calls": sum(r.name == "keyword_search" for r in results),
        "semantic_calls": sum(r.name == "semantic_search" for r in results),
        "read_calls": sum(r.name == "read_page" for r in results),
        "tool_errors": sum(r.error for r in results),
        "distinct_queries": len({" ".join(q.lower().split()) for q in queries}),
        "query_diversity": query_diversity(queries),
        # turns whose tool calls could not be read (the agent got a parse error back)
        "unreadable_share": (sum(bool(s.assistant.parse_problems) for s in traj.steps) / len(traj.steps)
                             if traj.steps else 0.0),
        "tokens": traj.prompt_tokens + traj.completion_tokens, "completion_tokens": traj.completion_tokens,
        "seconds": traj.seconds, "tool_seconds": traj.tool_seconds, "finished": traj.stop_reason == "finished",
        "failed": failed(traj), "stop_reason": traj.stop_reason.split(":")[0],
        "trimmed_turns": len([t for t in traj.context_trims if t.trimmed]),
    }


def failed(traj) -> bool:
    """The episode ended because the policy could not answer (an endpoint error), not by its own doing."""
    return traj.stop_reason.startswith("policy_error")


def failure_line(trajs) -> str:
    """How many episodes failed and the first error, for reports ("" when none did); a failed episode
    counts with recall 0 in the tables."""
    bad = [t for t in trajs if failed(t)]
    if not bad:
        return ""
    return (f"{len(bad)} of {len(trajs)} episodes failed (policy error; counted with recall 0), e.g. "
            f"{bad[0].qid}: {bad[0].stop_reason.removeprefix('policy_error: ')[:300]}")


def baseline_rows(index, queries: Sequence[Query]) -> pd.DataFrame:
    """The one-shot baselines as rows comparable with agent trajectories (one call returns 10 papers,
    so recall@10 and search recall coincide; hybrid counts its two calls)."""
    rows = []
    for q in scorable(queries):
        for method, ranking in one_shot_rankings(index, q.query, 100).items():
            r10 = recall_at_k(ranking, q.gold_in_corpus, 10)
            rows.append({"qid": q.qid, "difficulty": q.difficulty or "unrated", "method": f"one-shot {method}",
                         "recall@10": r10, "search_recall": r10,
                         "precision": len(set(q.gold_in_corpus).intersection(ranking[:10])) / max(1, len(ranking[:10])),
                         "tool_calls": 2 if method == "hybrid" else 1, "turns": 1,
                         "distinct_tools": 2 if method == "hybrid" else 1, "distinct_queries": 1,
                         "query_diversity": 0.0, "tokens": 0, "seconds": float("nan")})
    return pd.DataFrame(rows)


def comparison_table(per_query: pd.DataFrame, metrics: Sequence[str] = TRAJECTORY_METRICS) -> pd.DataFrame:
    """Mean of each metric per method (all scorable queries), with 95 % bootstrap intervals of recall."""
    rows = []
    for method, g in per_query.groupby("method", sort=False):
        g = g[g["recall@10"].notna()]
        row = {"method": method, "n": len(g)}
        if "failed" in g:
            row["failed"] = int(g["failed"].fillna(False).astype(bool).sum())
        for m in metrics:
            if m in g:
                row[m] = float(g[m].mean())
        for m in ("recall@10", "search_recall"):
            lo, hi = bootstrap_ci(g[m].to_numpy())
            row[f"{m} 95% CI"] = f"[{lo:.3f}, {hi:.3f}]"
        rows.append(row)
    return pd.DataFrame(rows)


def episode_seed(seed: int, k: int) -> int:
    """The ID-obfuscation seed of the k-th episode of an evaluation seeded ``seed`` (``run_agent_eval``)."""
    return seed * 1_000_003 + k


def run_agent_eval(policy_spec: str, queries: Sequence[Query], index=None, concurrency: int = 1, budgets=None,
                   progress: bool = True, system_prompt: str | None = None, env_kwargs: dict | None = None,
                   batch_size: int | None = None, policy=None, context_window: int | None = None,
                   chosen_by: str = "the policy name", user_template: str | None = None, seed: int | None = 0):
    """Run the agent on each query. An in-process policy runs ``batch_size`` episodes in lockstep
    (default the setting ``eval_batch``: batched decoding, each episode's prompt prefix kept as a KV
    cache between turns; 1 = one at a time); an endpoint runs ``concurrency`` episodes at once.
    ``system_prompt``, ``user_template`` and ``env_kwargs`` (the tool view: ``result_cap``, ``abstract_chars``, ...) default
    to the agent's own; a trained policy is best evaluated with the prompt and view it was trained on
    (``run_view``). ``policy`` reuses an already loaded policy. ``context_window`` overrides the agent's
    (``Agent.window``; 0: no trimming). An endpoint policy is asked first whether its server is there
    (``llm.EndpointUnreachable`` names the URL and ``chosen_by``). ``seed``: the k-th episode's paper IDs are
    obfuscated with the salt of ``episode_seed(seed, k)`` (different in every episode, the same in every run, so
    that a seeded or greedy policy plays the same episodes twice; None: a random salt per episode). Returns the
    trajectories in query order."""
    from concurrent.futures import ThreadPoolExecutor

    from .agent import Agent, make_policy
    from .index import open_index
    from .tools import make_env

    index = index or open_index()
    agent = Agent(policy or make_policy(policy_spec), budgets or Budgets(), context_window=context_window)
    check_policy(agent.policy, chosen_by)
    if system_prompt is not None:
        agent.system_prompt = system_prompt
    if user_template is not None:
        agent.user_template = user_template
    batch_size = batch_size or settings().eval_batch

    made = itertools.count()

    def env():  # called once per episode, in query order
        return make_env(index, **({"seed": episode_seed(seed, next(made))} if seed is not None else {}),
                        **(env_kwargs or {}))

    bar = tqdm(total=len(queries), desc=f"episodes ({agent.policy.name})", unit="episode", disable=not progress)
    if hasattr(agent.policy, "chat_many") and batch_size > 1:
        out = agent.run_many(queries, env, batch_size=batch_size, progress=lambda _t: bar.update())
        bar.close()
        return out
    out = [None] * len(queries)
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        futures = {pool.submit(agent.run, q, env()): i for i, q in enumerate(queries)}
        for fut in futures:
            out[futures[fut]] = fut.result()
            bar.update()
    bar.close()
    return out


def check_policy(policy, chosen_by: str = "the policy name") -> None:
    """One reachability check of an endpoint policy before its episodes (an in-process one needs none)."""
    check = getattr(policy, "check", None)
    if check is not None:
        check(chosen_by)


def run_view(policy_spec: str) -> dict:
    """For ``run:<run>``: the system prompt, user message, tool view and budgets the run was trained with (its rollouts'
    turns and completion length), so that a trained policy is evaluated as it was trained; {} otherwise.
    ``index_spec`` and ``embedder`` name the index its rollouts searched (``index.open_index_spec``)."""
    from .agent import find_run_folder
    from .train import TrainConfig

    kind, _, rest = policy_spec.partition(":")
    if kind != "run":
        return {}
    from pathlib import Path

    return config_view(TrainConfig.model_validate_json((Path(find_run_folder(rest)) / "config.json").read_text()))


def config_view(cfg) -> dict:
    """A training config's rollout view (``train.rollout_view``) with the index its rollouts search."""
    from .train import rollout_view

    return rollout_view(cfg) | {"index_spec": cfg.index, "embedder": cfg.embedder}


def run_steps(policies: Sequence[str]) -> dict[str, int]:
    """The GRPO steps of each ``run:`` policy's adapter when it is evaluated (a run may train on later)."""
    from .agent import find_run_folder
    from .train import read_run

    return {p: read_run(find_run_folder(p.partition(":")[2])).steps_done for p in policies if p.startswith("run:")}


def heldout_of_run(run_name: str, folder=None) -> list[dict]:
    """The evaluations under ``folder`` (default ``<results>/eval``) that include the run ``run_name``
    (``python -m arxivqa.evaluate --policy run:<run> ...``), the run's latest steps first (then the newest
    file; a fresh clone's file times are those of the checkout, not of the evaluations), those that showed
    the policy another number of hits (``--result-cap``) after those with the run's own view: each its file
    name, table, bench, the run's steps at the time (``run_steps``; None for evaluations written before it)
    and ``result_cap_override``; then those of other policies seen through the run's view (``--view
    run:<run>``: its warm start, say), ``includes_run`` False. Greedy evaluations come before sampled ones
    (``--temperature``). Of evaluations at the same steps, those on the full index come first (the held-out
    comparison asked for; a run trained on the demo index is also evaluated there)."""
    import json
    from pathlib import Path

    from . import config

    folder = Path(folder) if folder else config.results_dir() / "eval"
    found = []
    for path in sorted(folder.glob("*.json"), key=lambda p: -p.stat().st_mtime) if folder.is_dir() else []:
        if path.name.endswith(".meta.json"):
            continue
        try:
            report = json.loads(path.read_text())
        except (ValueError, OSError):
            continue
        bench = report.get("bench") or {}
        specs = [p for p in bench.get("policies") or [bench.get("policy") or ""] if p.startswith("run:")]
        mine = any(same_policy(p, f"run:{run_name}") for p in specs)
        through_view = str(bench.get("view") or "").startswith("run:") and same_policy(bench["view"], f"run:{run_name}")
        if (mine or through_view) and report.get("table"):
            found.append({"file": path.name, "table": pd.DataFrame(report["table"]), "bench": bench,
                          "steps": method_steps(bench, f"run:{run_name}"),
                          "result_cap_override": bench.get("result_cap_override"), "includes_run": mine})
    # the run seen through its own tool view first (an evaluation with --result-cap is another view), then by
    # steps; evaluations of other policies through the run's view last
    return sorted(found, key=lambda f: (not f["includes_run"], f["result_cap_override"] is not None,
                                        f["bench"].get("sampling") is not None,
                                        -1 if f["steps"] is None else -f["steps"], f["bench"].get("scale") != "full"))


def eval_queries(path: str | None = None, split: str | None = None, limit: int | None = None):
    """The held-out queries of notebooks 06/07 (``corpus.select_queries``): the settings
    ``eval_queries_file`` (default the train file), ``eval_split`` (default dev) and ``eval_limit``, each
    overridable here. Returns (queries, tag) — the tag names cached trajectories of exactly this selection."""
    s = settings()
    sel = select_queries(path or s.eval_queries_file, split or s.eval_split, limit or s.eval_limit)
    if not sel.queries:
        raise ValueError("no query with a gold paper in the corpus to evaluate")
    return sel.queries, sel.tag


def eval_budgets() -> Budgets:
    """Episode budgets of notebooks 06/07: the setting ``eval_budgets`` (default the agent's own budgets)."""
    return Budgets.parse(settings().eval_budgets)


def policy_key(policy_spec: str) -> str:
    """What identifies a policy's episodes wherever the repository lies: a run by its folder's name, an
    inline endpoint without its URL, any other LLM name as it is."""
    import re as _re

    kind, _, rest = policy_spec.partition(":")
    rest = rest.split("@", 1)[0].rstrip("/").rsplit("/", 1)[-1] if kind in ("run", "openai") else rest
    return _re.sub(r"[^A-Za-z0-9._-]+", "_", f"{kind}-{rest}" if rest else kind)


def same_policy(a: str, b: str) -> bool:
    """Whether two policy names (a table's ``method``, a ``--policy`` given with a folder) are the same policy."""
    return policy_key(str(a)) == policy_key(str(b))


def method_steps(bench: dict, method: str) -> int | None:
    """The GRPO steps of the adapter behind a held-out table's row (``method`` ``run:<name>``) in that evaluation
    (its ``bench["run_steps"]``); None for another policy or an evaluation written before steps were kept."""
    if not str(method).startswith("run:"):
        return None
    return next((n for p, n in (bench.get("run_steps") or {}).items() if same_policy(p, method)), None)


def trajectory_cache(policy_spec: str, tag: str):
    """Where ``cached_agent_eval`` keeps a policy's trajectories on a query selection: under
    ``data/episodes/``, named by ``policy_key``."""
    from . import config

    return config.settings().episodes_dir / f"{policy_key(policy_spec)}.{tag}.trajectories.jsonl"


def cached_agent_eval(policy_spec: str, queries: Sequence[Query], path, index=None, budgets=None,
                      progress: bool = True, **policy_kwargs):
    """``run_agent_eval`` that keeps every finished episode in ``path`` (JSONL, rewritten atomically after
    each one) and reuses it: a rerun with the same policy and budgets only runs the missing queries, and
    an interrupted evaluation loses at most the episode in flight. Returns the trajectories in query order."""
    import dataclasses
    import json
    from pathlib import Path

    from .agent import Agent, make_policy
    from .files import atomic_write_text
    from .index import open_index
    from .tools import ArxivEnv

    budgets = budgets or Budgets()
    path, meta_path = Path(path), Path(str(path) + ".meta.json")
    meta = {"policy": policy_key(policy_spec), "budgets": dataclasses.asdict(budgets)}
    done: dict[str, object] = {}
    if path.exists() and meta_path.exists() and json.loads(meta_path.read_text()) == meta:
        # an episode the policy itself failed (endpoint down, model error) is run again, not reused
        done = {t.qid: t for t in load_trajectories(path) if not t.stop_reason.startswith("policy_error")}
    todo = [q for q in queries if q.qid not in done]
    if todo:
        index = index or open_index()
        agent = Agent(make_policy(policy_spec, **policy_kwargs), budgets)
        check_policy(agent.policy)
        atomic_write_text(meta_path, json.dumps(meta))
        bar = tqdm(total=len(todo), desc=f"episodes ({policy_spec})", unit="episode", disable=not progress)

        def keep(t) -> None:
            done[t.qid] = t
            save_trajectories(path, list(done.values()))
            bar.update()

        # each query's paper IDs obfuscated by the seed of its place in ``queries`` (run_agent_eval): the same
        # in a rerun, and in a resumed run; make_env is called once per episode, in the order of ``todo``
        places = iter([i for i, q in enumerate(queries) if q.qid not in done])

        def make_env():
            return ArxivEnv(index, seed=episode_seed(0, next(places)))

        batch = settings().eval_batch
        if hasattr(agent.policy, "chat_many") and batch > 1:
            agent.run_many(todo, make_env, batch_size=batch, progress=keep)
        else:
            for q in todo:
                keep(agent.run(q, make_env()))
        bar.close()
        del agent
    return [done[q.qid] for q in queries]


def evaluate_trajectories(trajs, index, queries: Sequence[Query], wall_seconds: float):
    """Per-query metrics of the trajectories next to the one-shot baselines on the same queries, the
    comparison table, recall per difficulty, and the throughput figures (episodes per minute, the
    share of episode time spent in tools and in generation)."""
    per_query = pd.concat([pd.DataFrame([trajectory_metrics(t) for t in trajs]), baseline_rows(index, queries)],
                          ignore_index=True)
    table = comparison_table(per_query)
    by_diff = summarize(per_query[["qid", "difficulty", "method", "recall@10", "search_recall"]], ["recall@10", "search_recall"])
    episode_seconds = sum(t.seconds for t in trajs)
    gen_seconds = sum(t.generation_seconds for t in trajs)
    bench = {"policy": trajs[0].policy if trajs else None, "episodes": len(trajs), "wall_seconds": wall_seconds,
             "episodes_per_minute": 60 * len(trajs) / wall_seconds if wall_seconds else None,
             "tool_share_of_episode_time": sum(t.tool_seconds for t in trajs) / episode_seconds if episode_seconds else None,
             "generation_share_of_episode_time": gen_seconds / episode_seconds if episode_seconds else None,
             "completion_tokens_per_second": sum(t.completion_tokens for t in trajs) / gen_seconds if gen_seconds else None,
             "stop_reasons": pd.Series([t.stop_reason.split(":")[0] for t in trajs], dtype=object).value_counts().to_dict(),
             "failed_episodes": sum(failed(t) for t in trajs),
             "context_trimmed_episodes": sum(bool(t.context_trims) for t in trajs)}
    return per_query, table, by_diff, bench


def throughput_line(bench: dict) -> str:
    """The throughput sentence of an evaluation; a figure that could not be measured (every episode
    failed before generating) reads "n/a" instead of failing the report."""
    def fmt(v, spec=".2f", scale=1.0, unit=""):
        return "n/a" if v is None else f"{v * scale:{spec}}{unit}"

    failures = bench.get("failed_episodes")
    return (f"{fmt(bench.get('episodes_per_minute'))} episodes/min; tool time "
            f"{fmt(bench.get('tool_share_of_episode_time'), '.1f', 100, ' %')} of episode time, generation "
            f"{fmt(bench.get('generation_share_of_episode_time'), '.1f', 100, ' %')}; "
            f"{fmt(bench.get('completion_tokens_per_second'), '.1f')} completion tokens/s; "
            f"stop reasons {bench.get('stop_reasons')}"
            + (f"; {failures} of {bench.get('episodes')} episodes failed" if failures else "") + ".")


def main(argv: list[str] | None = None) -> None:
    import argparse
    import dataclasses
    import time
    from pathlib import Path

    from . import config
    from .files import atomic_write_json, atomic_write_text
    from .index import open_index_spec

    ap = argparse.ArgumentParser(prog="python -m arxivqa.evaluate",
                                 description="Evaluate policies against one-shot baselines on the same queries.")
    ap.add_argument("--policy", action="append", default=None,
                    help="local[:<model>], run:<training run folder> or openai:<model>[@<base_url>]; repeat it to put "
                         "several policies in one table (default: local)")
    ap.add_argument("--view", default=None,
                    help="a training run whose system prompt, user message, tool view, budgets and index every policy "
                         "gets (default: the first run: policy's own), so that a base model is compared on its run's terms")
    ap.add_argument("--preset", default=None,
                    help="instead of --view: the rollout view of a training preset (e.g. cpu-warm-compact, whose tool "
                         "schemas no committed run has yet)")
    ap.add_argument("--queries", default=None, help="query file in the queries_train.jsonl format (default: the train file)")
    ap.add_argument("--split", choices=("dev", "train", "all"), default="dev",
                    help="which part of the query file (the deterministic stratified split); 'all' for a held-out file")
    ap.add_argument("--limit", type=int, default=None, help="first N scorable queries of the split")
    ap.add_argument("--concurrency", type=int, default=1, help="episodes at once (endpoints); keep 1 for local models")
    ap.add_argument("--batch", type=int, default=None,
                    help="episodes an in-process policy runs in lockstep (default: the setting eval_batch; 1: one at a time)")
    ap.add_argument("--max-turns", type=int, default=None, help=f"default {Budgets.max_turns}, or a run's rollout budget")
    ap.add_argument("--max-tool-calls", type=int, default=None, help=f"default {Budgets.max_tool_calls}")
    ap.add_argument("--max-tokens", type=int, default=None, help=f"default {Budgets.max_tokens}, or a run's completion length")
    ap.add_argument("--max-new-tokens", type=int, default=None, help=f"default {Budgets.max_new_tokens}")
    ap.add_argument("--context-window", type=int, default=None,
                    help="the policy's context window in tokens (default: the setting context_window, else the model "
                         "config or what the server reports); 0: no trimming")
    ap.add_argument("--index", default=None,
                    help="index folder, name or search-service URL (default: the run's index with its embedder, else "
                         "the configured scale's index)")
    ap.add_argument("--embedder", default=None,
                    help="the embedder of the index's semantic side (default: the view's; a different one changes what "
                         "semantic_search returns, so the comparison is no longer on the view's terms)")
    ap.add_argument("--result-cap", type=int, default=None,
                    help="hits a search shows (default: the view's, e.g. a run's tool_max_results): a trained policy "
                         "seen through another tool view than it was trained with")
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="sample the in-process policies' tokens at this temperature (default 0: greedy), e.g. a run's "
                         "training temperature, to see the policy as its rollouts were drawn")
    ap.add_argument("--min-p", type=float, default=None, help="with --temperature: min-p filtering, as in training")
    ap.add_argument("--seed", type=int, default=0, help="with --temperature: torch's seed before each policy's episodes")
    ap.add_argument("--name", default=None, help="output name (default: derived from the policy)")
    ap.add_argument("--out", default=None, help="folder (default: <results>/eval)")
    a = ap.parse_args(argv)
    if a.temperature < 0:
        ap.error("--temperature must be 0 (greedy) or more")
    if a.min_p is not None and a.temperature == 0:
        ap.error("--min-p needs --temperature > 0 (greedy decoding has nothing to filter)")
    if a.result_cap is not None and a.result_cap < 1:
        ap.error("--result-cap must be at least 1")
    if a.preset and a.view:
        ap.error("give --view (a run) or --preset, not both")
    policies = a.policy or ["local"]

    queries = select_queries(a.queries, a.split, a.limit).queries
    if not queries:
        raise SystemExit("no query with a gold paper in the corpus to evaluate")
    # a trained run: the prompt, tool view, budgets and index of its rollouts
    if a.preset:
        from .train import preset

        view_from, view = f"preset:{a.preset}", config_view(preset(a.preset))
    else:
        view_from = (a.view and f"run:{a.view.removeprefix('run:')}") or next((p for p in policies if p.startswith("run:")), None)
        view = run_view(view_from or "")
    if a.result_cap is not None:
        view["env_kwargs"] = {**(view.get("env_kwargs") or {}), "result_cap": a.result_cap}
    if a.embedder:
        view["embedder"] = a.embedder
    index = open_index_spec(a.index or view.get("index_spec"), embedder=view.get("embedder"))
    base = view.get("budgets") or Budgets()
    budgets = Budgets(*(given if given is not None else default for given, default in
                        zip((a.max_turns, a.max_tool_calls, a.max_tokens, a.max_new_tokens),
                            (base.max_turns, base.max_tool_calls, base.max_tokens, base.max_new_tokens))))
    name = a.name or "".join(c if c.isalnum() or c in "-._" else "_" for c in "+".join(policies))[:80]
    out = Path(a.out) if a.out else config.results_dir() / "eval"

    from .llm import EndpointUnreachable

    trajs, walls = [], {}
    sampling = {"temperature": a.temperature, "min_p": a.min_p, "seed": a.seed} if a.temperature > 0 else None
    for spec in policies:
        t0 = time.perf_counter()
        policy = None
        if sampling:
            import torch

            from .agent import make_policy

            torch.manual_seed(a.seed)
            policy = make_policy(spec, temperature=a.temperature, min_p=a.min_p)
        try:
            got = run_agent_eval(spec, queries, index, a.concurrency, budgets, batch_size=a.batch, policy=policy,
                                 system_prompt=view.get("system_prompt"), env_kwargs=view.get("env_kwargs"),
                                 context_window=a.context_window, chosen_by="--policy",
                                 user_template=view.get("user_template"))
        except EndpointUnreachable as exc:
            raise SystemExit(f"error: {exc}") from None
        walls[spec] = time.perf_counter() - t0
        trajs += got
    save_trajectories(out / f"{name}.trajectories.jsonl", trajs)
    per_query, table, by_diff, bench = evaluate_trajectories(trajs, index, queries, sum(walls.values()))
    # the index's own scale (an index given by --index named demo/full), else the configured one
    folder = getattr(index, "folder", None)
    scale = folder.name if folder is not None and folder.name in config.SCALES else config.scale()
    bench |= {"scale": scale, "queries": a.queries or "queries_train.jsonl", "split": a.split,
              "policies": policies, "view": view_from, "env_kwargs": view.get("env_kwargs"),
              "result_cap_override": a.result_cap, "sampling": sampling,
              "budgets": dataclasses.asdict(budgets), "embedder": view.get("embedder") or settings().embedder,
              "episodes_per_minute_by_policy": {p: 60 * len(queries) / w for p, w in walls.items() if w},
              "run_steps": run_steps(policies)}
    atomic_write_json(out / f"{name}.json", {"table": table.to_dict(orient="records"),
                                             "by_difficulty": by_diff.to_dict(orient="records"), "bench": bench})
    atomic_write_text(out / f"{name}.per_query.csv", per_query.to_csv(index=False))
    failures = failure_line(trajs)
    what = " vs ".join(dict.fromkeys(t.policy for t in trajs))
    md = (f"# Evaluation: {what} on {len(queries)} {a.split} queries ({scale} index"
          + (f", the view of `{bench['view']}`" if bench["view"] else "")
          + (f", sampled at temperature {a.temperature}" + (f", min-p {a.min_p}" if a.min_p else "") + f", seed {a.seed}"
             if sampling else "") + ")\n\n"
          + (f"**{failures}**\n\n" if failures else "")
          + table.to_markdown(index=False, floatfmt=".3f") + "\n\n## Recall per difficulty\n\n"
          + by_diff.to_markdown(index=False, floatfmt=".3f") + "\n\n## Throughput\n\n"
          + throughput_line(bench) + "\n")
    atomic_write_text(out / f"{name}.md", md)
    print(md)


if __name__ == "__main__":
    main()
