"""Every setting of the project, read from the environment in one place.

``settings()`` returns a typed ``Settings`` object built from the ``ARXIVQA_*`` variables (re-read only
when one of them changes); every module and notebook takes its values from it, and no other module
reads ``os.environ``. Secrets (API keys) are not settings: ``secret(name)`` reads the variable that an
endpoint names, and its value is never stored, logged or written to results.

The README's settings table is ``python -m arxivqa.config table`` (a test keeps the two identical).
Relative paths are taken relative to the current working directory, like any path a user types.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

REPO_ROOT = Path(__file__).resolve().parents[2]

CORPUS_FILE = "arxiv_ai_papers.jsonl.gz"
QUERIES_FILE = "queries_train.jsonl"
PREFIX = "ARXIVQA_"
SCALES = ("demo", "full")


def _repo(*parts: str) -> Path:
    return REPO_ROOT.joinpath(*parts).resolve()


def _names(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


class Settings(BaseModel):
    """The project's settings. Each field's environment variable is ``ARXIVQA_<FIELD NAME IN CAPITALS>``."""

    model_config = {"frozen": True}

    # -- where things live
    data_dir: Path = Field(_repo("..", "shared", "data"), description="folder with `arxiv_ai_papers.jsonl.gz` and `queries_train.jsonl`")
    index_dir: Path = Field(_repo("data", "index"), description="where indexes are built (git-ignored)")
    results_dir: Path = Field(_repo("results"), description="where notebooks and benchmarks write; committed runs live in its `runs/`")
    models_dir: Path = Field(_repo("data", "models"), description="converted local models, the distilled embedder")
    runs_dir: Path = Field(_repo("data", "runs"), description="training runs trained here (checkpoints, rollouts, logs; git-ignored)")
    episodes_dir: Path = Field(_repo("data", "episodes"), description="evaluated episodes of notebooks 06/07, reused by later runs")
    cache_dir: Path = Field(_repo("data", "cache"), description="the LLM response cache (`llm.sqlite`)")
    labels_dir: Path = Field(_repo("data", "labels"), description="the label store (`labels.json`), labeller runs, the curated query file")
    endpoints: Path = Field(_repo("configs", "endpoints.toml"), description="the endpoint configuration file")
    # -- corpus and index
    scale: Literal["demo", "full"] = Field("demo", description="`demo`: every gold paper + a seeded sample; `full`: all 139,670 papers")
    demo_papers: int = Field(20000, ge=1, description="size of the demo index")
    keyword_engine: Literal["bm25s", "whoosh"] = Field("bm25s", description="engine behind `keyword_search`: `bm25s` or `whoosh`")
    semantic_search: Literal["exact", "hnsw"] = Field("exact", description="`exact` (one matrix product over chromadb's vectors) or `hnsw` (chromadb's own query)")
    embedder: str = Field("static", description="`static` (model2vec distilled from MiniLM), `minilm`, `minilm-128`, or `st:<hub id or folder>`")
    # -- models and endpoints
    model: str = Field("qwen2.5-coder-0.5b-instruct", description="the local policy model: the packaged name, a local folder, or (with internet) a hub ID")
    llm: str = Field("local", description="the LLM of the labeller (any LLM name: see \"LLM names\")")
    local_llm_url: str | None = Field(None, description="reuse a running local server (`make serve` prints it) instead of starting one per process")
    policy: str = Field("local", description="notebook 03's policy: an LLM name or `run:<run folder or name>`")
    context_window: int | None = Field(None, ge=0, description="the policy model's context window in tokens: before each turn the agent trims the conversation to fit it (older tool results to IDs and titles, then the oldest turns dropped with a note; `context.fit_context`). Default: the model's config (in-process) or what the server reports (llama.cpp `/props`, vLLM `/v1/models`), else no limit; 0: no trimming")
    judge: str = Field("local", description="the training judge of notebook 05 (an LLM name)")
    frontier: str = Field("openai-gpt-4.1-mini", description="the frontier agent of notebook 07 (an LLM name); used only when its key variable is set")
    # -- what the notebooks run
    preset: str = Field("cpu-demo", description="the training preset of notebooks 04–07: `cpu-demo` or `paper` (GPU)")
    train_steps: int | None = Field(20, ge=1, description="GRPO steps of the RLVR runs (cpu-demo; `paper` keeps its own unless set)")
    rar_steps: int | None = Field(10, ge=1, description="GRPO steps of each RaR run (likewise)")
    curriculum: Literal["uniform", "easy-to-hard"] = Field("uniform", description="RLVR query order: `uniform` or `easy-to-hard`")
    compare_curriculum: bool = Field(False, description="notebook 04 also trains the other curriculum and compares")
    train_now: bool = Field(False, description="notebooks 04 and 05 train their configured run even when the repository holds committed runs (`make demo` sets it); otherwise they read them")
    label_queries: int = Field(3, ge=0, description="train queries the labeller runs on in notebook 02")
    triage_queries: int = Field(6, ge=0, description="train queries triaged in notebook 02")
    demo_episodes: int = Field(3, ge=1, description="dev episodes of notebook 03")
    train_judges: list[str] = Field(["local", "local-smollm2"], description="training judges of the ablation runs (comma-separated LLM names; 06, 07)")
    eval_judges: list[str] = Field(["local", "local-smollm2"], description="evaluation judges (comma-separated LLM names; 06, 07)")
    eval_queries_file: Path | None = Field(None, description="held-out queries of 06/07 (any file in the `queries_train.jsonl` format; default the train file)")
    eval_split: Literal["train", "dev", "all"] = Field("dev", description="which part of that file: `dev`, `train` or `all`")
    eval_limit: int | None = Field(None, ge=1, description="the first N scorable queries of that part (default all)")
    eval_budgets: str | None = Field(None, description="episode budgets of 06/07: `max_turns,max_tool_calls,max_tokens,max_new_tokens` (default `10,30,6000,384`)")
    eval_batch: int = Field(8, ge=1, description="episodes an in-process policy runs in lockstep (batched decoding, KV cache kept between turns); 1: one at a time")

    @classmethod
    def env_var(cls, field: str) -> str:
        return PREFIX + field.upper()

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        """The settings that ``environ`` (default ``os.environ``) gives; a bad value names its variable."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name, info in cls.model_fields.items():
            raw = environ.get(cls.env_var(name))
            if raw is None or raw == "":
                continue
            annotation = str(info.annotation)
            if "list" in annotation:
                values[name] = _names(raw)
            elif "bool" in annotation:
                values[name] = raw.strip().lower() in ("1", "true", "yes", "on")
            elif "Path" in annotation:
                values[name] = Path(raw).expanduser().resolve()
            else:
                values[name] = raw
        try:
            return cls(**values)
        except ValidationError as exc:
            problems = "; ".join(f"{cls.env_var(str(e['loc'][0]))}={environ.get(cls.env_var(str(e['loc'][0])))!r}: "
                                 f"{e['msg']}" for e in exc.errors())
            raise ValueError(f"invalid setting: {problems}") from None

    @classmethod
    def table(cls) -> str:
        """The README's settings table (Markdown)."""
        rows = ["| setting | environment variable | default | meaning |", "|---|---|---|---|"]
        for name, info in cls.model_fields.items():
            default = info.default
            if isinstance(default, Path):
                try:
                    default = "<repo>/" + str(default.resolve().relative_to(REPO_ROOT.resolve()))
                except ValueError:
                    default = "<repo>/" + os.path.relpath(default, REPO_ROOT)
            elif isinstance(default, list):
                default = ",".join(default)
            rows.append(f"| `{name}` | `{cls.env_var(name)}` | `{default}` | {info.description} |")
        return "\n".join(rows)


