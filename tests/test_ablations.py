"""Judge-ablation bookkeeping on small fixed inputs."""

import math

import numpy as np
import pandas as pd
import pytest

from arxivqa.ablations import (HOLISTIC_POINT, cell_label, group_variance, judge_agreement, judge_scores,
                               recall_by_training_judge, rollout_pairs, score_matrix, score_recall_correlation,
                               tie_separation, variance_summary)
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


def _rollouts(rows):
    return pd.DataFrame(rows, columns=["run", "step", "qid", "rlvr", "judge_score", "fallback", "fm_rephrasing",
                                       "fm_no_exploration"])


NOISE = _rollouts([
    # group 1: three rollouts RLVR ties at 0; the judge sees 0.1 vs 0.5 vs 0.15, a detector flags the third
    ("r", 1, "q1", 0.0, 0.10, False, False, False), ("r", 1, "q1", 0.0, 0.50, False, False, False),
    ("r", 1, "q1", 0.0, 0.15, False, True, False),
    # group 2: two rollouts tied above 0; the second judgment failed (it separates nothing)
    ("r", 2, "q2", 0.4, 0.90, False, False, False), ("r", 2, "q2", 0.4, 0.10, True, False, True),
    # group 3: rewards differ
    ("r", 3, "q3", 0.0, 0.30, False, False, False), ("r", 3, "q3", 0.5, 0.30, False, False, False),
])


def test_pairs_are_within_a_group_and_say_who_separates_an_rlvr_tie():
    pairs = rollout_pairs(NOISE, "rlvr", "judge_score")
    assert len(pairs) == 3 + 1 + 1  # never across groups
    g1 = pairs[pairs.qid == "q1"].set_index(["a", "b"])
    assert g1["tied_at_zero"].all()
    assert g1.loc[(0, 1), "judge_separates"] and not g1.loc[(0, 2), "judge_separates"]  # 0.05 < one holistic point
    assert g1.loc[(0, 2), "detectors"] == "rephrasing" and not g1.loc[(0, 1), "detectors_separate"]
    g2 = pairs[pairs.qid == "q2"].iloc[0]
    assert g2["tied"] and not g2["tied_at_zero"] and not g2["judge_separates"] and math.isnan(g2["score_gap"])
    assert g2["detectors"] == "no_exploration"
    assert not pairs[pairs.qid == "q3"].iloc[0]["tied"]


def test_tie_separation_counts_with_their_n():
    out = tie_separation(rollout_pairs(NOISE, "rlvr", "judge_score", margin=HOLISTIC_POINT))
    assert out["pairs"] == 5 and out["tied_pairs"] == 4
    assert out["tied_at_zero"]["pairs"] == 3 and out["tied_above_zero"]["pairs"] == 1
    t = out["tied"]
    # judge: (0,1) and (1,2) of group 1; detectors: (0,2), (1,2) of group 1 and the pair of group 2
    assert t["judge_separates"] == {"n": 2, "share": 0.5} and t["detectors_separate"]["n"] == 3
    assert t["either_separates"]["n"] == 4 and t["both_separate"]["n"] == 1
    assert t["by_detector"] == {"rephrasing": 2, "no_exploration": 1}


def _rows_csv(tmp_path, rows):
    path = tmp_path / "rows.csv"
    rows.to_csv(path, index=False)
    return path


