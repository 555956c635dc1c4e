"""Seaborn figures for the notebooks; ``save`` writes them under ``results/`` atomically."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from . import config
from .files import atomic_write_bytes, atomic_write_text

sns.set_theme(style="whitegrid", context="notebook")
DIFFICULTY_ORDER = ["easy", "medium", "hard", "unrated", "all"]


def save(fig, name: str, out_dir: Path | None = None) -> Path:
    """Save a figure as ``<results>/<name>`` (PNG, 120 dpi)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    return atomic_write_bytes((Path(out_dir) if out_dir else config.results_dir()) / name, buf.getvalue())


def save_table(df: pd.DataFrame, stem: str, out_dir: Path | None = None, floatfmt: str = ".3f") -> tuple[Path, Path]:
    """Save a table as ``<stem>.csv`` and ``<stem>.md``."""
    out = Path(out_dir) if out_dir else config.results_dir()
    csv = atomic_write_text(out / f"{stem}.csv", df.to_csv(index=False))
    md = atomic_write_text(out / f"{stem}.md", df.to_markdown(index=False, floatfmt=floatfmt) + "\n")
    return csv, md


def drop_table(stem: str, out_dir: Path | None = None) -> bool:
    """Remove ``<stem>.csv`` and ``<stem>.md`` written by an earlier run: a notebook calls it where this run has
    no such table, so that a stale one does not stand beside this run's results. True if one was removed."""
    out = Path(out_dir) if out_dir else config.results_dir()
    found = [p for p in (out / f"{stem}.csv", out / f"{stem}.md") if p.exists()]
    for p in found:
        p.unlink()
    return bool(found)


def policy_caption(policies: Mapping[str, tuple[str, int | str, int | str]], scale: str) -> str:
    """The "model · scale · steps · seed" line of a figure that shows several policies. ``policies`` maps a
    policy's name to (model, training steps, seed) — steps 0 and seed "-" for an untrained model. A value
    that every policy shares is stated once, differing steps per policy; policies without GRPO steps (a base model,
    a warm start) are named."""
    if not policies:
        return scale
    models = list(dict.fromkeys(str(m) for m, _, _ in policies.values()))
    seeds = list(dict.fromkeys(str(sd) for _, _, sd in policies.values() if str(sd) != "-")) or ["-"]
    trained = {name: str(n) for name, (_, n, _) in policies.items() if str(n) not in ("0", "-")}
    untrained = [name for name in policies if name not in trained]
    if len(set(trained.values())) == 1:
        steps_text = f"{next(iter(trained.values()))} steps"
    else:
        steps_text = "steps: " + ", ".join(f"{name} {n}" for name, n in trained.items()) if trained else "0 steps"
    if trained and untrained:
        steps_text += f" (no GRPO steps: {', '.join(untrained)})"
    return f"{' / '.join(models)} · {scale} · {steps_text} · seed {' / '.join(seeds)}"


def papers_per_month(stats: pd.DataFrame, since: str = "2016-01-01"):
    s = stats[stats["published"] >= pd.Timestamp(since)]
    monthly = s.groupby(s["published"].dt.to_period("M")).size().rename("papers").reset_index()
    monthly["month"] = monthly["published"].dt.to_timestamp()
    fig, ax = plt.subplots(figsize=(10, 3.5))
    sns.lineplot(data=monthly, x="month", y="papers", ax=ax, marker=".")
    ax.set(title=f"Papers per month (since {since[:4]}; {len(s):,} of {len(stats):,})", xlabel="", ylabel="papers")
    ax.set_yscale("log")
    return fig


def top_categories(stats: pd.DataFrame, top: int = 20):
    counts = stats["primary_category"].value_counts().head(top).rename_axis("category").reset_index(name="papers")
    fig, ax = plt.subplots(figsize=(7, 0.3 * top + 1))
    sns.barplot(data=counts, y="category", x="papers", ax=ax, color="C0")
    ax.set(title=f"Primary category, top {top}", ylabel="")
    return fig


