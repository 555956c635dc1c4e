"""The report card: run every notebook headless, time each stage, and write ``results/REPORT.md``.

``python -m arxivqa.report demo`` (``make demo``) executes each numbered notebook once, in order, through
``marimo export ipynb --include-outputs`` — which runs it headless exactly like ``python notebooks/NN.py``
and also saves the notebook *with its outputs* as ``results/notebooks/NN_name.ipynb`` for JupyterLab —
records each stage's wall time and exit status in ``results/demo_timing.json`` (rewritten after every
stage, so an interrupted demo keeps what finished), then writes ``results/REPORT.md``: the stages with
wall time and model · scale · seed, and, per notebook, every table it wrote (``NN_*.md``, inlined; long
ones linked) and every figure (``NN_*.png``). ``python -m arxivqa.report write`` rebuilds REPORT.md from
what is in ``results/`` without running anything. The demo stops at the first failing notebook (the
report is still written, marking it failed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from . import config
from .files import atomic_write_json, atomic_write_text

MAX_INLINE_LINES = 30
# settings a reader needs to reproduce the numbers (never secrets: settings hold none; paths are left out)
REPORTED = ("scale", "model", "llm", "preset", "label_queries", "triage_queries", "demo_episodes", "train_steps",
            "rar_steps", "curriculum", "train_judges", "eval_judges", "eval_queries_file", "eval_split", "eval_limit",
            "eval_budgets")


def notebooks(folder: str | Path = "notebooks") -> list[Path]:
    return sorted(p for p in Path(folder).glob("[0-9][0-9]_*.py"))


def run_notebook(nb: Path, out_dir: Path) -> dict:
    """Execute one notebook headless (marimo export with outputs); returns its stage record."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{nb.stem}.ipynb"
    cli = Path(sys.executable).with_name("marimo")
    cmd = [str(cli), "export", "ipynb", "--include-outputs", "--force", str(nb), "-o", str(target)]
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if target.exists():  # outputs name files relative to the repository, not this machine's paths
        atomic_write_text(target, relative_paths(target.read_text()))
    tail = (proc.stdout + proc.stderr)[-2000:]
    if proc.returncode != 0:
        tail = "\n".join([*cell_errors(target), tail])[-4000:]
    return {"notebook": nb.name, "started": started, "seconds": round(seconds, 1), "ok": proc.returncode == 0,
            "returncode": proc.returncode, "ipynb": str(target.relative_to(config.results_dir()))
            if target.is_relative_to(config.results_dir()) else str(target), "log_tail": "" if proc.returncode == 0 else tail}


def relative_paths(text: str) -> str:
    """``text`` with the repository's absolute path removed (``/x/repo/data/runs`` → ``data/runs``)."""
    root = str(config.REPO_ROOT)
    return text.replace(root + "/", "").replace(root, ".")


def cell_errors(ipynb: Path) -> list[str]:
    """The errors of the cells that failed, from an exported notebook (marimo prints only that some did)."""
    try:
        cells = json.loads(ipynb.read_text()).get("cells", [])
    except (OSError, ValueError):
        return []
    return ["\n".join(o.get("traceback") or [f"{o.get('ename')}: {o.get('evalue')}"])
            for c in cells for o in c.get("outputs", []) if o.get("output_type") == "error"]


def run_demo(nbs: list[Path], results: Path | None = None) -> list[dict]:
    results = results or config.results_dir()
    timing_path = results / "demo_timing.json"
    # a partial rerun (--only) replaces its stages and keeps the others' records
    previous = json.loads(timing_path.read_text()).get("stages", []) if timing_path.exists() else []
    recorded = {s["notebook"]: s for s in previous}
    stages: list[dict] = []
    for nb in nbs:
        print(f"== {nb.name}", flush=True)
        rec = run_notebook(nb, results / "notebooks")
        stages.append(rec)
        recorded[nb.name] = rec
        print(f"   {'ok' if rec['ok'] else 'FAILED'} in {rec['seconds'] / 60:.1f} min", flush=True)
        ordered = [recorded[k] for k in sorted(recorded)]
        atomic_write_json(timing_path, {"stages": ordered, "total_seconds": round(sum(s["seconds"] for s in ordered), 1),
                                        "settings": settings()})
        if not rec["ok"]:
            print(rec["log_tail"], file=sys.stderr)
            break
    return stages


def settings() -> dict[str, str]:
    """The reported settings that this run set (by their environment variable names)."""
    s = config.settings()
    return {config.Settings.env_var(k): ",".join(v) if isinstance(v, list) else str(v)
            for k in REPORTED if k in s.model_fields_set and (v := getattr(s, k)) is not None}


