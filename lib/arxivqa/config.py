"""Paths and settings, all overridable from the environment.

| setting            | env var               | default                         |
|--------------------|-----------------------|---------------------------------|
| data directory     | ``ARXIVQA_DATA_DIR``  | ``<repo>/../shared/data``       |
| index directory    | ``ARXIVQA_INDEX_DIR`` | ``<repo>/data/index``           |
| results directory  | ``ARXIVQA_RESULTS_DIR`` | ``<repo>/results``            |
| model directory    | ``ARXIVQA_MODELS_DIR``| ``<repo>/data/models``          |
| training runs      | ``ARXIVQA_RUNS_DIR``  | ``<repo>/data/runs``            |
| scale              | ``ARXIVQA_SCALE``     | ``demo`` (or ``full``)          |
| demo corpus size   | ``ARXIVQA_DEMO_PAPERS`` | ``20000``                     |
| keyword engine     | ``ARXIVQA_KEYWORD_ENGINE`` | ``bm25s`` (or ``whoosh``)  |
| semantic search    | ``ARXIVQA_SEMANTIC_SEARCH`` | ``exact`` (or ``hnsw``)   |

Relative values are taken relative to the current working directory, like any path a user types.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

CORPUS_FILE = "arxiv_ai_papers.jsonl.gz"
QUERIES_FILE = "queries_train.jsonl"


def _path(var: str, default: Path) -> Path:
    value = os.environ.get(var)
    return Path(value).expanduser().resolve() if value else default.resolve()


def data_dir() -> Path:
    """Where the corpus and query files live (``ARXIVQA_DATA_DIR``)."""
    return _path("ARXIVQA_DATA_DIR", REPO_ROOT.parent / "shared" / "data")


def index_dir() -> Path:
    """Root under which indexes are built (``ARXIVQA_INDEX_DIR``); git-ignored by default."""
    return _path("ARXIVQA_INDEX_DIR", REPO_ROOT / "data" / "index")


def results_dir() -> Path:
    """Where notebooks and benchmarks write tables and figures (``ARXIVQA_RESULTS_DIR``)."""
    return _path("ARXIVQA_RESULTS_DIR", REPO_ROOT / "results")


def models_dir() -> Path:
    """Where derived local models (e.g. the distilled static embedder) are kept (``ARXIVQA_MODELS_DIR``)."""
    return _path("ARXIVQA_MODELS_DIR", REPO_ROOT / "data" / "models")


def runs_dir() -> Path:
    """Where training runs keep checkpoints, rollouts and logs (``ARXIVQA_RUNS_DIR``); git-ignored by default."""
    return _path("ARXIVQA_RUNS_DIR", REPO_ROOT / "data" / "runs")


def episodes_dir() -> Path:
    """Where notebooks 06/07 keep evaluated episodes for reuse (``ARXIVQA_EPISODES_DIR``); git-ignored,
    so a clean checkout evaluates afresh."""
    return _path("ARXIVQA_EPISODES_DIR", REPO_ROOT / "data" / "episodes")


SCALES = ("demo", "full")


def scale() -> str:
    """``demo`` (a CPU-sized subset, the default) or ``full`` (the whole corpus): a setting, not a code path."""
    value = os.environ.get("ARXIVQA_SCALE", "demo")
    if value not in SCALES:
        raise ValueError(f"ARXIVQA_SCALE must be one of {SCALES}, got {value!r}")
    return value


def demo_papers() -> int:
    """How many papers the demo-scale index holds (``ARXIVQA_DEMO_PAPERS``)."""
    return int(os.environ.get("ARXIVQA_DEMO_PAPERS", "20000"))


def keyword_engine() -> str:
    """The engine behind ``keyword_search``: ``bm25s`` (default, fast) or ``whoosh`` (``ARXIVQA_KEYWORD_ENGINE``)."""
    return os.environ.get("ARXIVQA_KEYWORD_ENGINE", "bm25s")


def semantic_search_mode() -> str:
    """How ``semantic_search`` queries chromadb's vectors: ``exact`` (default) or ``hnsw`` (``ARXIVQA_SEMANTIC_SEARCH``)."""
    return os.environ.get("ARXIVQA_SEMANTIC_SEARCH", "exact")
