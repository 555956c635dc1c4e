"""Judge validity: pairs of real trajectories whose order is known by construction, and what a judge
does with them.

A judge that cannot rank trajectories the way a careful reader would gives RaR noise to learn from. Before
a judge trains anything, it is measured here on train-split episodes only (the teacher's demonstrations
and the policy's training rollouts; no dev query):

- ``gold_vs_offtopic``: the same query, one episode that submitted a gold paper against one whose
  submission holds none, from a single search.
- ``rich_vs_single``: the same query, an episode with ≥ 3 successful searches over ≥ 2 turns and both
  search tools, against one with a single successful search, the rich one at least as good in
  recall@10.
- ``right_vs_wrong_submission`` (the subtle one): one real episode, and the same episode whose final
  submission was swapped for papers its searches showed that are not gold (same searches, same reasoning,
  a wrong answer).

Measures per judge (``measure``): pairwise accuracy (the better one scored higher; a tie counts half),
Spearman's rho of score with recall@10 over a pool of policy trajectories, the fallback rate, and seconds
per judgment. Gold decides only which pair is which, never what the judge sees.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from .records import SEARCH_TOOLS, Trajectory, submission_recall

KINDS = ("gold_vs_offtopic", "rich_vs_single", "right_vs_wrong_submission")


class ValidityPair(BaseModel):
    kind: Literal["gold_vs_offtopic", "rich_vs_single", "right_vs_wrong_submission"]
    qid: str
    better: Trajectory
    worse: Trajectory


def _searches(t: Trajectory) -> list:
    return [r for r in t.tool_results if r.name in SEARCH_TOOLS and not r.error]


def _finished(t: Trajectory) -> bool:
    return t.submitted is not None and bool(t.gold_in_corpus)


def is_rich(t: Trajectory) -> bool:
    s = _searches(t)
    return len(s) >= 3 and len({r.turn for r in s}) >= 2 and {r.name for r in s} == set(SEARCH_TOOLS)


def is_single(t: Trajectory) -> bool:
    return len({(r.name, json.dumps(r.arguments, sort_keys=True, default=str)) for r in _searches(t)}) == 1


def wrong_submission(t: Trajectory) -> Trajectory | None:
    """``t`` with its submission replaced by as many papers its tools showed that are not gold (in the
    order shown), the finish call's arguments with them; None when too few such papers were shown."""
    gold = set(t.gold_in_corpus)
    shown = [h for r in _searches(t) for h in r.hits if h.arxiv_id not in gold]
    seen, wrong = set(), []
    for h in shown:
        if h.arxiv_id not in seen:
            seen.add(h.arxiv_id)
            wrong.append(h)
    n = len(t.submitted or [])
    if n == 0 or len(wrong) < n:
        return None
    w = t.model_copy(deep=True)
    w.submitted = [h.arxiv_id for h in wrong[:n]]
    for r in w.tool_results:
        if r.name == "finish" and not r.error:
            r.arguments = {"paper_ids": [h.id or h.arxiv_id for h in wrong[:n]]}
    return w