def _model_scale_seed(prefix: str, results: Path, recorded: dict[str, str] | None = None) -> str:
    """What a stage ran: from its ``NN_run.json`` when it wrote one, else from the settings, those the demo
    recorded (``recorded``, by environment variable) over today's: the report can be written again later,
    from another environment, and still say what the stage ran with."""
    run = results / f"{prefix}_run.json"
    if run.exists():
        d = json.loads(run.read_text())
        if "config" in d:
            c = d["config"]
            judge = f", judge {c.get('judge_endpoint') or 'local'} ({c.get('judge_rubric')})" if c.get("reward") == "rar" else ""
            return f"{c.get('model')} · {c.get('preset')}, {c.get('max_steps')} steps{judge} · seed {c.get('seed')}"
        if "policies" in d and isinstance(d["policies"], dict):
            return "; ".join(f"{k}: {v}" for k, v in d["policies"].items())
        if "policies" in d:
            return ", ".join(d["policies"])
    s = config.settings_with(recorded)
    from .llm import get_endpoint

    if prefix == "01":
        return f"static MiniLM-distilled embeddings, BM25 · {s.scale} index · deterministic"
    if prefix == "02":
        return (f"{get_endpoint(s.llm).model} labeller · {counted(s.label_queries, 'query', 'queries')}, triage "
                f"{s.triage_queries} · greedy")
    if prefix == "03":
        return f"{s.model} agent · {counted(s.demo_episodes, 'dev episode')} · greedy"
    return "-"


