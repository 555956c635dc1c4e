"""Judge ablations: which *training judge*, which *evaluation judge*, and how judge scores relate to recall.

The seed trains RaR policies with several judges and evaluates every policy with several judges. Here
the bookkeeping is separate from the (slow) training and judging, so it is testable on small fixed
inputs:

- ``judge_scores(trajs, judges)`` → one long table: (policy, training judge, qid, evaluation judge,
  score, fallback, recall@10, search recall), every cell labelled with model, scale and seed.
- ``score_matrix`` → training judge × evaluation judge, mean score (fallbacks excluded, counted).
- ``recall_by_training_judge`` → recall@10 and search recall per training judge, with 95 % intervals.
- ``score_recall_correlation`` → per evaluation judge, Pearson and Spearman correlation between its
  score and recall over the same trajectories (NaN, with the reason, when a side is constant).
- ``judge_agreement`` → evaluation judge × evaluation judge, Spearman correlation and mean absolute
  difference of their scores on the same trajectories, and how many trajectories each pair shares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from .evaluate import bootstrap_ci, trajectory_metrics

SCORE_COLUMNS = ("policy", "training_judge", "qid", "eval_judge", "score", "fallback", "recall@10", "search_recall")


def cell_label(model: str, scale: str, seed: int | str, steps: int | None = None) -> str:
    """What every cell of an ablation states: model, scale (and training steps) and seed."""
    return f"{model} · {scale}{f' · {steps} steps' if steps is not None else ''} · seed {seed}"


def judge_scores(policies: Mapping[str, tuple[str, Sequence]], judges: Mapping[str, object],
                 labels: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Score every policy's trajectories with every evaluation judge.

    ``policies``: name → (training judge, trajectories); ``judges``: evaluation-judge name → an object
    with ``score_batch(trajs) -> [JudgeResult]`` (``arxivqa.judge.Judge``). A judgment that failed is
    kept with ``fallback=True`` (its score is the judge's neutral fallback, excluded from means)."""
    rows = []
    for policy, (training_judge, trajs) in policies.items():
        metrics = [trajectory_metrics(t) for t in trajs]
        for jname, judge in judges.items():
            for t, m, r in zip(trajs, metrics, judge.score_batch(list(trajs))):
                rows.append({"policy": policy, "training_judge": training_judge, "qid": t.qid, "eval_judge": jname,
                             "score": float(r.score), "fallback": bool(r.fallback), "recall@10": m["recall@10"],
                             "search_recall": m["search_recall"], "label": (labels or {}).get(policy, policy)})
    return pd.DataFrame(rows, columns=[*SCORE_COLUMNS, "label"])


def _check(scores: pd.DataFrame, needed: Sequence[str]) -> None:
    missing = [c for c in needed if c not in scores.columns]
    if missing:
        raise ValueError(f"score table lacks column(s) {missing}; expected the columns of judge_scores()")