def abstract_lengths(stats: pd.DataFrame):
    fig, ax = plt.subplots(figsize=(7, 3.5))
    sns.histplot(stats["abstract_words"], bins=60, ax=ax)
    med = stats["abstract_words"].median()
    ax.axvline(med, color="k", ls="--", lw=1)
    ax.set(title=f"Abstract length (median {med:.0f} words)", xlabel="words", ylabel="papers")
    return fig


def recall_by_difficulty(summary: pd.DataFrame, metrics: tuple[str, ...] = ("recall@10", "recall@50"), title: str = ""):
    """Grouped bars: one panel per metric, method x difficulty."""
    long = summary.melt(id_vars=["method", "difficulty", "n"], value_vars=list(metrics), var_name="metric", value_name="recall")
    order = [d for d in DIFFICULTY_ORDER if d in set(long["difficulty"])]
    g = sns.catplot(data=long, kind="bar", x="difficulty", y="recall", hue="method", col="metric", order=order,
                    height=3.6, aspect=1.3)
    g.set(ylim=(0, 1))
    if title:
        g.figure.suptitle(title, y=1.04)
    return g.figure


def agent_vs_baselines(per_query: pd.DataFrame, title: str = ""):
    """Left: recall@10 and search recall per method. Right: tool calls per episode per method."""
    scored = per_query[per_query["recall@10"].notna()]
    long = scored.melt(id_vars=["method"], value_vars=["recall@10", "search_recall"], var_name="metric", value_name="recall")
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    sns.barplot(data=long, y="method", x="recall", hue="metric", ax=axes[0], errorbar=("ci", 95))
    axes[0].set(xlim=(0, 1), ylabel="", title="Recall (95 % CI over queries)")
    sns.stripplot(data=scored, y="method", x="tool_calls", ax=axes[1], jitter=0.25, alpha=0.7)
    axes[1].set(ylabel="", title="Tool calls per episode")
    if title:
        fig.suptitle(title, y=1.03)
    fig.tight_layout()
    return fig


def labeller_agreement(summary: pd.DataFrame, title: str = ""):
    """Precision / recall / candidate recall of the labeller against the given gold, per difficulty."""
    long = summary.melt(id_vars=["difficulty", "n"], value_vars=["precision", "recall", "candidate_recall"],
                        var_name="metric", value_name="value")
    long["group"] = long["difficulty"] + " (n=" + long["n"].astype(str) + ")"
    fig, ax = plt.subplots(figsize=(7, 3.6))
    sns.barplot(data=long, x="group", y="value", hue="metric", ax=ax)
    ax.set(xlabel="", ylabel="share", ylim=(0, 1), title=title or "Labeller vs. given gold")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig


def triage_confusion(frame: pd.DataFrame, title: str = ""):
    """Given vs. predicted difficulty (queries with a given difficulty)."""
    levels = ["easy", "medium", "hard"]
    rated = frame.dropna(subset=["given"])
    table = pd.crosstab(pd.Categorical(rated["given"], levels), pd.Categorical(rated["predicted"], levels),
                        dropna=False).reindex(index=levels, columns=levels, fill_value=0)
    fig, ax = plt.subplots(figsize=(4.2, 3.6))
    sns.heatmap(table, annot=True, fmt="d", cmap="Blues", cbar=False, ax=ax)
    ax.set(xlabel="predicted", ylabel="given", title=title or "Difficulty triage")
    fig.tight_layout()
    return fig


