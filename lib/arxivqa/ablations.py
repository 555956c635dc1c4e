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
