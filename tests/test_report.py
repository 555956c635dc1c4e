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
