import pandas as pd
import pytest

from arxivqa.corpus import Query
from arxivqa.evaluate import bootstrap_ci, one_shot_baselines, recall_at_k, rrf, summarize
from conftest import by_title


def test_recall_at_k():
    assert recall_at_k(["a", "b", "c"], ["a", "c", "z", "y"], 2) == 0.25
    assert recall_at_k(["a", "b", "c"], ["a", "c"]) == 1.0
    with pytest.raises(ValueError):
        recall_at_k(["a"], [])


def test_rrf_rewards_agreement():
    fused = rrf([["a", "b", "c"], ["d", "b", "c"]])
    assert fused[0] == "b" and set(fused) == {"a", "b", "c", "d"}
    assert rrf([["x", "y"]]) == ["x", "y"]


def test_bootstrap_ci_brackets_the_mean():
    lo, hi = bootstrap_ci([0.0, 1.0] * 20)
    assert lo < 0.5 < hi


def test_baselines_on_the_tiny_index(built_index, papers):
    target = by_title(papers, "Rubrics as rewards")
    queries = [
        Query(qid="q1", query="LLM judge rubric reward for reinforcement learning", gold_in_corpus=[target.arxiv_id], difficulty="easy"),
        Query(qid="q2", query="no gold here", gold_in_corpus=[], difficulty="hard"),
    ]
    per_query = one_shot_baselines(built_index, queries, ks=(1, 10), depth=10)
    assert set(per_query["method"]) == {"bm25", "dense", "hybrid"} and set(per_query["qid"]) == {"q1"}
    assert (per_query["recall@10"] == 1.0).all()
    table = summarize(per_query)
    assert set(table["difficulty"]) == {"easy", "all"}
    assert (table["n"] == 1).all()


def test_summarize_means_per_difficulty():
    df = pd.DataFrame({"qid": ["a", "b", "c"], "difficulty": ["easy", "easy", "hard"], "method": ["m"] * 3,
                       "recall@10": [1.0, 0.0, 0.5]})
    t = summarize(df).set_index("difficulty")
    assert t.loc["easy", "recall@10"] == 0.5 and t.loc["all", "n"] == 3
    assert t.loc["all", "recall@10"] == pytest.approx(0.5)