def build_pairs(trajs: Sequence[Trajectory], per_kind: int = 20, seed: int = 0,
                allowed_qids: set[str] | None = None) -> list[ValidityPair]:
    """Up to ``per_kind`` pairs of each kind, at most one of a kind per query (queries shuffled by
    ``seed``); only queries in ``allowed_qids`` when given (pass the train split's)."""
    rng = random.Random(seed)
    by_q: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        if _finished(t) and (allowed_qids is None or t.qid in allowed_qids):
            by_q[t.qid].append(t)
    qids = sorted(by_q)
    rng.shuffle(qids)
    pairs: list[ValidityPair] = []
    counts = dict.fromkeys(KINDS, 0)
    for q in qids:
        ts = by_q[q]
        good = [t for t in ts if submission_recall(t) > 0]
        off = [t for t in ts if submission_recall(t) == 0 and len(_searches(t)) <= 1]
        if good and off and counts["gold_vs_offtopic"] < per_kind:
            pairs.append(ValidityPair(kind="gold_vs_offtopic", qid=q, better=rng.choice(good), worse=rng.choice(off)))
            counts["gold_vs_offtopic"] += 1
        singles = [t for t in ts if is_single(t)]
        if singles and counts["rich_vs_single"] < per_kind:
            s = rng.choice(singles)
            rich = [t for t in ts if is_rich(t) and submission_recall(t) >= submission_recall(s)]
            if rich:
                pairs.append(ValidityPair(kind="rich_vs_single", qid=q, better=rng.choice(rich), worse=s))
                counts["rich_vs_single"] += 1
        if counts["right_vs_wrong_submission"] < per_kind:
            for t in rng.sample(good, len(good)):
                w = wrong_submission(t)
                if w is not None:
                    pairs.append(ValidityPair(kind="right_vs_wrong_submission", qid=q, better=t, worse=w))
                    counts["right_vs_wrong_submission"] += 1
                    break
    return pairs


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rho with average ranks for ties; NaN when either side is constant or n < 3."""
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(v):
            j = i
            while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r

    if len(xs) < 3:
        return math.nan
    rx, ry = ranks(list(xs)), ranks(list(ys))
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sx, sy = math.sqrt(sum((a - mx) ** 2 for a in rx)), math.sqrt(sum((b - my) ** 2 for b in ry))
    return sxy / (sx * sy) if sx and sy else math.nan


def measure(judge, pairs: Sequence[ValidityPair], pool: Sequence[Trajectory], progress: Path | None = None,
            chunk: int = 10, name: str | None = None) -> dict:
    """A judge (``judge.Judge``) on the pairs and the pool: pairwise accuracy (overall and per kind, over
    pairs where neither judgment fell back; a tie counts half), Spearman of score with recall@10 over the
    pool's non-fallback judgments, the fallback rate over every judgment, seconds per judgment, and every
    score (``scores``).

    The trajectories are judged ``chunk`` at a time, with a progress bar. With ``progress`` (a file), the
    scores so far and the seconds they took are written there atomically after each chunk, and a measurement
    of the same judge (``name``) on the same trajectories that was interrupted goes on from where it stopped
    (a file of another judge or set is started afresh); the caller removes it once the result is kept."""
    from tqdm.auto import tqdm

    from .files import atomic_write_json

    flat = [t for p in pairs for t in (p.better, p.worse)]
    items = [*flat, *pool]
    key = {"judge": name or getattr(judge, "name", type(judge).__name__),
           "items": hashlib.sha256(json.dumps([t.model_dump(mode="json") for t in items], sort_keys=True)
                                   .encode()).hexdigest()[:16]}
    done: list[float | None] = []
    seconds = 0.0
    if progress is not None and Path(progress).exists():
        kept = json.loads(Path(progress).read_text())
        if kept.get("key") == key and len(kept.get("scores", [])) <= len(items):
            done, seconds = list(kept["scores"]), float(kept["seconds"])
    bar = tqdm(total=len(items), initial=len(done), desc=f"validity ({key['judge']})", unit="judgment")
    while len(done) < len(items):
        t0 = time.perf_counter()
        batch = items[len(done):len(done) + chunk]
        results = judge.score_batch(batch)
        if len(results) != len(batch):
            raise ValueError(f"judge {key['judge']} gave {len(results)} results for {len(batch)} trajectories")
        seconds += time.perf_counter() - t0
        done += [None if r.fallback else r.score for r in results]
        bar.update(len(results))
        if progress is not None:
            atomic_write_json(progress, {"key": key, "scores": done, "seconds": seconds})
    bar.close()
    pr, po = done[:len(flat)], done[len(flat):]
    scores = {"pairs": [pr[i:i + 2] for i in range(0, len(pr), 2)], "pool": po}
    return summarise(pairs, pool, scores, seconds / max(1, len(items)))


def summarise(pairs: Sequence[ValidityPair], pool: Sequence[Trajectory], scores: dict, seconds_per_judgment: float) -> dict:
    """The validity measures from every score (``{"pairs": [[better, worse], ...], "pool": [...]}``, None
    where a judgment fell back) — what ``measure`` reports, and what ``combine`` computes from stored scores."""
    if len(scores["pairs"]) != len(pairs) or len(scores["pool"]) != len(pool):
        raise ValueError(f"scores for {len(scores['pairs'])} pairs and {len(scores['pool'])} pool trajectories; "
                         f"the set has {len(pairs)} and {len(pool)}")
    wins: dict[str, list[float]] = defaultdict(list)
    for p, (b, w) in zip(pairs, scores["pairs"]):
        if b is not None and w is not None:
            wins[p.kind].append(1.0 if b > w else 0.5 if b == w else 0.0)
    every = [x for v in wins.values() for x in v]
    scored = [(sc, submission_recall(t)) for sc, t in zip(scores["pool"], pool) if sc is not None]
    rho = spearman([s for s, _ in scored], [rc for _, rc in scored]) if scored else math.nan
    flat = [x for pair in scores["pairs"] for x in pair] + list(scores["pool"])
    mean = (lambda v: sum(v) / len(v) if v else None)
    return {"pairwise_accuracy": mean(every), "pairs_scored": len(every), "pairs": len(pairs),
            "pairwise_accuracy_by_kind": {k: mean(wins.get(k, [])) for k in KINDS},
            "spearman_recall": None if math.isnan(rho) else rho, "pool": len(pool), "pool_scored": len(scored),
            "fallback_rate": sum(x is None for x in flat) / max(1, len(flat)),
            "seconds_per_judgment": seconds_per_judgment,
            # every score (None: fell back), pairs as [better, worse]: judges can be compared item by item
            "scores": scores}


def combine(pairs: Sequence[ValidityPair], pool: Sequence[Trajectory], measured: Sequence[dict]) -> dict:
    """The judge whose score is the plain mean of the scores of ``measured`` (reports of ``measure`` on this
    set), item by item — a combination computed without judging again; an item is None where any judge fell
    back. Its seconds per judgment are the sum of theirs (each judges every item)."""
    def mean(xs):
        return None if any(x is None for x in xs) else sum(xs) / len(xs)

    ms = [m["scores"] for m in measured]
    for m in ms:
        if len(m["pairs"]) != len(pairs) or len(m["pool"]) != len(pool):
            raise ValueError(f"a judge scored {len(m['pairs'])} pairs and {len(m['pool'])} pool trajectories; "
                             f"the set has {len(pairs)} and {len(pool)}")
    scores = {"pairs": [[mean([m["pairs"][i][j] for m in ms]) for j in (0, 1)] for i in range(len(pairs))],
              "pool": [mean([m["pool"][i] for m in ms]) for i in range(len(pool))]}
    out = summarise(pairs, pool, scores, sum(m["seconds_per_judgment"] for m in measured))
    out["mean_of"] = len(measured)
    return out


# --------------------------------------------------------------------------- sources and the command


def train_sources(demo_files: Sequence[Path], run_dirs: Sequence[Path],
                  until_step: int | None = None) -> tuple[list[Trajectory], list[Trajectory]]:
    """(every trajectory, the policy's) from teacher demonstration files (``sft demos``) and committed
    runs' rollouts (those of steps ≤ ``until_step`` when given: a set built while a run was shorter is
    rebuilt the same after it grew)."""
    teacher = [Trajectory.model_validate(json.loads(line)["trajectory"])
               for f in demo_files for line in Path(f).read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [json.loads(line) for d in run_dirs
            for line in (Path(d) / "rollouts.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    policy = [Trajectory.model_validate(r["trajectory"]) for r in rows
              if until_step is None or int(r.get("step", 0)) <= until_step]
    return teacher + policy, policy


def set_fingerprint(data: dict) -> str:
    """What identifies a validity set: its pairs and pool (not where it was built from or when)."""
    body = json.dumps({"pairs": data["pairs"], "pool": data["pool"]}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def write_set(path: Path, data: dict) -> Path:
    """A validity set as JSON, gzip-compressed when ``path`` ends in ``.gz`` (no timestamp: the same set
    gives the same bytes), written atomically."""
    from .files import atomic_write_bytes

    body = json.dumps(data).encode("utf-8")
    return atomic_write_bytes(path, gzip.compress(body, mtime=0) if path.suffix == ".gz" else body)


def read_set(path: Path) -> dict:
    """A validity set written by ``write_set``; a clear error naming the command when it is missing."""
    if not path.exists():
        raise FileNotFoundError(f"no validity set at {path}: python -m arxivqa.validity build (README: Judge validity set)")
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def _shown(path: Path) -> str:
    """A source path as recorded: relative to the working directory when under it (no machine paths)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> None:
    from .config import results_dir, settings
    from .corpus import select_queries
    from .files import atomic_write_text

    ap = argparse.ArgumentParser(prog="python -m arxivqa.validity", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="the validity pairs and pool, from train-split episodes")
    b.add_argument("--demos", nargs="+", default=None, help="teacher demonstration files (default: data/sft/*.jsonl)")
    b.add_argument("--runs", nargs="+", default=None, help="run folders (default: results/runs/*)")
    b.add_argument("--per-kind", type=int, default=25)
    b.add_argument("--pool", type=int, default=120)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--until-step", type=int, default=None, help="only the runs' rollouts of steps up to this one")
    b.add_argument("--out", default=None, help="default: results/judge_validity_set.json.gz (kept in git with the report)")
    m = sub.add_parser("measure", help="judges on the set -> results/judge_validity.json (an interrupted measurement goes on "
                       "from its progress file under data/validity/ when run again)")
    m.add_argument("--set", default=None, help="default: results/judge_validity_set.json.gz")
    m.add_argument("--judges", nargs="+", default=["local"],
                   help="judge names: an endpoint (local, ...), expected:<model>, yesno:<model>, docs[+abstract]:<model>, blend[+abstract]:<model> or explicit:<model> (the query rubrics of python -m arxivqa.judge rubrics), each with an optional +lines (the lines layout), or a mean of such judges, \"mean(<judge>, <judge>)\" (judge.make_judge)")
    c = sub.add_parser("combine", help="a judge that is the mean of measured judges' scores, without judging again")
    c.add_argument("judges", nargs="+", help="judges already in results/judge_validity.json (on the same set)")
    c.add_argument("--name", default=None, help="default: mean(<judge>, <judge>, ...)")
    c.add_argument("--set", default=None, help="default: results/judge_validity_set.json.gz")
    a = ap.parse_args(argv)
    s = settings()
    work = s.runs_dir.parent  # the repository's data/ folder (git-ignored outputs)
    # the set is kept beside its report: rebuilt on another machine by the same commands it came out a little
    # different (109 pairs, then 107; the cause, index or teacher, was not traced), so a report is reproducible only from it
    default_set = results_dir() / "judge_validity_set.json.gz"
    if a.cmd == "build":
        demos = [Path(p) for p in a.demos] if a.demos else sorted((work / "sft").glob("demos-*.jsonl"))
        runs = [Path(p) for p in a.runs] if a.runs else sorted(p for p in (results_dir() / "runs").iterdir() if p.is_dir())
        every, policy = train_sources(demos, runs, a.until_step)
        train = {q.qid for q in select_queries(split="train").queries}
        pairs = build_pairs(every, a.per_kind, a.seed, allowed_qids=train)
        rng = random.Random(a.seed)
        pool = [t for t in policy if t.qid in train and t.gold_in_corpus]
        pool = rng.sample(pool, min(a.pool, len(pool)))
        out = Path(a.out) if a.out else default_set
        out.parent.mkdir(parents=True, exist_ok=True)
        write_set(out, {"sources": {"demos": [_shown(p) for p in demos], "runs": [_shown(p) for p in runs],
                                    "until_step": a.until_step},
                        "seed": a.seed, "pairs": [p.model_dump(mode="json") for p in pairs],
                        "pool": [t.model_dump(mode="json") for t in pool]})
        kinds = {k: sum(p.kind == k for p in pairs) for k in KINDS}
        print(f"{len(pairs)} pairs {kinds}, pool {len(pool)} -> {out}")
        return
    from .judge import make_judge

    data = read_set(Path(a.set) if a.set else default_set)
    pairs = [ValidityPair.model_validate(p) for p in data["pairs"]]
    pool = [Trajectory.model_validate(t) for t in data["pool"]]
    path = results_dir() / "judge_validity.json"
    report = json.loads(path.read_text()) if path.exists() else {"judges": {}}
    fingerprint = set_fingerprint(data)
    old = report.get("set", {}).get("sha256")
    if a.cmd == "combine":
        if old != fingerprint:
            raise SystemExit(f"{path} was measured on another set than {a.set or default_set}: measure the judges on it first")
        missing = [n for n in a.judges if n not in report["judges"] or "mean_of" in report["judges"][n]]
        if missing:
            raise SystemExit(f"not measured judges in {path}: {', '.join(missing)} (measured: {', '.join(report['judges'])})")
        name = a.name or f"mean({', '.join(a.judges)})"
        parts = [report["judges"][n] for n in a.judges]
        # the seconds are a sum of the parts': where they were measured on different CPUs, that sum is no one
        # machine's figure — each part's seconds and CPU are kept beside it (older entries recorded no CPU: None)
        cpus = [m.get("cpu") for m in parts]
        report["judges"][name] = combine(pairs, pool, parts) | {
            "of": list(a.judges), "cpu": cpus[0] if all(c == cpus[0] for c in cpus) else None,
            "parts": {n: {"seconds_per_judgment": m["seconds_per_judgment"], "cpu": m.get("cpu")} for n, m in zip(a.judges, parts)}}
        atomic_write_text(path, json.dumps(report, indent=1) + "\n")
        print(name, json.dumps({k: v for k, v in report["judges"][name].items() if k != "scores"}))
        return
    if old != fingerprint:  # judges measured on another set are not comparable: that report is kept aside
        if old:
            atomic_write_text(path.with_name(f"judge_validity_{old}.json"), json.dumps(report, indent=1) + "\n")
        report = {"judges": {}}
    for name in a.judges:
        # seconds depend on the CPU (bf16 units or not: ~8x for the 1.5B), so each measurement says where it ran
        progress = work / "validity" / (hashlib.sha256(name.encode()).hexdigest()[:12] + ".progress.json")
        report["judges"][name] = measure(make_judge(name), pairs, pool, progress=progress, name=name) | {"cpu": _cpu()}
        report["set"] = {"pairs": len(pairs), "pool": len(pool), "kinds": {k: sum(p.kind == k for p in pairs) for k in KINDS},
                         "sha256": fingerprint, "sources": data.get("sources"), "seed": data.get("seed")}
        atomic_write_text(path, json.dumps(report, indent=1) + "\n")
        progress.unlink(missing_ok=True)  # its scores are in the report now
        print(name, json.dumps(report["judges"][name]))