def test_group_variance_per_regime():
    frame = NOISE.assign(rar=[0.1, 0.5, 0.15, 0.9, 0.1, 0.3, 0.3])
    groups = group_variance(frame, {"rlvr": "rlvr", "rar": "rar"})
    assert "all_passed" not in groups and "all_passed_groups" not in variance_summary(groups, ("rar",))
    # with the gates: groups 1 and 3 passed throughout, group 2 had a failure
    gated = group_variance(frame.assign(ok=[1, 1, 1, 0, 1, 1, 1]), {"rlvr": "rlvr", "rar": "rar"}, passed="ok")
    assert gated["all_passed"].tolist() == [True, False, True]
    within = variance_summary(gated, ("rlvr", "rar"))["all_passed_groups"]
    assert within["rar"]["groups"] == 2 and within["rar"]["nonzero_variance"]["n"] == 1  # group 1 only
    assert within["rlvr"]["nonzero_variance"]["n"] == 1  # group 3
    assert groups["rollouts"].tolist() == [3, 2, 2]
    assert groups["rlvr_std"].tolist()[:2] == [0.0, 0.0] and groups["rlvr_std"].iloc[2] == pytest.approx(0.25)
    assert groups["rar_std"].iloc[2] == 0.0 and groups["rar_std"].iloc[1] == pytest.approx(0.4)
    v = variance_summary(groups, ("rlvr", "rar"))
    assert v["rlvr"]["nonzero_variance"] == {"n": 1, "share": pytest.approx(1 / 3)}
    assert v["rar"]["nonzero_variance"]["n"] == 2


