"""The corpus of arXiv AI papers and the training queries, as typed records.

Both files are read from one data directory (``ARXIVQA_DATA_DIR``, default ``../shared/data``);
see the README for how to obtain them elsewhere.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from . import config

# New-style (2504.21318) and old-style (cs/0112017, math.GT/0309136) arXiv identifiers, no version.
ARXIV_ID_RE = re.compile(r"^(\d{4}\.\d{4,5}|[a-z\-]+(\.[A-Z]{2})?/\d{7})$")

Difficulty = Literal["easy", "medium", "hard"]


class DataMissingError(FileNotFoundError):
    """The corpus or query file is not where the data-path setting points."""


class Paper(BaseModel):
    arxiv_id: str
    title: str
    abstract: str
    authors: list[str] = Field(default_factory=list)
    categories: list[str] = Field(default_factory=list)
    primary_category: str | None = None
    published: dt.date
    comment: str | None = None

    @field_validator("authors", "categories", mode="before")
    @classmethod
    def _none_is_empty(cls, v):
        return [] if v is None else v

    @property
    def text(self) -> str:
        """Title and abstract: what the indexes see."""
        return f"{self.title}\n{self.abstract}"

    def page_text(self) -> str:
        """The full text ``read_page`` serves (the corpus holds abstracts only, no PDF text)."""
        lines = [f"Title: {self.title}"]
        if self.authors:
            lines.append("Authors: " + ", ".join(self.authors))
        lines.append(f"Published: {self.published.isoformat()}")
        if self.categories:
            lines.append("Categories: " + ", ".join(self.categories))
        lines.append("")
        lines.append("Abstract: " + self.abstract)
        if self.comment:
            lines.append("")
            lines.append("Comment: " + self.comment)
        return "\n".join(lines)


class Query(BaseModel):
    qid: str
    query: str
    reference_answer: str | None = None
    gold: list[str] = Field(default_factory=list)
    gold_in_corpus: list[str] = Field(default_factory=list)
    difficulty: Difficulty | None = None
    source: str | None = None


def _require(path: Path) -> Path:
    if not path.exists():
        raise DataMissingError(
            f"{path} not found. Set ARXIVQA_DATA_DIR to the folder holding {config.CORPUS_FILE} and "
            f"{config.QUERIES_FILE} (now: {config.data_dir()}); see README, 'Data'."
        )
    return path


def corpus_path() -> Path:
    return config.data_dir() / config.CORPUS_FILE


def queries_path() -> Path:
    return config.data_dir() / config.QUERIES_FILE


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def iter_papers(path: str | Path | None = None) -> Iterator[Paper]:
    """Stream papers from a JSONL or JSONL.gz file (default: the configured corpus)."""
    path = _require(Path(path) if path else corpus_path())
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield Paper.model_validate_json(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{lineno}: not a valid paper record: {exc}") from exc


def load_queries(path: str | Path | None = None) -> list[Query]:
    """Read a query file in the ``queries_train.jsonl`` format."""
    path = _require(Path(path) if path else queries_path())
    out = []
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                try:
                    out.append(Query.model_validate_json(line))
                except ValueError as exc:
                    raise ValueError(f"{path}:{lineno}: not a valid query record: {exc}") from exc
    return out


def gold_ids(queries: Iterable[Query]) -> set[str]:
    return {pid for q in queries for pid in q.gold_in_corpus}


def _rank_key(arxiv_id: str, seed: int) -> str:
    return hashlib.sha1(f"{seed}:{arxiv_id}".encode()).hexdigest()


def select(
    papers: Iterable[Paper],
    n: int | None = None,
    categories: Iterable[str] | None = None,
    min_date: dt.date | str | None = None,
    max_date: dt.date | str | None = None,
    include_ids: Iterable[str] = (),
    seed: int = 0,
) -> list[Paper]:
    """A deterministic subset of ``papers``.

    Papers are kept when they match every given filter (any of ``categories``; ``min_date`` <=
    published <= ``max_date``); ``include_ids`` are always kept (e.g. the gold papers, so that a
    demo-scale index can still be scored). If ``n`` is given, the kept set is cut to ``n`` papers by a
    seeded hash order, which does not depend on file order. The result is sorted by arXiv ID.
    """
    cats = set(categories) if categories else None
    lo = dt.date.fromisoformat(min_date) if isinstance(min_date, str) else min_date
    hi = dt.date.fromisoformat(max_date) if isinstance(max_date, str) else max_date
    forced = set(include_ids)
    chosen: dict[str, Paper] = {}
    others: list[Paper] = []
    for p in papers:
        if p.arxiv_id in forced:
            chosen[p.arxiv_id] = p
        elif (
            (cats is None or cats.intersection(p.categories))
            and (lo is None or p.published >= lo)
            and (hi is None or p.published <= hi)
        ):
            others.append(p)
    if n is not None:
        if n < 0:
            raise ValueError("n must be >= 0")
        others.sort(key=lambda p: _rank_key(p.arxiv_id, seed))
        others = others[: max(0, n - len(chosen))]
    for p in others:
        chosen.setdefault(p.arxiv_id, p)
    return sorted(chosen.values(), key=lambda p: p.arxiv_id)


def demo_papers(n: int = 20_000, seed: int = 0, path: str | Path | None = None) -> list[Paper]:
    """The default demo-scale corpus: every gold paper of the train queries plus a seeded sample,
    ``n`` papers in all. (Keeping the gold papers makes recall on the demo index higher than on
    the full corpus, where the distractors are seven times as many.)"""
    return select(iter_papers(path), n=n, include_ids=gold_ids(load_queries()), seed=seed)