def training_curves(log: pd.DataFrame, title: str = "", keys: Sequence[str] | None = None, smooth: int = 10):
    """TRL's per-step logs: reward, entropy, KL, tool-call frequency (whatever of them the run logged), four
    panels a row. A run longer than 30 steps is drawn as a line with its ``smooth``-step rolling mean."""
    keys = [k for k in (keys or ("reward", "entropy", "kl", "tools/call_frequency")) if k in log and log[k].notna().any()]
    cols = min(4, max(1, len(keys)))
    rows = max(1, -(-len(keys) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.8 * rows), squeeze=False)
    long = log["step"].nunique() > 30 if "step" in log else False
    for ax, key in zip(axes.flat, keys):
        data = log[["step", key]].dropna()
        sns.lineplot(data=data, x="step", y=key, marker=None if long else "o", alpha=0.35 if long else 1.0, ax=ax)
        if long:
            ax.plot(data["step"], data[key].rolling(smooth, min_periods=1).mean(), color="#c0392b", lw=1.6,
                    label=f"{smooth}-step mean")
            ax.legend(fontsize=6)
        ax.set(title=key, ylabel="")
    for ax in list(axes.flat)[len(keys):]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def tool_calls_per_rollout(frame: pd.DataFrame, title: str = "", max_boxes: int = 25):
    """The distribution of tool calls per rollout at each step (not only the mean); a long run is shown in
    windows of consecutive steps (at most ``max_boxes`` boxes)."""
    frame = frame.copy()
    steps = sorted(frame["step"].unique()) if len(frame) else []
    width = max(1, -(-len(steps) // max_boxes))
    xlabel = "step"
    if width > 1:
        first = frame["step"].min()
        frame["step"] = ((frame["step"] - first) // width) * width + first
        xlabel = f"first step of each window of {width} steps"
    fig, ax = plt.subplots(figsize=(8, 3.2))
    sns.boxplot(data=frame, x="step", y="tool_calls", color="#cfe0f3", fliersize=0, ax=ax)
    sns.stripplot(data=frame, x="step", y="tool_calls", size=2 if width > 1 else 3, color="#2a5783", alpha=0.5, ax=ax)
    ax.set(ylabel="tool calls per rollout", xlabel=xlabel, title=title or "Tool calls per rollout")
    ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    return fig


def failure_mode_rates(summary: pd.DataFrame, title: str = ""):
    """Per step: the share of rollouts showing each failure mode, and of single keyword + semantic rollouts."""
    cols = [c for c in summary.columns if c.startswith("fm_") and c.endswith("_rate")] + ["single_kw_single_sem_rate"]
    long = summary.melt(id_vars=["step"], value_vars=cols, var_name="measure", value_name="share")
    long["measure"] = long["measure"].str.removeprefix("fm_").str.removesuffix("_rate")
    fig, ax = plt.subplots(figsize=(8, 3.4))
    many = summary["step"].nunique() > 30
    if many:  # a long run: each measure's 10-step rolling mean (per-step shares of a few rollouts are noise-sized)
        long = long.sort_values("step")
        long["share"] = long.groupby("measure")["share"].transform(lambda x: x.rolling(10, min_periods=1).mean())
    sns.lineplot(data=long, x="step", y="share", hue="measure", marker=None if many else "o", ax=ax)
    ax.set(ylim=(-0.02, 1.02), title=title or "Failure modes per step",
           ylabel="share (10-step rolling mean)" if many else "share")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1, 0.5))
    fig.tight_layout()
    return fig


def step_time(timing: pd.DataFrame, title: str = ""):
    """Mean seconds per step: generation (model), tools, rewards, reference log-probs, loss forward,
    backward + optimizer (older runs: generation, tools, reward, update)."""
    fine = ["generation_model", "tools", "reward", "ref_logprobs", "loss_forward", "backward_optimizer"]
    parts = fine if all(p in timing for p in fine) else ["generation_model", "tools", "reward", "update"]
    means = timing[parts].mean()
    fig, ax = plt.subplots(figsize=(7, 2.2))
    left = 0.0
    for part, color in zip(parts, sns.color_palette("deep", len(parts))):
        ax.barh([0], [means[part]], left=left, color=color, label=f"{part} {means[part]:.1f} s")
        left += means[part]
    ax.set(yticks=[], xlabel="seconds per step (mean)", title=title or "Where the step time goes")
    ax.legend(fontsize=8, ncol=1, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return fig


def judge_matrix(mean: pd.DataFrame, count: pd.DataFrame, title: str = "", xlabel: str = "evaluation judge",
                 ylabel: str = "training judge", center: float | None = None):
    """A judge × judge heatmap: each cell the value and (n) the valid judgments behind it."""
    annot = mean.map(lambda v: "n/a" if pd.isna(v) else f"{v:.2f}") + count.map(lambda n: f"\n(n={n})")
    fig, ax = plt.subplots(figsize=(1.9 * len(mean.columns) + 2.4, 1.2 * len(mean.index) + 1.6))
    sns.heatmap(mean.astype(float), annot=annot, fmt="", cmap="viridis", vmin=0 if center is None else -1, vmax=1,
                center=center, cbar=True, ax=ax)
    ax.set_facecolor("#e0e0e0")  # cells without a value (no valid judgment, undefined correlation)
    for i, row in enumerate(mean.index):
        for j, col in enumerate(mean.columns):
            if pd.isna(mean.loc[row, col]):
                ax.text(j + 0.5, i + 0.5, f"n/a\n(n={count.loc[row, col]})", ha="center", va="center", color="#444444")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    fig.tight_layout()
    return fig


def recall_per_policy(table: pd.DataFrame, by: str, title: str = "",
                      metrics: Sequence[str] = ("recall@10", "search_recall")):
    """Recall@10 and search recall (or other 0–1 ``metrics``) per policy / training judge (bars)."""
    long = table.melt(id_vars=[by], value_vars=[m for m in metrics if m in table],
                      var_name="metric", value_name="value")
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * table[by].nunique() + 2), 3.4))
    sns.barplot(data=long, x=by, y="value", hue="metric", ax=ax)
    ax.set(xlabel="", ylabel="mean over queries", title=title, ylim=(0, 1))
    ax.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    return fig