def test_reward_noise_measured_on_a_run_folder(tmp_path):
    """The driver reads a run folder as arxivqa.train writes it, scores every rollout with the judge,
    and writes the report and the per-rollout table."""
    import json

    from test_judge import traj

    from arxivqa.bench import bench_reward_noise
    from arxivqa.train import TrainConfig

    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    (run / "config.json").write_text(TrainConfig(reward="rlvr", max_steps=1).model_dump_json())
    trajs = [traj(query="a"), traj(query="b"), traj(query="c", submitted=None)]
    rows = [{"step": 1, "reward": {"total": 0.5}, "trajectory": t.model_dump(mode="json")} for t in trajs]
    (run / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "results"
    out.mkdir()
    report = bench_reward_noise("fixed", [str(run)], out_dir=out,
                                judge=_FixedJudge({"a": 0.9, "b": 0.2, "c": 0.5}))
    assert report["rollouts"] == 3 and report["groups"] == 1 and report["ties"]["tied_pairs"] == 3
    assert report["ties"]["tied"]["judge_separates"]["n"] == 3  # 0.9 / 0.2 / 0.5: every gap ≥ 1/9
    table = pd.read_csv(out / "reward_noise_rollouts.csv")
    assert table["judge_score"].tolist() == [0.9, 0.2, 0.5]
    # RaR: the judge's score behind the same gates: the unfinished rollout fails the submission gate
    assert table["rar"].iloc[2] < table["rar"].iloc[1] < table["rar"].iloc[0]
    assert json.loads((out / "reward_noise.json").read_text())["variance"]["rar"]["nonzero_variance"]["n"] == 1
    assert (out / "reward_noise.png").stat().st_size > 0
    assert table["gates_passed"].tolist() == [1.0, 1.0, 0.0]
    # the one group has a rollout that failed a gate: no group where the variance is the judge's alone
    assert report["variance"]["all_passed_groups"]["rar"]["groups"] == 0
    # the scores read back from the table: the same report, no judge asked
    again = tmp_path / "again"
    again.mkdir()
    read = bench_reward_noise("fixed", [str(run)], out_dir=again, scores=out / "reward_noise_rollouts.csv")
    assert json.dumps(read["ties"]) == json.dumps(report["ties"])  # NaN shares compare as text
    assert json.dumps(read["variance"]) == json.dumps(report["variance"])
    assert read["scores_read_from"] == "reward_noise_rollouts.csv"
    with pytest.raises(ValueError, match="does not hold the scores"):
        bench_reward_noise("fixed", [str(run)], out_dir=again, scores=_rows_csv(tmp_path, table.iloc[:2]))


def test_the_reward_noise_figure_reads_the_measurement():
    from arxivqa.plots import reward_noise

    frame = NOISE.assign(rar=[0.1, 0.5, 0.15, 0.9, 0.1, 0.3, 0.3])
    report = {"ties": tie_separation(rollout_pairs(NOISE, "rlvr", "judge_score"))}
    fig = reward_noise(frame, report, title="run · 3 steps · seed 0")
    left, right = fig.axes[:2]
    assert left.get_title() == "3 groups" and fig._suptitle.get_text() == "run · 3 steps · seed 0"
    labels = [t.get_text() for t in right.get_xticklabels()]
    assert labels == ["tied at 0 (n=3)", "tied above 0 (n=1)"]
    assert [t.get_text() for t in right.get_legend().get_texts()] == ["judge", "detectors", "either"]
    heights = sorted(round(p.get_height(), 3) for p in right.patches if p.get_height() > 0)
    assert heights == sorted([round(2 / 3, 3), round(2 / 3, 3), 1.0, 1.0, 1.0])  # judge 2/3, detectors 2/3, either 1 | 0, 1, 1


def _committed_eval(tmp_path):
    """A held-out evaluation as arxivqa.evaluate writes it: a base model's and a RaR run's trajectories."""
    import json

    from test_judge import traj

    from arxivqa.records import save_trajectories
    from arxivqa.train import TrainConfig

    run = tmp_path / "runs" / "rar-r"
    run.mkdir(parents=True)
    (run / "config.json").write_text(TrainConfig(reward="rar", judge_endpoint="blend:m", judge_rubric="global",
                                                 model="some-base", max_steps=3).model_dump_json())
    spec = f"run:{run}"
    base = [traj(query="a").model_copy(update={"policy": "local:some-base", "qid": "q1"}),
            traj(query="b", submitted=None).model_copy(update={"policy": "local:some-base", "qid": "q2"})]
    rar = [t.model_copy(update={"policy": spec}) for t in base]
    folder = tmp_path / "eval"
    folder.mkdir()
    (folder / "ev.json").write_text(json.dumps({"table": [], "bench": {
        "scale": "demo", "policies": ["local:some-base", spec], "run_steps": {spec: 3}}}))
    save_trajectories(folder / "ev.trajectories.jsonl", base + rar)
    pd.DataFrame([{"qid": q, "method": m, "recall@10": r, "tool_calls": c}
                  for q, m, r, c in [("q1", "local:some-base", 1.0, 1), ("q2", "local:some-base", 0.0, 1),
                                     ("q1", "run:rar-r", 0.5, 3), ("q2", "run:rar-r", 0.0, 2),
                                     ("q1", "one-shot bm25", 0.25, 1), ("q2", "one-shot bm25", 0.0, 1)]]
                 ).to_csv(folder / "ev.per_query.csv", index=False)
    return folder


def _opener(calls, judges):
    from contextlib import contextmanager

    @contextmanager
    def opener(names):
        class Counting:
            def __init__(self, name):
                self.name = name

            def score_batch(self, trajs):
                calls.append((self.name, len(trajs)))
                return judges[self.name].score_batch(trajs)

        yield {n: Counting(n) for n in names}

    return opener


def test_a_committed_ablation_scores_each_block_once_and_reads_back(tmp_path):
    from arxivqa.ablations import (NONE_KEPT, committed_ablations, eval_policies, kept_choice, kept_per_query,
                                   read_ablation, score_committed)

    folder = _committed_eval(tmp_path)
    policies, info = eval_policies([str(folder / "ev")])
    # the RaR run is named by its rubric, trained by its judge; the packaged model is the untrained base
    assert info["RaR · global"]["training_judge"] == "blend:m (global)" and info["RaR · global"]["steps"] == 3
    assert info["base (untrained)"]["training_judge"] == "none (base model)"
    assert info["RaR · global"]["label"] == "some-base · demo index · 3 steps · seed 0"
    judges = {"j1": _FixedJudge({"a": 0.9, "b": 0.1}), "j2": _FixedJudge({"a": 0.7}, failing={"b"})}
    calls, out = [], tmp_path / "ablation"
    score_committed([str(folder / "ev")], ["j1"], "abl", out_dir=out, opener=_opener(calls, judges), progress=False)
    assert calls == [("j1", 2), ("j1", 2)]
    # a rerun with one more judge scores only that judge's blocks
    meta = score_committed([str(folder / "ev")], ["j1", "j2"], "abl", out_dir=out, opener=_opener(calls, judges),
                           progress=False)
    assert calls[2:] == [("j2", 2), ("j2", 2)]
    assert meta["judges"]["j2"] == {**meta["judges"]["j2"], "judged": 4, "fallbacks": 2}
    assert committed_ablations(out) == ["abl"]
    assert kept_choice(False, out)[:2] == (["abl"], True) and kept_choice(True, out)[:2] == (["abl"], False)
    assert kept_choice(False, tmp_path / "nothing")[:2] == ([NONE_KEPT], False)
    scores, read_meta = read_ablation("abl", out)
    assert len(scores) == 8 and scores["fallback"].dtype == bool and read_meta["rows"] == 8
    mean, count = score_matrix(scores)
    assert count.loc["blend:m (global)", "j2"] == 1 and mean.loc["none (base model)", "j1"] == pytest.approx(0.5)
    assert scores.loc[scores.policy == "RaR · global", "label"].iloc[0] == "some-base · demo index · 3 steps · seed 0"
    # notebook 07's rows: each policy's per-query rows under its ablation name, and the one-shot baselines
    rows = kept_per_query(read_meta, folder)
    assert rows.groupby("method")["recall@10"].sum().to_dict() == {"base (untrained)": 1.0, "RaR · global": 0.5,
                                                                   "one-shot bm25": 0.25}


def test_an_ablation_does_not_resume_on_an_evaluation_rerun_since(tmp_path):
    """Kept scores of trajectories that an evaluation no longer holds are not mixed with new ones."""
    from arxivqa.ablations import score_committed
    from arxivqa.records import load_trajectories, save_trajectories

    folder = _committed_eval(tmp_path)
    judges, calls, out = {"j1": _FixedJudge({"a": 0.9, "b": 0.1}), "j2": _FixedJudge({"a": 0.7, "b": 0.2})}, [], tmp_path / "abl"
    score_committed([str(folder / "ev")], ["j1"], "abl", out_dir=out, opener=_opener(calls, judges), progress=False)
    # the same evaluation again, same episodes: the ablation goes on with the judge it lacks
    score_committed([str(folder / "ev")], ["j1", "j2"], "abl", out_dir=out, opener=_opener(calls, judges), progress=False)
    assert [c[0] for c in calls] == ["j1", "j1", "j2", "j2"]
    # the evaluation rerun: the RaR policy now submits nothing in its first episode
    path = folder / "ev.trajectories.jsonl"
    trajs = load_trajectories(path)
    trajs[2] = trajs[2].model_copy(update={"submitted": []})
    save_trajectories(path, trajs)
    with pytest.raises(ValueError, match=r"scored other trajectories of \['RaR · global'\]"):
        score_committed([str(folder / "ev")], ["j1", "j2"], "abl", out_dir=out, opener=_opener(calls, judges),
                        progress=False)
    assert len(calls) == 4
    # kept scores without their fingerprints (the record of what they scored lost) are not trusted either
    (out / "abl.json").unlink()
    with pytest.raises(ValueError, match="scored other trajectories"):
        score_committed([str(folder / "ev")], ["j1"], "abl", out_dir=out, opener=_opener(calls, judges), progress=False)
    # under another name it is scored afresh
    score_committed([str(folder / "ev")], ["j1"], "abl2", out_dir=out, opener=_opener(calls, judges), progress=False)
    assert len(calls) == 6


def test_an_evaluation_that_is_not_there_is_a_clear_error(tmp_path):
    from arxivqa.ablations import eval_policies

    with pytest.raises(FileNotFoundError, match="no held-out evaluation"):
        eval_policies([str(tmp_path / "missing")])
