"""The report card: stages run headless through marimo, timed, and REPORT.md assembled from results/."""

import json
import os

from arxivqa import report

NOTEBOOK = '''import marimo

app = marimo.App()


@app.cell
def _():
    import os
    from pathlib import Path

    out = Path(os.environ["ARXIVQA_RESULTS_DIR"])
    (out / "{prefix}_table.md").write_text("| a |\\n|---|\\n| {value} |\\n")
    {extra}
    return


if __name__ == "__main__":
    app.run()
'''


def _notebook(folder, name, value, extra=""):
    path = folder / name
    path.write_text(NOTEBOOK.replace("{prefix}", name[:2]).replace("{value}", str(value)).replace("{extra}", extra))
    return path


def test_demo_runs_each_notebook_once_times_it_and_writes_the_report(tmp_path, monkeypatch):
    results, nbs = tmp_path / "results", tmp_path / "notebooks"
    results.mkdir()
    nbs.mkdir()
    monkeypatch.setenv("ARXIVQA_RESULTS_DIR", str(results))
    monkeypatch.setenv("ARXIVQA_TRAIN_STEPS", "3")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-never-reported")
    (results / "01_long.md").write_text("\n".join(["| x |", "|---|"] + [f"| {i} |" for i in range(60)]) + "\n")
    (results / "01_fig.png").write_bytes(b"\x89PNG")
    (results / "02_old.md").write_text("| old |\n|---|\n")
    os.utime(results / "02_old.md", (1e9, 1e9))  # written long before this demo
    stages = report.run_demo([_notebook(nbs, "01_first.py", 41), _notebook(nbs, "02_second.py", 42)], results)
    assert [s["ok"] for s in stages] == [True, True] and all(s["seconds"] > 0 for s in stages)
    assert (results / "notebooks" / "01_first.ipynb").exists()  # exported with outputs for JupyterLab
    assert report.relative_paths(f"see {report.config.REPO_ROOT}/data/runs/x") == "see data/runs/x"
    timing = json.loads((results / "demo_timing.json").read_text())
    assert [s["notebook"] for s in timing["stages"]] == ["01_first.py", "02_second.py"]
    assert timing["settings"] == {"ARXIVQA_TRAIN_STEPS": "3"}
    text = report.write_report(results, sorted(nbs.glob("*.py"))).read_text()
    assert "| 01_first | ok |" in text and "| 42 |" in text  # the table the notebook wrote, inlined
    assert "[full table](01_long.md)" in text and "| 59 |" not in text  # long tables are linked
    assert "### 02_table\n" in text and "### 02_old _(not written by the last run" in text
    assert "![01_fig](01_fig.png)" in text and "sk-secret" not in text and "`ARXIVQA_TRAIN_STEPS=3`" in text


def test_a_failing_notebook_stops_the_demo_and_is_reported(tmp_path, monkeypatch):
    results, nbs = tmp_path / "results", tmp_path / "notebooks"
    results.mkdir()
    nbs.mkdir()
    monkeypatch.setenv("ARXIVQA_RESULTS_DIR", str(results))
    bad = _notebook(nbs, "01_bad.py", 1, extra='raise RuntimeError("index missing")')
    stages = report.run_demo([bad, _notebook(nbs, "02_next.py", 2)], results)
    assert len(stages) == 1 and not stages[0]["ok"] and "index missing" in stages[0]["log_tail"]
    text = report.write_report(results, [bad, nbs / "02_next.py"]).read_text()
    assert "| 01_bad | failed (exit 1) |" in text and "| 02_next | not run |" in text