def score_vs_recall(scores: pd.DataFrame, recall: str = "search_recall", title: str = ""):
    """Each valid judgment: the judge's score against the trajectory's recall, one panel per eval judge."""
    valid = scores[~scores["fallback"].astype(bool)]
    judges = list(dict.fromkeys(scores["eval_judge"]))
    fig, axes = plt.subplots(1, max(1, len(judges)), figsize=(3.6 * max(1, len(judges)), 3.2), squeeze=False)
    for ax, j in zip(axes[0], judges):
        sns.scatterplot(data=valid[valid["eval_judge"] == j], x=recall, y="score", hue="policy", ax=ax, s=50)
        ax.set(title=f"judge: {j}", xlim=(-0.05, 1.05), ylim=(-0.05, 1.05))
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def reward_noise(rollouts: pd.DataFrame, report: Mapping, title: str = ""):
    """Why recall is a noisy reward (``bench.bench_reward_noise``): left, each group's reward std under
    RLVR against under RaR (same rollouts; points off the x = 0 line are groups only the judge gives a
    gradient); right, of the rollout pairs RLVR ties, the share the judge and the failure-mode detectors
    separate, at reward 0 and above it, with n."""
    from .ablations import group_variance

    groups = group_variance(rollouts, {"rlvr": "rlvr", "rar": "rar"})
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    sns.scatterplot(data=groups, x="rlvr_std", y="rar_std", hue="run" if groups["run"].nunique() > 1 else None,
                    ax=a, s=40, alpha=0.7)
    top = max(0.05, float(groups[["rlvr_std", "rar_std"]].max().max()) * 1.05)
    a.plot([0, top], [0, top], color="grey", lw=0.8, ls="--")
    a.set(xlim=(-0.01, top), ylim=(-0.01, top), xlabel="RLVR reward std in the group",
          ylabel="RaR reward std (same rollouts)", title=f"{len(groups)} groups")
    rows = []
    for part, label in (("tied_at_zero", "tied at 0"), ("tied_above_zero", "tied above 0")):
        t = report["ties"][part]
        for who, name in (("judge_separates", "judge"), ("detectors_separate", "detectors"), ("either_separates", "either")):
            rows.append({"ties": f"{label} (n={t['pairs']})", "separated by": name, "share": t[who]["share"]})
    sns.barplot(data=pd.DataFrame(rows), x="ties", y="share", hue="separated by", ax=b)
    b.set(ylim=(0, 1), xlabel="rollout pairs the RLVR reward ties", ylabel="share separated")
    fig.suptitle(title)
    fig.tight_layout()
    return fig