_LOCK = threading.Lock()
_CACHE: tuple[tuple, Settings] | None = None


def settings_with(recorded: dict[str, str] | None) -> Settings:
    """The settings the environment gives with ``recorded`` (values by environment variable, e.g. those a demo
    ran with) over it."""
    return Settings.from_env({**os.environ, **(recorded or {})})


def settings() -> Settings:
    """The current settings: the environment is read once and again only when an ``ARXIVQA_*`` variable changed."""
    global _CACHE
    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(PREFIX)))
    with _LOCK:
        if _CACHE is None or _CACHE[0] != key:
            _CACHE = (key, Settings.from_env())
        return _CACHE[1]


def secret(var: str | None) -> str | None:
    """The value of the environment variable ``var`` that holds a secret (an API key), or None."""
    return os.environ.get(var) if var else None


def set_library_default(var: str, value: str) -> None:
    """A default for a third-party library's own variable (e.g. ``TRL_EXPERIMENTAL_SILENCE``); a value the
    user set wins."""
    os.environ.setdefault(var, value)


def set_offline() -> None:
    """Never reach a model hub from this process unless the user said so (``HF_HUB_OFFLINE``)."""
    set_library_default("HF_HUB_OFFLINE", "1")


def offline_environment() -> dict[str, str]:
    """The environment for a child process (a local model server), offline unless the user said otherwise."""
    set_offline()
    return dict(os.environ)


def process_rank() -> tuple[int, int]:
    """(rank, number of processes) of this training process: ``accelerate launch`` / ``torchrun`` set
    ``RANK`` and ``WORLD_SIZE``; a plain ``python -m arxivqa.train`` is (0, 1)."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def child_environment(path_first: str | None = None) -> dict[str, str]:
    """``offline_environment()`` with ``path_first`` put in front of ``PYTHONPATH`` (a child that imports
    this package from the same checkout)."""
    env = offline_environment()
    if path_first:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (path_first, env.get("PYTHONPATH")) if p)
    return env


# Shorthands for the two settings that nearly every notebook and writer needs.
def results_dir() -> Path:
    return settings().results_dir


def run_roots() -> list[Path]:
    """Where training runs are looked for: runs trained here (``runs_dir``), then runs committed with the
    repository (``<results_dir>/runs``)."""
    s = settings()
    return [s.runs_dir, s.results_dir / "runs"]


def scale() -> str:
    return settings().scale


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m arxivqa.config", description="Show the settings.")
    ap.add_argument("what", choices=("table", "show"), help="table: the README's table; show: the current values")
    a = ap.parse_args(argv)
    if a.what == "table":
        print(Settings.table())
    else:
        for k, v in settings().model_dump().items():
            print(f"{Settings.env_var(k)}={v}")


if __name__ == "__main__":
    main()
