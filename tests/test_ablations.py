"""Judge-ablation bookkeeping on small fixed inputs."""

import math

import numpy as np
import pandas as pd
import pytest

from arxivqa.ablations import (cell_label, judge_agreement, judge_scores, recall_by_training_judge, score_matrix,
                               score_recall_correlation)
from arxivqa.judge import JudgeResult


def _table(rows):
    return pd.DataFrame(rows, columns=["policy", "training_judge", "qid", "eval_judge", "score", "fallback",
                                       "recall@10", "search_recall"])


SCORES = _table([
    # policy A, trained with judge "qwen"
    ("A", "qwen", "q1", "qwen", 0.2, False, 0.0, 0.1), ("A", "qwen", "q1", "smol", 0.4, False, 0.0, 0.1),
    ("A", "qwen", "q2", "qwen", 0.6, False, 0.5, 0.5), ("A", "qwen", "q2", "smol", 0.9, True, 0.5, 0.5),
    ("A", "qwen", "q3", "qwen", 1.0, False, 1.0, 0.9), ("A", "qwen", "q3", "smol", 0.0, False, 1.0, 0.9),
    # policy B, trained with judge "smol"
    ("B", "smol", "q1", "qwen", 0.0, False, 0.0, 0.0), ("B", "smol", "q1", "smol", 0.8, False, 0.0, 0.0),
    ("B", "smol", "q2", "qwen", 0.4, False, 0.0, 0.2), ("B", "smol", "q2", "smol", 0.6, False, 0.0, 0.2),
])


def test_the_matrix_is_training_judge_by_eval_judge_without_fallbacks():
    mean, count = score_matrix(SCORES)
    assert list(mean.index) == ["qwen", "smol"] and list(mean.columns) == ["qwen", "smol"]
    assert mean.loc["qwen", "qwen"] == pytest.approx(0.6)          # (0.2 + 0.6 + 1.0) / 3
    assert mean.loc["qwen", "smol"] == pytest.approx(0.2)          # 0.9 fell back: (0.4 + 0.0) / 2
    assert mean.loc["smol", "smol"] == pytest.approx(0.7) and mean.loc["smol", "qwen"] == pytest.approx(0.2)
    assert count.loc["qwen", "smol"] == 2 and count.loc["qwen", "qwen"] == 3


def test_a_cell_with_only_fallbacks_is_missing_not_zero():
    rows = SCORES.copy()
    rows.loc[rows["training_judge"].eq("smol") & rows["eval_judge"].eq("smol"), "fallback"] = True
    mean, count = score_matrix(rows)
    assert math.isnan(mean.loc["smol", "smol"]) and count.loc["smol", "smol"] == 0


def test_recall_per_training_judge_counts_each_trajectory_once():
    out = recall_by_training_judge(SCORES).set_index("training_judge")
    assert out.loc["qwen", "n"] == 3 and out.loc["qwen", "recall@10"] == pytest.approx(0.5)
    assert out.loc["smol", "search_recall"] == pytest.approx(0.1)
    assert out.loc["smol", "recall@10 95% CI"] == "[0.000, 0.000]"


def test_score_recall_correlation_per_eval_judge():
    out = score_recall_correlation(SCORES).set_index("eval_judge")
    # qwen's valid scores 0.2, 0.6, 1.0, 0.0, 0.4 against search recall 0.1, 0.5, 0.9, 0.0, 0.2: same order
    assert out.loc["qwen", "n"] == 5 and out.loc["qwen", "spearman"] == pytest.approx(1.0)
    assert out.loc["qwen", "pearson"] == pytest.approx(np.corrcoef([0.2, 0.6, 1.0, 0.0, 0.4], [0.1, 0.5, 0.9, 0.0, 0.2])[0, 1])
    # smol: 0.4, 0.0, 0.8, 0.6 against 0.1, 0.9, 0.0, 0.2 — falls as recall rises
    assert out.loc["smol", "n"] == 4 and out.loc["smol", "spearman"] < 0


def test_correlation_of_a_constant_judge_is_undefined_and_says_why():
    rows = SCORES.assign(score=0.0)
    out = score_recall_correlation(rows).set_index("eval_judge")
    assert math.isnan(out.loc["qwen", "pearson"]) and out.loc["qwen", "note"] == "a side is constant"


def test_judge_agreement_on_shared_trajectories():
    rho, mad, n = judge_agreement(SCORES)
    assert n.loc["qwen", "smol"] == 4 and n.loc["qwen", "qwen"] == 5
    assert rho.loc["qwen", "qwen"] == 1.0 and mad.loc["qwen", "qwen"] == 0.0
    # shared valid pairs: (0.2, 0.4), (1.0, 0.0), (0.0, 0.8), (0.4, 0.6)
    assert mad.loc["qwen", "smol"] == pytest.approx((0.2 + 1.0 + 0.8 + 0.2) / 4)
    assert rho.loc["qwen", "smol"] == pytest.approx(rho.loc["smol", "qwen"])
    assert rho.loc["qwen", "smol"] == pytest.approx(pd.Series([0.2, 1.0, 0.0, 0.4]).corr(
        pd.Series([0.4, 0.0, 0.8, 0.6]), method="spearman"))


class _FixedJudge:
    """Scores by query: a stand-in for arxivqa.judge.Judge with the same score_batch contract."""

    def __init__(self, by_query, failing=()):
        self.by_query, self.failing = by_query, set(failing)

    def score_batch(self, trajs):
        return [JudgeResult(score=0.5, fallback=True, error="x") if t.query in self.failing
                else JudgeResult(score=self.by_query[t.query]) for t in trajs]


def test_judge_scores_assembles_the_long_table_from_judges():
    from test_judge import traj

    a = [traj(query="sparse attention"), traj(query="graph neural networks", submitted=None)]
    b = [traj(query="sparse attention", submitted=("2501.00002",))]
    judges = {"qwen": _FixedJudge({"sparse attention": 0.8, "graph neural networks": 0.1}),
              "smol": _FixedJudge({"sparse attention": 0.3}, failing={"graph neural networks"})}
    out = judge_scores({"A": ("qwen", a), "B": ("smol", b)}, judges, labels={"A": "A · cpu-demo · seed 0"})
    assert len(out) == 6 and set(out["eval_judge"]) == {"qwen", "smol"}
    row = out[(out.policy == "A") & (out.qid == "q") & (out.eval_judge == "smol")]
    assert row["score"].tolist() == [0.3, 0.5] and row["fallback"].tolist() == [False, True]
    # recall comes from the trajectory: A submitted the gold paper, B did not
    assert out[out.policy == "A"]["recall@10"].iloc[0] == 1.0 and out[out.policy == "B"]["recall@10"].iloc[0] == 0.0
    assert out[out.policy == "A"]["label"].iloc[0] == "A · cpu-demo · seed 0" and out[out.policy == "B"]["label"].iloc[0] == "B"
    assert score_matrix(out)[1].loc["qwen", "smol"] == 1  # the failed judgment is not counted


def test_missing_columns_are_a_clear_error():
    with pytest.raises(ValueError, match="lacks column"):
        score_matrix(pd.DataFrame({"score": [1.0]}))


def test_every_cell_states_model_scale_and_seed():
    assert cell_label("qwen2.5-coder-0.5b-instruct", "cpu-demo", 0, steps=3) == \
        "qwen2.5-coder-0.5b-instruct · cpu-demo · 3 steps · seed 0"
