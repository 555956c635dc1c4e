"""Retrieval metrics and the one-shot retrieval baselines (BM25, dense, hybrid RRF).

Recall is always scored against ``gold_in_corpus`` (the gold papers that the corpus holds); queries
without any such paper are left out and counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from .corpus import Query

BASELINES = ("bm25", "dense", "hybrid")
RRF_K = 60


def recall_at_k(ranked: Sequence[str], gold: Iterable[str], k: int | None = None) -> float:
    """Share of ``gold`` found in the first ``k`` of ``ranked`` (all of it when ``k`` is None)."""
    gold = set(gold)
    if not gold:
        raise ValueError("recall is undefined for an empty gold set")
    top = ranked if k is None else ranked[:k]
    return len(gold.intersection(top)) / len(gold)


def rrf(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> list[str]:
    """Reciprocal-rank fusion: score(d) = Σ 1 / (k + rank_d), ranks from 1; ties keep first-seen order."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, 1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda d: -scores[d])


def scorable(queries: Iterable[Query]) -> list[Query]:
    return [q for q in queries if q.gold_in_corpus]


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