def _cpu() -> dict:
    """Where a judge's seconds were measured: the CPU's model name, its core count, whether it has bfloat16 units."""
    import os

    from .models import cpu_has_bf16, cpu_name

    return {"model": cpu_name(), "cores": os.cpu_count(), "bf16_units": cpu_has_bf16()}


def measured_judges(path: Path | None = None) -> dict[str, float]:
    """The judges a name alone loads (``<scoring>[+...]:<model>``, and means of them as ``validity combine``
    names them: ``judge.MeanJudge``) measured in ``judge_validity.json`` (default: under the results folder),
    each with its pairwise accuracy, best first; {} when nothing was measured."""
    from .config import results_dir
    from .judge import in_process_judge

    path = path or results_dir() / "judge_validity.json"
    if not path.exists():
        return {}
    judges = json.loads(path.read_text()).get("judges") or {}
    found = {n: m["pairwise_accuracy"] for n, m in judges.items()
             if m.get("pairwise_accuracy") is not None and in_process_judge(n)}
    return dict(sorted(found.items(), key=lambda kv: -kv[1]))


def validity_table(report: dict):
    """``results/judge_validity.json`` as one row per judge (accuracy overall and per kind, Spearman with
    recall@10, fallback rate, seconds per judgment, and the n behind each)."""
    import pandas as pd

    rows = []
    for name, m in report.get("judges", {}).items():
        rows.append({"judge": name, "pairwise_accuracy": m["pairwise_accuracy"], "pairs": m["pairs_scored"],
                     **{f"acc_{k}": v for k, v in m["pairwise_accuracy_by_kind"].items()},
                     "spearman_recall": m["spearman_recall"], "pool": m["pool_scored"],
                     "fallback_rate": m["fallback_rate"], "seconds_per_judgment": m["seconds_per_judgment"]})
    return pd.DataFrame(rows)


if __name__ == "__main__":
    main()