def score_matrix(scores: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(mean score, number of valid judgments) per training judge (rows) × evaluation judge (columns);
    failed judgments are left out of the mean, so a cell of 0 judgments is NaN."""
    _check(scores, ("training_judge", "eval_judge", "score", "fallback"))
    valid = scores[~scores["fallback"].astype(bool)]
    rows, cols = list(dict.fromkeys(scores["training_judge"])), list(dict.fromkeys(scores["eval_judge"]))
    mean = valid.pivot_table(index="training_judge", columns="eval_judge", values="score", aggfunc="mean")
    count = valid.pivot_table(index="training_judge", columns="eval_judge", values="score", aggfunc="count")
    return mean.reindex(index=rows, columns=cols), count.reindex(index=rows, columns=cols).fillna(0).astype(int)


def recall_by_training_judge(scores: pd.DataFrame) -> pd.DataFrame:
    """Recall@10 and search recall per training judge (each trajectory once, whatever judged it)."""
    _check(scores, ("policy", "training_judge", "qid", "recall@10", "search_recall"))
    once = scores.drop_duplicates(["policy", "qid"])
    rows = []
    for tj, g in once.groupby("training_judge", sort=False):
        row = {"training_judge": tj, "n": len(g)}
        for m in ("recall@10", "search_recall"):
            vals = g[m].dropna().to_numpy()
            row[m] = float(vals.mean()) if len(vals) else float("nan")
            lo, hi = bootstrap_ci(vals) if len(vals) else (float("nan"), float("nan"))
            row[f"{m} 95% CI"] = f"[{lo:.3f}, {hi:.3f}]"
        rows.append(row)
    return pd.DataFrame(rows)


def _corr(a: np.ndarray, b: np.ndarray, method: str) -> tuple[float, str]:
    if len(a) < 3:
        return float("nan"), f"only {len(a)} pair(s)"
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan"), "a side is constant"
    return float(pd.Series(a).corr(pd.Series(b), method=method)), ""


def score_recall_correlation(scores: pd.DataFrame, recall: str = "search_recall") -> pd.DataFrame:
    """Per evaluation judge: Pearson and Spearman correlation of its (valid) scores with ``recall``."""
    _check(scores, ("eval_judge", "score", "fallback", recall))
    rows = []
    for ej, g in scores.groupby("eval_judge", sort=False):
        g = g[~g["fallback"].astype(bool) & g[recall].notna()]
        a, b = g["score"].to_numpy(float), g[recall].to_numpy(float)
        pearson, why = _corr(a, b, "pearson")
        spearman, _ = _corr(a, b, "spearman")
        rows.append({"eval_judge": ej, "n": len(g), "pearson": pearson, "spearman": spearman, "note": why})
    return pd.DataFrame(rows, columns=["eval_judge", "n", "pearson", "spearman", "note"])


def judge_agreement(scores: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(Spearman correlation, mean absolute score difference, number of shared trajectories) between
    every pair of evaluation judges, over the trajectories both judged validly. The diagonal is 1 / 0
    where a judge has valid scores; a correlation over fewer than 3 pairs or a constant side is NaN."""
    _check(scores, ("policy", "qid", "eval_judge", "score", "fallback"))
    valid = scores[~scores["fallback"].astype(bool)]
    wide = valid.pivot_table(index=["policy", "qid"], columns="eval_judge", values="score", aggfunc="mean")
    judges = list(dict.fromkeys(scores["eval_judge"]))
    rho = pd.DataFrame(np.nan, index=judges, columns=judges)
    mad = pd.DataFrame(np.nan, index=judges, columns=judges)
    n = pd.DataFrame(0, index=judges, columns=judges)
    for a in judges:
        for b in judges:
            if a not in wide or b not in wide:
                continue
            both = wide[[a, b]].dropna() if a != b else wide[[a]].dropna().assign(_b=wide[a])
            x, y = both.iloc[:, 0].to_numpy(float), both.iloc[:, 1].to_numpy(float)
            n.loc[a, b] = len(x)
            if len(x):
                mad.loc[a, b] = float(np.abs(x - y).mean())
                rho.loc[a, b] = 1.0 if a == b else _corr(x, y, "spearman")[0]
    return rho, mad, n


# --------------------------------------------------------------------------- why recall is a noisy reward

HOLISTIC_POINT = 1 / 9  # one point of the judge's 1–10 holistic score on the [0, 1] scale
GROUP = ("run", "step", "qid")


def rollout_pairs(frame: pd.DataFrame, reward: str = "rlvr", score: str = "judge_score",
                  margin: float = HOLISTIC_POINT, group: Sequence[str] = GROUP) -> pd.DataFrame:
    """Every pair of rollouts of the same group (the same prompt in the same GRPO step): whether the RLVR
    reward ties them, whether the judge separates them (scores at least ``margin`` apart; a fallback
    judgment separates nothing), and which failure-mode detectors (``fm_*`` columns) flag one but not the
    other. ``frame``: one row per rollout with the ``group`` columns, ``reward``, ``score``, ``fallback``
    (optional) and the ``fm_*`` flags of ``diagnostics.rollout_frame``."""
    _check(frame, (*group, reward, score))
    fms = [c for c in frame.columns if c.startswith("fm_")]
    fallback = frame["fallback"].astype(bool) if "fallback" in frame else pd.Series(False, index=frame.index)
    rows = []
    for key, g in frame.groupby(list(group), sort=False):
        idx = list(g.index)
        for n, i in enumerate(idx):
            for j in idx[n + 1:]:
                a, b = frame.loc[i], frame.loc[j]
                tied = abs(float(a[reward]) - float(b[reward])) < 1e-9
                judged = not (fallback[i] or fallback[j])
                split = [c.removeprefix("fm_") for c in fms if bool(a[c]) != bool(b[c])]
                rows.append({**dict(zip(group, key if isinstance(key, tuple) else (key,))), "a": i, "b": j,
                             "reward_a": float(a[reward]), "reward_b": float(b[reward]), "tied": tied,
                             "tied_at_zero": tied and float(a[reward]) == 0.0,
                             "score_gap": abs(float(a[score]) - float(b[score])) if judged else float("nan"),
                             "judge_separates": judged and abs(float(a[score]) - float(b[score])) >= margin,
                             "detectors_separate": bool(split), "detectors": ",".join(split)})
    cols = [*group, "a", "b", "reward_a", "reward_b", "tied", "tied_at_zero", "score_gap", "judge_separates",
            "detectors_separate", "detectors"]
    return pd.DataFrame(rows, columns=cols)


def _share(mask: pd.Series) -> dict:
    return {"n": int(mask.sum()), "share": float(mask.mean()) if len(mask) else float("nan")}


def tie_separation(pairs: pd.DataFrame) -> dict:
    """Of the pairs the RLVR reward ties (all of them, those tied at 0, those tied above 0): how many the
    judge separates, the failure-mode detectors separate, either, and both — each with its n."""
    out = {"pairs": len(pairs), "tied_pairs": int(pairs["tied"].sum())}
    for name, sub in (("tied", pairs[pairs["tied"]]), ("tied_at_zero", pairs[pairs["tied_at_zero"]]),
                      ("tied_above_zero", pairs[pairs["tied"] & ~pairs["tied_at_zero"]])):
        j, d = sub["judge_separates"].astype(bool), sub["detectors_separate"].astype(bool)
        out[name] = {"pairs": len(sub), "judge_separates": _share(j), "detectors_separate": _share(d),
                     "either_separates": _share(j | d), "both_separate": _share(j & d),
                     "by_detector": sub.loc[d, "detectors"].str.split(",").explode().value_counts().to_dict()}
    return out


def group_variance(frame: pd.DataFrame, regimes: Mapping[str, str], group: Sequence[str] = GROUP,
                   passed: str | None = None) -> pd.DataFrame:
    """Per group, the standard deviation of each regime's reward over its rollouts (``regimes``: name →
    column); a group with a non-zero std gives GRPO a gradient under that regime. With ``passed`` (a
    column, 1 where a rollout passed every gate) ``all_passed`` says whether every rollout of the group
    did: there a regime's variance is its score's own, not a gate's 0 against its siblings."""
    _check(frame, (*group, *regimes.values(), *([passed] if passed else [])))
    g = frame.groupby(list(group), sort=False)
    out = g.size().rename("rollouts").to_frame()
    for name, col in regimes.items():
        out[f"{name}_std"] = g[col].std(ddof=0)
        out[f"{name}_mean"] = g[col].mean()
    if passed:
        out["all_passed"] = g[passed].min().astype(float) >= 1.0
    return out.reset_index()


def variance_summary(groups: pd.DataFrame, regimes: Sequence[str]) -> dict:
    """Per regime: groups, the share with non-zero reward variance (its n) and the mean within-group std;
    where ``groups`` has ``all_passed``, the same over the groups whose every rollout passed the gates
    (``all_passed_groups``)."""
    def summary(gs):
        return {r: {"groups": len(gs), "nonzero_variance": _share(gs[f"{r}_std"] > 1e-9),
                    "mean_std": float(gs[f"{r}_std"].mean()) if len(gs) else float("nan")} for r in regimes}

    out = summary(groups)
    if "all_passed" in groups:
        out["all_passed_groups"] = summary(groups[groups["all_passed"]])
    return out


# --------------------------------------------------------------------------- a committed ablation
# Judging every held-out trajectory of several policies with several judges takes tens of minutes on 2 cores,
# so, like a training run, it is measured once by a command and kept in the repository
# (``results/ablation/<name>.scores.csv`` + ``<name>.json``); notebooks 06 and 07 read it unless asked to train
# and judge anew. The policies and their trajectories are those of committed held-out evaluations
# (``python -m arxivqa.evaluate ... --name <eval>`` → ``results/eval/<eval>.trajectories.jsonl``).


def ablation_dir():
    from . import config

    return config.results_dir() / "ablation"


def describe_policy(policy: str) -> dict:
    """What a held-out policy is, for the ablation's rows: a short ``name``, its ``training_judge`` (a RaR run's
    judge and rubric; the RLVR reward and curriculum; supervised fine-tuning for a warm start; nothing for a
    base model), ``model`` and ``seed``."""
    from .agent import find_run_folder
    from .models import committed_builds

    kind, _, rest = policy.partition(":")
    if kind == "run":
        from .train import read_run

        c = read_run(find_run_folder(rest)).config
        if c.reward == "rar":
            judge = f"{c.judge_endpoint or 'local'} ({c.judge_rubric})"
            return {"name": f"RaR · {c.judge_rubric}", "training_judge": judge, "model": c.model, "seed": c.seed}
        return {"name": f"RLVR · {c.curriculum}", "training_judge": f"none (RLVR reward, {c.curriculum})",
                "model": c.model, "seed": c.seed}
    if committed_builds(rest):
        return {"name": "warm start (SFT)", "training_judge": "none (warm start, SFT)", "model": rest, "seed": "-"}
    return {"name": "base (untrained)", "training_judge": "none (base model)", "model": rest or kind, "seed": "-"}


def eval_policies(evals: Sequence[str], folder=None) -> tuple[dict, dict]:
    """The policies of committed held-out evaluations ``evals`` (names under ``results/eval``, or paths
    without their suffix) and their trajectories: ``({name: (training judge, trajectories)}, {name: info})``
    with ``info`` the policy's spec, evaluation, steps, scale, label (``cell_label``) and training judge. One-shot
    baselines have no trajectory and are left out; a policy met again in a later evaluation at the same
    steps and with the same decoding (greedy, or sampled: ``evaluate --temperature``) is taken from the first."""
    import json
    from pathlib import Path

    from . import config
    from .evaluate import method_steps, policy_key
    from .records import load_trajectories

    folder = Path(folder) if folder else config.results_dir() / "eval"
    policies, info, seen = {}, {}, set()
    for ev in evals:
        base = Path(ev) if "/" in ev else folder / ev
        report_path, traj_path = base.with_name(base.name + ".json"), base.with_name(base.name + ".trajectories.jsonl")
        if not report_path.exists() or not traj_path.exists():
            raise FileNotFoundError(f"no held-out evaluation {ev!r}: expected {report_path} and {traj_path} "
                                    "(python -m arxivqa.evaluate ... --name <name>)")
        bench = json.loads(report_path.read_text()).get("bench") or {}
        by_policy: dict[str, list] = {}
        for t in load_trajectories(traj_path):
            by_policy.setdefault(t.policy, []).append(t)
        sampling = bench.get("sampling")  # evaluate --temperature: the policy's tokens were sampled, not greedy
        how = f" · sampled T{sampling['temperature']:g}" if sampling else ""
        for spec, trajs in by_policy.items():
            steps = method_steps(bench, spec)
            if (policy_key(spec), steps, how) in seen:
                continue
            seen.add((policy_key(spec), steps, how))
            d = describe_policy(spec)
            name = d["name"] + how
            name = name if name not in policies else f"{name} · {policy_key(spec)}"
            policies[name] = (d["training_judge"], trajs)
            info[name] = {"policy": spec, "evaluation": report_path.name, "steps": steps, "scale": bench.get("scale"),
                          "queries": len(trajs), "training_judge": d["training_judge"], "model": d["model"],
                          "seed": d["seed"], "trajectories_sha256": trajectories_digest(trajs),
                          "sampling": sampling,
                          "label": cell_label(d["model"], f"{bench.get('scale') or '?'} index", d["seed"], steps) + how}
    if not policies:
        raise ValueError(f"the evaluations {list(evals)} hold no agent trajectory")
    return policies, info


def trajectories_digest(trajs) -> str:
    """A fingerprint of what a judge reads of ``trajs`` (their records, in order): the same evaluation rerun
    with other episodes has another."""
    import hashlib

    h = hashlib.sha256()
    for t in trajs:
        h.update(t.model_dump_json().encode())
    return h.hexdigest()


def stale_blocks(meta: dict, info: dict, scored) -> list[str]:
    """Of the policies ``scored`` (names with kept scores), those whose kept scores are of other trajectories
    than ``info``'s (their evaluation was rerun since), or that ``meta`` keeps no fingerprint of."""
    kept = meta.get("policies") or {}
    return [n for n in dict.fromkeys(scored)
            if n in info and (kept.get(n) or {}).get("trajectories_sha256") != info[n]["trajectories_sha256"]]


def score_committed(evals: Sequence[str], judge_names: Sequence[str], name: str, out_dir=None,
                    opener=None, progress: bool = True) -> dict:
    """Score the trajectories of the committed evaluations ``evals`` with every judge of ``judge_names`` and
    keep the long table (``judge_scores``) in ``<out_dir>/<name>.scores.csv`` with what was measured in
    ``<name>.json`` (policies, labels, judges' counts and seconds per judgment). The table is written
    atomically after each (judge, policy) block, and a rerun with the same name only scores the blocks it
    lacks, so an interrupted ablation loses one block at most. ``opener``: ``judge.opened_judges`` by default."""
    import json
    import time
    from pathlib import Path

    from .files import atomic_write_json, atomic_write_text

    if opener is None:
        from .judge import opened_judges as opener
    out = Path(out_dir) if out_dir else ablation_dir()
    out.mkdir(parents=True, exist_ok=True)
    csv_path, meta_path = out / f"{name}.scores.csv", out / f"{name}.json"
    policies, info = eval_policies(evals)
    labels = {n: i["label"] for n, i in info.items()}
    done = pd.read_csv(csv_path) if csv_path.exists() else pd.DataFrame(columns=[*SCORE_COLUMNS, "label"])
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    stale = stale_blocks(meta, info, done["policy"])
    if stale:
        raise ValueError(f"the ablation {name!r} scored other trajectories of {stale} than their evaluations hold "
                         f"now (rerun since): remove {csv_path} and {meta_path} to score them again, or give "
                         "another --name")
    stats = meta.get("judges", {})
    with opener(list(judge_names)) as judges:
        for jname, judge in judges.items():
            s = stats.setdefault(jname, {"judged": 0, "fallbacks": 0, "seconds": 0.0})
            for pname, (tj, trajs) in policies.items():
                if ((done["eval_judge"] == jname) & (done["policy"] == pname)).any():
                    continue
                t0 = time.perf_counter()
                block = judge_scores({pname: (tj, trajs)}, {jname: judge}, labels)
                s["seconds"] += time.perf_counter() - t0
                s["judged"] += len(block)
                s["fallbacks"] += int(block["fallback"].sum())
                s["seconds_per_judgment"] = s["seconds"] / max(s["judged"], 1)
                done = pd.concat([done, block], ignore_index=True) if len(done) else block
                atomic_write_text(csv_path, done.to_csv(index=False))
                meta = {"name": name, "evaluations": list(evals), "judges": stats, "policies": info,
                        "eval_judges": list(judge_names), "rows": len(done)}
                atomic_write_json(meta_path, meta)
                if progress:
                    print(f"{jname} × {pname}: {len(block)} judged, {int(block['fallback'].sum())} fell back, "
                          f"{s['seconds_per_judgment']:.1f} s a judgment so far", flush=True)
    return meta


def committed_ablations(out_dir=None) -> list[str]:
    """The names of the ablations kept under ``results/ablation/`` (those with both files), newest name last."""
    from pathlib import Path

    out = Path(out_dir) if out_dir else ablation_dir()
    return sorted(p.name.removesuffix(".scores.csv") for p in out.glob("*.scores.csv")
                  if (out / p.name.replace(".scores.csv", ".json")).exists()) if out.is_dir() else []


NONE_KEPT = "(none kept)"


def kept_choice(train_now: bool, out_dir=None) -> tuple[list[str], bool, str]:
    """What notebooks 06 and 07 offer: (the kept ablations for their dropdown, newest last — ``NONE_KEPT`` alone
    when there is none; whether they read one rather than train, evaluate and judge now; what they say about it)."""
    kept = committed_ablations(out_dir)
    use = bool(kept) and not train_now
    why = ("Reading the committed ablation and its evaluations." if use else
           "Training, evaluating and judging now (`ARXIVQA_TRAIN_NOW=1`, or none is kept).")
    return kept or [NONE_KEPT], use, why


def kept_caption(meta: dict) -> str:
    """The "model · scale · steps · seed" line (``plots.policy_caption``) of a committed ablation's policies."""
    from .plots import policy_caption

    info = meta["policies"]
    return policy_caption({n: (i["model"], i["steps"] or 0, i["seed"]) for n, i in info.items()},
                          " / ".join(sorted({f"{i['scale']} index" for i in info.values()})))


def read_ablation(name: str, out_dir=None) -> tuple[pd.DataFrame, dict]:
    """(the long score table, what was measured) of a committed ablation; the table has the columns of
    ``judge_scores`` with ``fallback`` as booleans."""
    import json
    from pathlib import Path

    out = Path(out_dir) if out_dir else ablation_dir()
    scores = pd.read_csv(out / f"{name}.scores.csv")
    _check(scores, (*SCORE_COLUMNS, "label"))
    scores["fallback"] = scores["fallback"].astype(str).str.lower().isin(("true", "1"))
    return scores, json.loads((out / f"{name}.json").read_text())


def kept_per_query(meta: dict, folder=None) -> pd.DataFrame:
    """The per-query rows (``evaluate``'s ``<eval>.per_query.csv``) of a committed ablation's policies, each
    named as in the ablation, and the one-shot baselines of the first of its evaluations that has them (the
    same queries and index): the held-out table of notebook 07 without running an episode."""
    from pathlib import Path

    from . import config
    from .evaluate import same_policy

    folder = Path(folder) if folder else config.results_dir() / "eval"
    frames, baselines = [], None
    for ev in meta["evaluations"]:
        base = Path(ev) if "/" in ev else folder / ev
        table = pd.read_csv(base.with_name(base.name + ".per_query.csv"))
        for name, info in meta["policies"].items():
            if info["evaluation"] == base.name + ".json":
                frames.append(table[[same_policy(m, info["policy"]) for m in table["method"]]].assign(method=name))
        if baselines is None and table["method"].str.startswith("one-shot").any():
            baselines = table[table["method"].str.startswith("one-shot")]
    return pd.concat([*frames, *([baselines] if baselines is not None else [])], ignore_index=True)


def main(argv: Sequence[str] | None = None) -> None:
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m arxivqa.ablations",
                                 description="judge held-out trajectories of committed evaluations with several "
                                             "evaluation judges -> results/ablation/<name>.{scores.csv,json}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sc = sub.add_parser("score", help="score committed evaluations' trajectories with each judge (resumable)")
    sc.add_argument("--eval", nargs="+", required=True, dest="evals",
                    help="evaluation names under results/eval (python -m arxivqa.evaluate ... --name <name>)")
    sc.add_argument("--judges", nargs="+", required=True,
                    help="evaluation judges: probability judges (blend:<model>, docs:<model>, ...) or endpoint names")
    sc.add_argument("--name", required=True, help="the ablation's name under results/ablation/")
    args = ap.parse_args(argv)
    meta = score_committed(args.evals, args.judges, args.name)
    print(json.dumps(meta["judges"], indent=1))


if __name__ == "__main__":
    main()
