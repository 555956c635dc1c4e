"""Does the evaluation agent's second chance after an unreadable turn change the committed held-out figures?

TRL's tool loop (the GRPO rollouts) leaves a rollout whose turn holds no readable tool call: the rollout ends
there. The evaluation agent (``agent.Agent.episode``) instead sends such a turn's parse problems back as a user
message and asks again. This rescoring ends each committed episode where TRL's loop would have ended it — at
its first turn with parse problems and no readable call, nothing submitted — and compares the metrics
(``evaluate.trajectory_metrics``) per policy. For a greedy evaluation the cut episode is exactly what the
TRL-like loop would have produced (the context up to the cut is the same); for a sampled one it is too, since
the turns before the cut are kept as sampled. Turns with readable calls and parse problems beside them (the
agent adds an error message after the tool results; TRL's loop does not) are counted, not rescored.

    .venv/bin/python results/probes/parse-feedback/probe.py [trajectory files ...]
"""
import json
import sys
from pathlib import Path

import pandas as pd

from arxivqa.evaluate import trajectory_metrics
from arxivqa.files import atomic_write_text
from arxivqa.records import Trajectory

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
DEFAULT = [f"results/eval/{n}.trajectories.jsonl" for n in
           ("heldout-dev-full-mixtext3", "heldout-dev-full-rar-mixtext3", "heldout-dev-full-rar-mixtext3-ownview",
            "heldout-dev-full-sampled-mixtext3")]


def cut_at_first_unreadable(t: Trajectory) -> Trajectory | None:
    """The episode as TRL's loop would have ended it, or None where no turn was unreadable without a call."""
    cut = next((i for i, s in enumerate(t.steps) if s.assistant.parse_problems and not s.assistant.tool_calls), None)
    if cut is None:
        return None
    out = t.model_copy(deep=True)
    out.steps = out.steps[: cut + 1]
    out.stop_reason, out.submitted = "no_tool_call", []
    return out


def main(files: list[str]) -> None:
    rows = []
    for f in files:
        for line in (ROOT / f).read_text().splitlines():
            t = Trajectory.model_validate_json(line)
            m = trajectory_metrics(t)
            cut = cut_at_first_unreadable(t)
            c = trajectory_metrics(cut) if cut else m
            rows.append({"evaluation": Path(f).name.removesuffix(".trajectories.jsonl"), "policy": t.policy,
                         "episodes": 1, "cut": cut is not None,
                         "turns_unreadable_no_call": sum(bool(s.assistant.parse_problems) and not s.assistant.tool_calls
                                                         for s in t.steps),
                         "turns_unreadable_with_call": sum(bool(s.assistant.parse_problems) and bool(s.assistant.tool_calls)
                                                           for s in t.steps),
                         "recovered": cut is not None and t.stop_reason == "finished",
                         "recall@10": m["recall@10"], "recall@10_cut": c["recall@10"],
                         "search_recall": m["search_recall"], "search_recall_cut": c["search_recall"],
                         "finished": m["finished"], "finished_cut": c["finished"]})
    d = pd.DataFrame(rows)
    agg = {"episodes": "sum", "cut": "sum", "turns_unreadable_no_call": "sum", "turns_unreadable_with_call": "sum",
           "recovered": "sum", **{k: "mean" for k in ("recall@10", "recall@10_cut", "search_recall",
                                                     "search_recall_cut", "finished", "finished_cut")}}
    table = d.groupby(["evaluation", "policy"], sort=False).agg(agg).reset_index()
    out = {"files": files, "rows": table.round(4).to_dict(orient="records")}
    atomic_write_text(HERE / "result.json", json.dumps(out, indent=1) + "\n")
    atomic_write_text(HERE / "result.md", table.round(4).to_markdown(index=False) + "\n")
    print(table.round(4).to_markdown(index=False))


if __name__ == "__main__":
    main(sys.argv[1:] or DEFAULT)
