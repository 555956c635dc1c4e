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
