"""Seaborn figures for the notebooks; ``save`` writes them under ``results/`` atomically."""

from __future__ import annotations

import io
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