def counted(n, one: str, many: str | None = None) -> str:
    """``n`` and the noun, singular for exactly one: "1 query", "3 queries"."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


SEED_PLATEAU_STEPS, SEED_COLLAPSE_STEPS = 100, 200  # where the seed reports RLVR's reward plateau and entropy collapse
MIN_QUERIES_FOR_INTERVAL = 10  # below this a bootstrap interval over queries says little


def _read_csv(path: Path):
    import pandas as pd

    return pd.read_csv(path) if path.exists() else None


def _widest_interval(table) -> float | None:
    """The widest 95 % interval of recall@10 in a table with a ``recall@10 95% CI`` column ("[lo, hi]")."""
    if table is None or "recall@10 95% CI" not in table:
        return None
    widths = [float(hi) - float(lo) for lo, hi in
              (str(c).strip("[]").split(",") for c in table["recall@10 95% CI"].dropna() if "," in str(c))]
    return max(widths) if widths else None


def limits(prefix: str, results: Path) -> list[str]:
    """What a stage's outputs can and cannot show at the scale they were made, read from those outputs
    (its ``NN_run.json``, training log and tables): steps against those configured and the seed's
    landmarks, the share of steps with a reward signal, whether the adapter moved, one seed, the number
    of evaluation queries and the widest interval, judge fallbacks. Empty when the stage wrote none."""
    out: list[str] = []
    run_path = results / f"{prefix}_run.json"
    run = json.loads(run_path.read_text()) if run_path.exists() else {}
    cfg = run.get("config") or {}
    log = next((t for t in (_read_csv(p) for p in sorted(results.glob(f"{prefix}_*trl_log.csv"))) if t is not None), None)
    if cfg and log is not None and "step" in log:
        steps = int(run.get("steps_logged") or log["step"].max())
        out.append(f"{steps} GRPO steps of the {cfg.get('max_steps')} configured, one seed ({cfg.get('seed')}): "
                   "a difference between runs is within what another seed could give until it is shown on several.")
        if "signal_share" in log:
            signal = log.dropna(subset=["signal_share"])
            with_signal = int((signal["signal_share"] > 0).sum())
        elif "frac_reward_zero_std" in log:
            signal = log.dropna(subset=["frac_reward_zero_std"])
            with_signal = int((signal["frac_reward_zero_std"] < 1).sum())
        else:
            signal, with_signal = [], None
        if with_signal is not None:
            out.append(f"{with_signal} of {len(signal)} steps had reward variance within a group (a gradient)"
                       + ("; with none, the curves are sampling noise of the starting policy, not learning."
                          if with_signal == 0 else "."))
        if "lora_norm" in log and log["lora_norm"].notna().any():
            norm = float(log["lora_norm"].dropna().iloc[-1])
            out.append(f"LoRA B norm after the last step: {norm:.3f}" + (" — the adapter never moved." if norm == 0 else "."))
        for r in run.get("revivals") or []:
            out.append(f"Continued at step {r['step']} on a fresh machine from the adapter kept in the repository "
                       f"({r.get('adapter', 'as exported')}): {' and '.join(r.get('reset', []))} restarted there, "
                       f"{' and '.join(r.get('kept', []))} continued; a run never interrupted could differ after it.")
        if steps < SEED_COLLAPSE_STEPS and cfg.get("reward") == "rar":
            out.append(f"The seed's RaR finding (rich multi-turn search kept where RLVR collapses, near step "
                       f"{SEED_COLLAPSE_STEPS}) needs runs past that step; at {steps} steps this run cannot show it.")
        elif steps < SEED_COLLAPSE_STEPS:
            out.append(f"The seed reports RLVR's reward plateau near step {SEED_PLATEAU_STEPS} and its entropy collapse "
                       f"near step {SEED_COLLAPSE_STEPS}; at {steps} steps this run "
                       + ("cannot show either." if steps < SEED_PLATEAU_STEPS else "cannot show the collapse."))
    rate = run.get("judge_fallback_rate", run.get("fallback_rate"))
    if rate and rate == rate:  # none, 0 or NaN (no judgments) say nothing
        out.append(f"{rate:.0%} of the judge's verdicts fell back (no valid score): judge scores and their agreement "
                   "rest on the rest.")
    tables = [t for pattern in ("eval", "heldout") for t in
              (_read_csv(p) for p in sorted(results.glob(f"{prefix}_*{pattern}.csv"))) if t is not None]
    sizes = [(int(t["n"].max()), _widest_interval(t)) for t in tables if "n" in t and len(t)]
    tag = re.search(r"(\d+)$", str(run.get("queries", "")))
    if not sizes and tag:  # a stage that names its query selection (``corpus.select_queries``'s tag) only
        sizes = [(int(tag.group(1)), None)]
    for n, width in sizes:
        if n < MIN_QUERIES_FOR_INTERVAL:
            out.append(f"Evaluated on {counted(n, 'query', 'queries')}: too few for an interval — an anecdote, not a measurement.")
        else:
            out.append(f"Evaluated on {n} queries" + (f"; the widest recall@10 interval is {width:.2f} wide: differences "
                                                     "smaller than that are not shown." if width is not None else "."))
    if prefix == "06" and run.get("train_judges") is not None:
        out += ablation_limits(run.get("train_judges") or [], run.get("eval_judges") or [])
    validity = results / "judge_validity.json"
    if prefix in JUDGED_STAGES and validity.exists():
        v = json.loads(validity.read_text())
        scored = {k: m for k, m in (v.get("judges") or {}).items() if m.get("pairwise_accuracy") is not None}
        if scored:
            best, m = max(scored.items(), key=lambda kv: kv[1]["pairwise_accuracy"])
            acc = m["pairwise_accuracy"]
            out.append(f"Judge validity ({validity.name}, {m.get('pairs_scored')} pairs of real episodes whose order is "
                       f"known): the best judge measured, {best}, orders {acc:.0%} of them"
                       + (f" — below the {VALIDITY_BAR:.0%} a judge needs to be trusted, so every judge score here "
                          "ranks trajectories little better than that." if acc < VALIDITY_BAR
                          else f", over the {VALIDITY_BAR:.0%} bar"
                          + (f" (at {m['seconds_per_judgment']:.1f} s a judgment)" if m.get("seconds_per_judgment") else "")
                          + "; this stage's scores have that evidence only where that judge is the one its tables name "
                            "— a judge not measured there has none."))
    if prefix == "02" and (results / "02_labelling.json").exists():
        lab = json.loads((results / "02_labelling.json").read_text())
        llm = lab.get("llm") or {}
        out.append(f"The labeller ran on {counted(lab.get('queries'), 'query', 'queries')} with {lab.get('model')}; {llm.get('parse_errors', 0)} "
                   f"of {llm.get('requests', 0)} requests gave no readable answer.")
    return out


def ablation_limits(train_judges: list[str], eval_judges: list[str]) -> list[str]:
    """What a judge ablation's two axes allow: how many RaR training judges it compares (a training judge named
    ``none (...)`` is another regime: base, SFT, RLVR), and where a RaR policy is scored by its own training judge."""
    out = []
    rar = [j for j in train_judges if not str(j).startswith("none")]
    if len(rar) < 2:
        out.append(f"{counted(len(rar), 'RaR training judge', 'RaR training judges')}: the seed's comparison of training "
                   "judges needs two or more, so the rows compare training regimes (base, warm start, RLVR, RaR), not judges.")
    for j in rar:
        name = str(j).split(" (")[0]  # "<judge> (<rubric>)"
        if name in eval_judges:
            out.append(f"The RaR policy trained with {name} is also scored by it: its margin in that column may be the "
                       "judge's own preference; the other evaluation judges are the check.")
    return out


LIMITS_TITLE = "What this shows, and what it cannot at this scale"
JUDGED_STAGES = ("05", "06", "07")  # the stages whose results rest on a judge's scores
VALIDITY_BAR = 0.80  # the pairwise accuracy a judge must reach on the validity set (issue #13's target)


def limits_markdown(prefix: str, results: Path | None = None) -> str:
    """``limits`` as the markdown a notebook shows under its results and REPORT.md repeats ("" if none)."""
    lines = limits(prefix, results or config.results_dir())
    return (f"**{LIMITS_TITLE}** (read from this stage's outputs):\n\n" + "\n".join(f"- {x}" for x in lines)) if lines else ""


def write_report(results: Path | None = None, nbs: list[Path] | None = None) -> Path:
    results = results or config.results_dir()
    timing = json.loads((results / "demo_timing.json").read_text()) if (results / "demo_timing.json").exists() else {}
    by_nb = {s["notebook"]: s for s in timing.get("stages", [])}
    nbs = nbs or notebooks()
    lines = ["# arxivqa — report card", "",
             f"Written {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC by `python -m arxivqa.report` from the "
             "files under `results/`. Every number below was produced by the notebooks named, at the scale stated; "
             "`make demo` regenerates all of it.", ""]
    if timing:
        lines += [f"**Demo wall time: {timing.get('total_seconds', 0) / 60:.1f} min** on this machine "
                  f"({os.cpu_count()} cores). Settings: "
                  + (", ".join(f"`{k}={v}`" for k, v in timing.get("settings", {}).items()) or "defaults"), ""]
    lines += ["| stage | status | wall time | model · scale · seed | notebook with outputs |", "|---|---|---|---|---|"]
    for nb in nbs:
        s = by_nb.get(nb.name)
        status = "not run" if s is None else ("ok" if s["ok"] else f"failed (exit {s['returncode']})")
        wall = "-" if s is None else f"{s['seconds'] / 60:.1f} min"
        link = f"[{nb.stem}.ipynb](notebooks/{nb.stem}.ipynb)" if (results / "notebooks" / f"{nb.stem}.ipynb").exists() else "-"
        lines.append(f"| {nb.stem} | {status} | {wall} | {_model_scale_seed(nb.stem[:2], results, timing.get('settings')).replace('|', '/')} | {link} |")
    for nb in nbs:
        prefix = nb.stem[:2]
        lines += ["", f"## {nb.stem}", ""]
        tables = sorted(results.glob(f"{prefix}_*.md"))
        figures = sorted(results.glob(f"{prefix}_*.png"))
        stage = by_nb.get(nb.name)
        since = dt.datetime.fromisoformat(stage["started"]).timestamp() if stage else None

        def stale(path: Path) -> str:  # a file the last run of this stage did not (re)write
            return (" _(not written by the last run of this stage: kept from an earlier run)_"
                    if since is not None and path.stat().st_mtime < since - 1 else "")

        caveats = limits_markdown(prefix, results)
        if caveats:
            lines += [caveats, ""]
        if not tables and not figures:
            lines.append("_No tables or figures written yet._")
        for t in tables:
            body = t.read_text().rstrip("\n").splitlines()
            lines += [f"### {t.stem}{stale(t)}", ""]
            if len(body) <= MAX_INLINE_LINES:
                lines += body
            else:
                lines += body[:MAX_INLINE_LINES // 2] + ["", f"_{len(body) - 2} rows: [full table]({t.name}) "
                                                             f"([csv]({t.stem}.csv))._"]
            lines.append("")
        for f in figures:
            lines += [f"![{f.stem}]({f.name}){stale(f)}", ""]
    return atomic_write_text(results / "REPORT.md", "\n".join(lines).rstrip("\n") + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m arxivqa.report", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="run the notebooks headless, then write REPORT.md")
    d.add_argument("--only", nargs="*", default=None, help="notebook prefixes to run (e.g. 06 07); default all")
    sub.add_parser("write", help="write REPORT.md from results/ without running anything")
    a = p.parse_args(argv)
    if a.cmd == "write":
        print(write_report())
        return
    nbs = [nb for nb in notebooks() if not a.only or nb.stem[:2] in a.only]
    stages = run_demo(nbs)
    print(write_report())
    if not all(s["ok"] for s in stages) or len(stages) < len(nbs):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