def test_the_report_says_what_each_stage_cannot_show_from_its_own_outputs(tmp_path):
    import pandas as pd

    results = tmp_path / "results"
    results.mkdir()
    # a training stage whose groups never had reward variance: no gradient, the adapter never moved
    (results / "04_run.json").write_text(json.dumps({"config": {"reward": "rlvr", "max_steps": 100, "seed": 3},
                                                     "steps_logged": 3}))
    pd.DataFrame({"step": [1, 2, 3], "signal_share": [0.0, 0.0, 0.0], "lora_norm": [0.0, 0.0, 0.0]}).to_csv(
        results / "04_trl_log.csv", index=False)
    # a longer one with a signal
    (results / "05_run.json").write_text(json.dumps({"config": {"reward": "rar", "max_steps": 150, "seed": 0},
                                                     "judge_fallback_rate": 0.25,
                                                     "revivals": [{"step": 70, "reset": ["Adam moment estimates"],
                                                                   "kept": ["query order"]}]}))
    pd.DataFrame({"step": range(1, 151), "frac_reward_zero_std": [0.0, 1.0] * 75}).to_csv(
        results / "05_rar_trl_log.csv", index=False)
    # evaluations: a tiny one and one with intervals
    pd.DataFrame({"method": ["a"], "n": [2], "recall@10 95% CI": ["[0.000, 0.600]"]}).to_csv(
        results / "03_eval.csv", index=False)
    pd.DataFrame({"method": ["a", "b"], "n": [56, 56], "recall@10 95% CI": ["[0.196, 0.377]", "[0.265, 0.447]"]}).to_csv(
        results / "07_eval.csv", index=False)
    four = " ".join(report.limits("04", results))
    assert "3 GRPO steps of the 100 configured, one seed (3)" in four and "0 of 3 steps had reward variance" in four
    assert "not learning" in four and "never moved" in four and "cannot show either" in four
    five = " ".join(report.limits("05", results))
    assert "75 of 150 steps had reward variance" in five and "not learning" not in five
    assert "RaR finding" in five and "25% of the judge's verdicts fell back" in five
    assert "Continued at step 70" in five and "Adam moment estimates restarted" in five and "Continued" not in four
    assert "too few for an interval" in " ".join(report.limits("03", results))
    assert "56 queries; the widest recall@10 interval is 0.18 wide" in " ".join(report.limits("07", results))
    assert report.limits("01", results) == []
    (results / "06_run.json").write_text(json.dumps({"fallback_rate": float("nan"), "queries": "queries_train-dev3"}))
    assert report.limits("06", results) == ["Evaluated on 3 queries: too few for an interval — an anecdote, not a measurement."]
    # the judged stages say how far the best judge measured on the validity set can be trusted
    (results / "judge_validity.json").write_text(json.dumps({"judges": {
        "a": {"pairwise_accuracy": 0.62, "pairs_scored": 107}, "b": {"pairwise_accuracy": 0.77, "pairs_scored": 107},
        "c": {"pairwise_accuracy": None, "pairs_scored": 0}}}))
    six = " ".join(report.limits("06", results))
    assert "the best judge measured, b, orders 77% of them — below the 80%" in six and "107 pairs" in six
    assert "Judge validity" not in " ".join(report.limits("04", results))
    # an ablation with one RaR training judge, which also scores: its rows are regimes, its own column is suspect
    (results / "06_run.json").write_text(json.dumps({"queries": "x · 56", "train_judges": [
        "none (base model)", "none (RLVR reward, uniform)", "blend:m (global)"], "eval_judges": ["blend:m", "docs:m"]}))
    six = " ".join(report.limits("06", results))
    assert "1 RaR training judge:" in six and "compare training regimes" in six and "trained with blend:m is also scored" in six
    (results / "06_run.json").write_text(json.dumps({"queries": "x · 56", "train_judges": ["a (global)", "b (query)"],
                                                     "eval_judges": ["c"]}))
    assert "RaR training judge" not in " ".join(report.limits("06", results))
    (results / "judge_validity.json").write_text(json.dumps({"judges": {"b": {"pairwise_accuracy": 0.85, "pairs_scored": 9}}}))
    assert "orders 85% of them, over the 80% bar" in " ".join(report.limits("07", results))
    text = report.write_report(results, [tmp_path / f"{p}_x.py" for p in ("03", "04")]).read_text()
    assert "What this shows, and what it cannot at this scale" in text and "never moved" in text


def test_a_stage_without_its_own_record_is_described_by_the_settings_the_demo_ran_with(tmp_path, monkeypatch):
    results, nbs = tmp_path / "results", tmp_path / "notebooks"
    results.mkdir()
    nbs.mkdir()
    monkeypatch.setenv("ARXIVQA_RESULTS_DIR", str(results))
    monkeypatch.setenv("ARXIVQA_DEMO_EPISODES", "7")  # today's environment, not the demo's
    (results / "demo_timing.json").write_text(json.dumps({
        "stages": [{"notebook": "03_agent.py", "started": "2026-12-06T19:00:00+00:00", "seconds": 60.0, "ok": True,
                    "returncode": 0}],
        "total_seconds": 60.0, "settings": {"ARXIVQA_DEMO_EPISODES": "1"}}))
    text = report.write_report(results, [_notebook(nbs, "03_agent.py", 3)]).read_text()
    assert "· 1 dev episode ·" in text and "7 dev episodes" not in text
    (results / "demo_timing.json").write_text(json.dumps({"stages": [], "settings": {}}))
    assert "· 7 dev episodes ·" in report.write_report(results, [nbs / "03_agent.py"]).read_text()


def test_drop_table_removes_an_earlier_runs_table_and_only_it(tmp_path):
    import pandas as pd
    from arxivqa.plots import drop_table, save_table

    save_table(pd.DataFrame({"a": [1]}), "04_heldout", out_dir=tmp_path)
    save_table(pd.DataFrame({"a": [2]}), "04_gates", out_dir=tmp_path)
    assert drop_table("04_heldout", out_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["04_gates.csv", "04_gates.md"]
    assert not drop_table("04_heldout", out_dir=tmp_path)  # nothing left to remove
