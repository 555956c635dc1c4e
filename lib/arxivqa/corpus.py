"""The corpus of arXiv AI papers and the training queries, as typed records.

Both files are read from one data directory (``ARXIVQA_DATA_DIR``, default ``../shared/data``);
see the README for how to obtain them elsewhere.

**Loading rules.** Every loading error is a ``DataError`` (a ValueError) that names the file and the
line: a record that is not valid (an empty ``arxiv_id``, ``title``, ``abstract``, ``qid`` or ``query``
included), bytes that are not UTF-8, a gzip stream cut short or corrupt (after the last good line).
A duplicate ID is refused when its record differs from the first one (both lines named); an exact
repeat of a record is skipped and reported once per file (a ``DataWarning`` with the count and the
first examples). ``select`` applies the same rule to the papers it is given.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import re
import time
import warnings
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, Field, field_validator

from . import config

Difficulty = Literal["easy", "medium", "hard"]


class DataMissingError(FileNotFoundError):
    """The corpus or query file is not where the data-path setting points."""


class DataError(ValueError):
    """A corpus or query file that cannot be loaded as it is; the message names the file and line."""


class DataWarning(UserWarning):
    """Something in a data file was skipped (exact duplicate records); the message counts them."""


def _non_empty(v: str) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ValueError("must not be empty")
    return v


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

    @field_validator("arxiv_id", "title", "abstract")
    @classmethod
    def _required(cls, v: str) -> str:
        return _non_empty(v)

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

    @field_validator("qid", "query")
    @classmethod
    def _required(cls, v: str) -> str:
        return _non_empty(v)


def _require(path: Path) -> Path:
    if not path.exists():
        raise DataMissingError(
            f"{path} not found. Set ARXIVQA_DATA_DIR to the folder holding {config.CORPUS_FILE} and "
            f"{config.QUERIES_FILE} (now: {config.settings().data_dir}); see README, 'Data'."
        )
    return path


def corpus_path() -> Path:
    return config.settings().data_dir / config.CORPUS_FILE


def queries_path() -> Path:
    return config.settings().data_dir / config.QUERIES_FILE


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-blank line; a ``DataError`` naming the file and line for bytes
    that are not UTF-8 and for a gzip stream that is cut short or corrupt."""
    opener = gzip.open if path.suffix == ".gz" else open
    lineno = 0  # the last whole line read
    try:
        with opener(path, "rb") as fh:
            for n, raw in enumerate(fh, 1):
                if not raw.endswith(b"\n"):  # the last line: whole only if the stream ends cleanly
                    fh.read()  # raises EOFError for a stream cut short
                lineno = n
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise DataError(f"{path}:{lineno}: not UTF-8 text (byte {exc.start} of the line: "
                                    f"{raw[max(0, exc.start - 10):exc.start + 10]!r})") from None
                if line.strip():
                    yield lineno, line
    except EOFError:
        raise DataError(f"{path}: the compressed file is cut short after line {lineno} (an incomplete copy or "
                        "download? fetch the file again)") from None
    except (gzip.BadGzipFile, zlib.error, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise DataError(f"{path}: the file is corrupt after line {lineno} ({type(exc).__name__}: {exc}); "
                        "fetch the file again") from None


class _Duplicates:
    """The duplicate rule for one file: a repeated ID with the same record is skipped (and counted), a
    repeated ID with another record is refused."""

    def __init__(self, path: Path, what: str) -> None:
        self.path, self.what = path, what
        self.first: dict[str, tuple[int, int]] = {}  # id -> (line, hash of the record)
        self.skipped: list[tuple[int, str, int]] = []  # (line, id, line of the first copy)

    def keep(self, key: str, lineno: int, record: BaseModel) -> bool:
        digest = hash(record.model_dump_json())
        seen = self.first.get(key)
        if seen is None:
            self.first[key] = (lineno, digest)
            return True
        if seen[1] != digest:
            raise DataError(f"{self.path}:{lineno}: duplicate {self.what} {key!r} with a different record than "
                            f"line {seen[0]}; remove or rename one of them")
        self.skipped.append((lineno, key, seen[0]))
        return False

    def report(self) -> None:
        if self.skipped:
            examples = ", ".join(f"line {ln} ({key!r} = line {first})" for ln, key, first in self.skipped[:3])
            warnings.warn(f"{self.path}: skipped {len(self.skipped)} exact duplicate record(s) of an earlier "
                          f"{self.what}: {examples}{' ...' if len(self.skipped) > 3 else ''}", DataWarning,
                          stacklevel=4)


def _records(path: Path, model: type, key: str, what: str) -> Iterator:
    """The valid records of a JSONL(.gz) file, by the loading rules of the module docstring."""
    dups = _Duplicates(path, key)
    for lineno, line in _lines(path):
        try:
            record = model.model_validate_json(line)
        except ValueError as exc:
            raise DataError(f"{path}:{lineno}: not a valid {what} record: {exc}") from None
        if dups.keep(getattr(record, key), lineno, record):
            yield record
    dups.report()


def iter_papers(path: str | Path | None = None) -> Iterator[Paper]:
    """Stream papers from a JSONL or JSONL.gz file (default: the configured corpus), by the loading
    rules of the module docstring."""
    yield from _records(_require(Path(path) if path else corpus_path()), Paper, "arxiv_id", "paper")


def load_queries(path: str | Path | None = None) -> list[Query]:
    """Read a query file in the ``queries_train.jsonl`` format, by the loading rules of the module
    docstring."""
    return list(_records(_require(Path(path) if path else queries_path()), Query, "qid", "query"))


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
    seen: dict[str, Paper] = {}
    for p in papers:
        if p.arxiv_id in seen:  # the loading rule: an exact repeat is skipped, another record is refused
            if seen[p.arxiv_id] != p:
                raise DataError(f"select: two different papers share the arXiv ID {p.arxiv_id!r}")
            continue
        seen[p.arxiv_id] = p
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


def papers_for_scale(scale: str | None = None, seed: int = 0, path: str | Path | None = None) -> list[Paper]:
    """The papers an index of this scale holds. ``full``: the whole corpus. ``demo``: every gold
    paper of the train queries plus a seeded sample, ``ARXIVQA_DEMO_PAPERS`` (20,000) in all; keeping
    the gold papers makes recall on the demo index higher than on the full corpus, where the
    distractors are about seven times as many."""
    scale = scale or config.scale()
    papers = iter_papers(path)
    if scale == "full":
        return list(papers)
    return select(papers, n=config.settings().demo_papers, include_ids=gold_ids(load_queries()), seed=seed)


def stats_frame(papers: Iterable[Paper]):
    """One row per paper: what the corpus-statistics plots need."""
    import pandas as pd

    return pd.DataFrame(
        {
            "arxiv_id": p.arxiv_id,
            "published": pd.Timestamp(p.published),
            "primary_category": p.primary_category or (p.categories[0] if p.categories else "(none)"),
            "n_categories": len(p.categories),
            "abstract_chars": len(p.abstract),
            "abstract_words": len(p.abstract.split()),
            "n_authors": len(p.authors),
        }
        for p in papers
    )


class Split(NamedTuple):
    """The two parts of a query file, by name (never unpack them by position)."""

    train: list[Query]
    dev: list[Query]


SPLITS = ("train", "dev", "all")


def split_queries(queries: Sequence[Query], dev_fraction: float = 0.3, seed: int = 0) -> Split:
    """A deterministic train/dev split, stratified by difficulty (unrated is its own stratum).

    Queries with the same text (some were labelled twice) always fall on the same side. Within a
    stratum, query texts are ordered by a seeded hash and the first ``round(n * dev_fraction)``
    go to dev. Use ``select_queries`` rather than this: it names the part it returns.
    """
    if not 0.0 <= dev_fraction <= 1.0:
        raise ValueError("dev_fraction must be within [0, 1]")

    def text_key(q: Query) -> str:
        return " ".join(q.query.lower().split())

    stratum_of: dict[str, str | None] = {}  # a text's stratum: the difficulty of its first copy
    for q in queries:
        stratum_of.setdefault(text_key(q), q.difficulty)
    strata: dict[str | None, list[str]] = {}
    for key, diff in stratum_of.items():
        strata.setdefault(diff, []).append(key)
    dev_keys: set[str] = set()
    for keys in strata.values():
        keys = sorted(keys, key=lambda k: _rank_key(k, seed))
        dev_keys.update(keys[: round(len(keys) * dev_fraction)])
    return Split(train=[q for q in queries if text_key(q) not in dev_keys],
                 dev=[q for q in queries if text_key(q) in dev_keys])


def scorable(queries: Iterable[Query]) -> list[Query]:
    """The queries with at least one gold paper in the corpus (the others give no recall signal)."""
    return [q for q in queries if q.gold_in_corpus]


class Selection(NamedTuple):
    """Queries drawn from one part of a query file, and what they are."""

    queries: list[Query]
    split: str
    source: str  # the query file's name
    unscorable: int  # queries of the part left out for having no gold paper in the corpus

    @property
    def tag(self) -> str:
        """Names exactly this selection (cached episodes are keyed by it)."""
        return f"{Path(self.source).stem}-{self.split}{len(self.queries)}"


def select_queries(path: str | Path | None = None, split: str = "dev", limit: int | None = None,
                   scorable_only: bool = True) -> Selection:
    """The one way to draw queries: ``split`` is ``train`` or ``dev`` (the parts of ``split_queries``) or
    ``all`` (a held-out file); only scorable queries unless told; the first ``limit`` of them."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    path = Path(path) if path else queries_path()
    queries = load_queries(path)
    part = queries if split == "all" else getattr(split_queries(queries), split)
    kept = scorable(part) if scorable_only else list(part)
    return Selection(kept[:limit] if limit else kept, split, path.name, len(part) - len(scorable(part)))


# --------------------------------------------------------------------------- fetching (needs internet)

ARXIV_API = "http://export.arxiv.org/api/query"
DEFAULT_CATEGORIES = ("cs.AI", "cs.LG", "cs.CL", "cs.CV", "cs.IR", "cs.MA", "cs.RO", "stat.ML")
_ATOM = {"a": "http://www.w3.org/2005/Atom", "arxiv": "http://arxiv.org/schemas/atom"}
_VERSION_RE = re.compile(r"v\d+$")


def parse_arxiv_atom(xml_text: str) -> list[Paper]:
    """Papers from one page of the arXiv API's Atom feed."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(xml_text)
    out = []
    for e in root.findall("a:entry", _ATOM):
        raw_id = (e.findtext("a:id", "", _ATOM) or "").rsplit("/abs/", 1)[-1]
        if not raw_id:
            continue

        def text(tag, e=e):
            return " ".join((e.findtext(tag, "", _ATOM) or "").split())

        primary = e.find("arxiv:primary_category", _ATOM)
        if not text("a:title") or not text("a:summary"):  # the loading rules refuse empty fields
            continue
        out.append(Paper(
            arxiv_id=_VERSION_RE.sub("", raw_id),
            title=text("a:title"),
            abstract=text("a:summary"),
            authors=[" ".join((a.findtext("a:name", "", _ATOM) or "").split()) for a in e.findall("a:author", _ATOM)],
            categories=[c.get("term") for c in e.findall("a:category", _ATOM) if c.get("term")],
            primary_category=primary.get("term") if primary is not None else None,
            published=dt.date.fromisoformat(text("a:published")[:10]),
            comment=text("arxiv:comment") or None,
        ))
    return out


def _month_windows(start: dt.date, end: dt.date):
    cur = start
    while cur <= end:
        nxt = (cur.replace(day=1) + dt.timedelta(days=32)).replace(day=1)
        yield cur, min(end, nxt - dt.timedelta(days=1))
        cur = nxt


def fetch_arxiv(out: str | Path, start: dt.date | str, end: dt.date | str, categories: Iterable[str] = DEFAULT_CATEGORIES,
                api_url: str = ARXIV_API, page_size: int = 1000, delay: float = 3.0, retries: int = 3) -> int:
    """Rebuild a corpus file in this project's format from the public arXiv API (needs internet).

    Queries every category month by month (``cat:X AND submittedDate:[..]``), pages through the
    results, keeps the first version's metadata, de-duplicates cross-listed papers and writes
    ``out`` (JSONL, gzipped if it ends in .gz) atomically. ``delay`` seconds between requests follows
    arXiv's API etiquette. The shared corpus was assembled from daily listing mirrors instead, so a
    fetched corpus is similar, not identical (see README, "Data").
    """
    import urllib.error
    import urllib.parse
    import urllib.request

    from tqdm.auto import tqdm

    from .files import atomic_write_bytes

    lo = dt.date.fromisoformat(start) if isinstance(start, str) else start
    hi = dt.date.fromisoformat(end) if isinstance(end, str) else end
    papers: dict[str, Paper] = {}
    windows = [(c, a, b) for c in categories for a, b in _month_windows(lo, hi)]
    first = True
    for cat, a, b in tqdm(windows, desc="arXiv API", unit="month"):
        offset = 0
        while True:
            query = f"cat:{cat} AND submittedDate:[{a:%Y%m%d}0000 TO {b:%Y%m%d}2359]"
            url = f"{api_url}?" + urllib.parse.urlencode(
                {"search_query": query, "start": offset, "max_results": page_size, "sortBy": "submittedDate", "sortOrder": "ascending"})
            for attempt in range(retries + 1):
                if not first:
                    time.sleep(delay * (2 ** attempt if attempt else 1))
                first = False
                try:
                    with urllib.request.urlopen(url, timeout=60) as resp:
                        page = parse_arxiv_atom(resp.read().decode("utf-8"))
                    break
                except (urllib.error.URLError, TimeoutError) as exc:
                    if attempt == retries:
                        raise ConnectionError(f"arXiv API unreachable at {api_url} ({exc}); fetching needs internet") from exc
            for p in page:
                papers.setdefault(p.arxiv_id, p)
            if len(page) < page_size:
                break
            offset += page_size
    lines = "".join(papers[k].model_dump_json() + "\n" for k in sorted(papers)).encode("utf-8")
    out = Path(out)
    atomic_write_bytes(out, gzip.compress(lines) if out.suffix == ".gz" else lines)
    return len(papers)


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m arxivqa.corpus", description="Corpus utilities.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="rebuild a corpus file from the public arXiv API (needs internet)")
    f.add_argument("--out", default=None, help=f"default: <ARXIVQA_DATA_DIR>/{config.CORPUS_FILE}")
    f.add_argument("--start", default="2025-03-01")
    f.add_argument("--end", default=dt.date.today().isoformat())
    f.add_argument("--categories", default=",".join(DEFAULT_CATEGORIES))
    f.add_argument("--api-url", default=ARXIV_API)
    sub.add_parser("stats", help="count papers and queries in the configured data directory")
    a = ap.parse_args(argv)
    if a.cmd == "fetch":
        n = fetch_arxiv(a.out or corpus_path(), a.start, a.end, a.categories.split(","), a.api_url)
        print(f"wrote {n} papers to {a.out or corpus_path()}")
    else:
        n = sum(1 for _ in iter_papers())
        qs = load_queries()
        print(f"{corpus_path()}: {n} papers; {queries_path()}: {len(qs)} queries, "
              f"{sum(bool(q.gold_in_corpus) for q in qs)} with gold in the corpus")


if __name__ == "__main__":
    main()
