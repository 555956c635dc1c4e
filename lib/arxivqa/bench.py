"""Benchmarks that write to ``results/`` (never timed asserts in tests).

``python -m arxivqa.bench agent --policy <policy>`` measures episodes/min of an in-process policy one
episode at a time vs in lockstep batches (``results/bench_agent.json``).

``python -m arxivqa.bench context --policy <policy> --limit 10 --window 8192`` runs the same dev episodes
without a context budget and with one (``context.fit_context`` at ``--window`` tokens): prompt tokens
per turn, seconds per episode, recall, the requests that would not have fitted the window, what was
trimmed (``results/bench_context.json``).

``python -m arxivqa.bench judge-precision`` judges a few pairs of the judge validity set with a probability judge
loaded in bfloat16 and quantised to int8 (PyTorch dynamic quantisation): seconds per judgment and pairs ordered
right (``results/bench_judge_precision.json``).

``python -m arxivqa.bench search`` measures, on the full corpus by default:

- index build time and throughput: document store, bm25s, whoosh, embeddings (default embedder);
- latency p50/p95 over the train queries of each keyword engine (whoosh: AND-first query shaping on
  every query, plain OR top-50 on a sample, since it takes seconds a query) and of the tools
  ``keyword_search`` / ``semantic_search`` as the agent sees them (snippets, formatting included);
- one-shot recall@10/@50 of each keyword engine and of dense retrieval on the full index;
- the embedding options side by side on one quality sub-corpus (every gold paper + a seeded sample):
  throughput (docs/s) and dense recall@10/@50, exact cosine search.

Writes ``results/bench_search.json`` and ``results/bench_search.md``. The index it builds (from
scratch: it deletes ``<index dir>/<name>`` first) is the full index the notebooks use with
``ARXIVQA_SCALE=full``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from . import config
from .corpus import Query, gold_ids, iter_papers, load_queries, scorable, select
from .embed import get_embedder
from .files import atomic_write_json, atomic_write_text
from .index import Bm25sEngine, SearchIndex, SemanticIndex, WhooshEngine
from .records import recall_at_k
from .tools import ArxivEnv


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1000.0, q)) if xs else float("nan")


def _latency(fn, queries: list[Query]) -> dict:
    times, outs = [], []
    for q in queries:
        t0 = time.perf_counter()
        outs.append(fn(q))
        times.append(time.perf_counter() - t0)
    return {"n": len(queries), "p50_ms": _pct(times, 50), "p95_ms": _pct(times, 95),
            "mean_ms": 1000 * statistics.fmean(times) if times else float("nan")}, outs


def _recall(rankings: list[list[str]], queries: list[Query]) -> dict:
    rows = [(r, q) for r, q in zip(rankings, queries) if q.gold_in_corpus]
    return {f"recall@{k}": float(np.mean([recall_at_k(r, q.gold_in_corpus, k) for r, q in rows])) if rows else None
            for k in (10, 50)} | {"n_scored": len(rows)}


def _machine() -> dict:
    from .models import cpu_name

    cpu = cpu_name()
    import bm25s
    import chromadb
    import torch
    import whoosh

    return {"cpus": os.cpu_count(), "cpu_model": cpu, "python": platform.python_version(),
            "torch_threads": torch.get_num_threads(), "bm25s": bm25s.__version__, "whoosh": whoosh.versionstring(),
            "chromadb": chromadb.__version__}


def bench_search(corpus: str | None = None, queries_file: str | None = None, name: str = "full",
                 engines: tuple[str, ...] = ("bm25s", "whoosh"), embedder: str | None = None,
                 compare_embedders: tuple[str, ...] = ("static", "minilm-128", "minilm"), quality_docs: int = 5000,
                 whoosh_or_sample: int = 20, out_dir: Path | None = None) -> dict:
    out_dir = Path(out_dir) if out_dir else config.results_dir()
    report: dict = {"machine": _machine(), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "index_name": name}
    queries = load_queries(queries_file)
    t0 = time.perf_counter()
    papers = list(iter_papers(corpus))
    report["corpus"] = {"papers": len(papers), "load_seconds": time.perf_counter() - t0}
    print(f"corpus: {len(papers)} papers in {report['corpus']['load_seconds']:.1f}s", flush=True)

    folder = config.settings().index_dir / name
    shutil.rmtree(folder, ignore_errors=True)
    index = SearchIndex(folder, keyword_engine=engines[0], embedder=embedder)
    t0 = time.perf_counter()
    index.build(papers, keyword_engines=[], semantic=False)
    report["docstore_seconds"] = time.perf_counter() - t0

    # ---- keyword engines
    report["keyword"] = {}
    for engine in engines:
        t0 = time.perf_counter()
        index.build([], keyword_engines=[engine], semantic=False)
        build_s = time.perf_counter() - t0
        eng = Bm25sEngine(folder / "bm25s") if engine == "bm25s" else WhooshEngine(folder / "whoosh")

        def run(q, eng=eng, k=10):
            return [h.arxiv_id for h in eng.search(_terms(index, q.query), k)]

        lat10, _ = _latency(run, queries)
        lat50, rank50 = _latency(lambda q: run(q, k=50), queries)
        entry = {"build_seconds": build_s, "docs_per_second": len(papers) / build_s,
                 "latency_top10": lat10, "latency_top50": lat50, **_recall(rank50, queries)}
        if engine == "whoosh" and whoosh_or_sample:
            plain = WhooshEngine(folder / "whoosh", max_terms=10_000, and_first=False)
            sample = queries[:whoosh_or_sample]
            entry["plain_or_top50_sample"], _ = _latency(lambda q: [h.arxiv_id for h in plain.search(_terms(index, q.query), 50)], sample)
            entry["shaping"] = "rarest 8 terms, AND first, OR when AND finds < k"
        report["keyword"][engine] = entry
        print(f"keyword {engine}: {entry}", flush=True)

    # ---- semantic index (default embedder) on the full corpus
    t0 = time.perf_counter()
    emb = index.embedder
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    index.build([], keyword_engines=[], semantic=True)
    build_s = time.perf_counter() - t0
    report["semantic"] = {"embedder": emb.name, "dim": emb.dim, "model_load_seconds": load_s,
                          "build_seconds": build_s, "docs_per_second": len(papers) / build_s, "modes": {}}
    report["semantic"]["modes"] = _semantic_modes(folder / "chroma", emb, queries)
    print(f"semantic: {report['semantic']}", flush=True)

    # ---- the tools as the agent sees them (default engine, max_results=10)
    env = ArxivEnv(index, seed=0)
    report["tools"] = {
        "keyword_search": _latency(lambda q: env.keyword_search(q.query), queries)[0],
        "semantic_search": _latency(lambda q: env.semantic_search(q.query), queries)[0],
        "engine": engines[0], "semantic_mode": index.semantic.search_mode,
    }
    print(f"tools: {report['tools']}", flush=True)

    # ---- embedding options side by side on one quality sub-corpus
    sub = select(papers, n=quality_docs, include_ids=gold_ids(queries), seed=0)
    sub_ids = [p.arxiv_id for p in sub]
    sq = scorable(queries)
    report["embedders"] = {"quality_corpus": {"papers": len(sub), "gold_papers": len(gold_ids(queries)), "seed": 0},
                           "options": {}}
    for name_ in compare_embedders:
        e = get_embedder(name_)
        texts = [p.text for p in sub]
        e.encode(texts[:32])  # warm-up
        t0 = time.perf_counter()
        doc_vecs = np.concatenate([e.encode(texts[i : i + 256]) for i in range(0, len(texts), 256)])
        secs = time.perf_counter() - t0
        qv = e.encode([q.query for q in sq])
        top = np.argsort(-(qv @ doc_vecs.T), axis=1)[:, :50]
        ranks = [[sub_ids[j] for j in row] for row in top]
        dps = len(sub) / secs
        report["embedders"]["options"][name_] = {
            "dim": e.dim, "docs_per_second": dps, "full_corpus_minutes_estimate": len(papers) / dps / 60,
            **_recall(ranks, sq)}
        print(f"embedder {name_}: {report['embedders']['options'][name_]}", flush=True)

    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    atomic_write_json(out_dir / "bench_search.json", report)
    atomic_write_text(out_dir / "bench_search.md", render_markdown(report))
    return report


def _semantic_modes(folder: Path, embedder, queries: list[Query]) -> dict:
    """Latency (query encoding included) and recall of each semantic search mode over one chromadb folder."""
    out = {}
    for mode in SemanticIndex.SEARCH_MODES:
        sem = SemanticIndex(folder, embedder, search_mode=mode)
        t0 = time.perf_counter()
        sem.search("warm-up", 10)  # exact mode loads the vectors from chromadb here, once
        warm = time.perf_counter() - t0
        lat10, _ = _latency(lambda q, sem=sem: [h.arxiv_id for h in sem.search(q.query, 10)], queries)
        lat50, rank50 = _latency(lambda q, sem=sem: [h.arxiv_id for h in sem.search(q.query, 50)], queries)
        out[mode] = {"first_query_seconds": warm, "latency_top10": lat10, "latency_top50": lat50, **_recall(rank50, queries)}
        print(f"semantic {mode}: {out[mode]}", flush=True)
    return out


def bench_semantic(name: str = "full", queries_file: str | None = None, out_dir: Path | None = None) -> dict:
    """Query-time side of an existing index: each semantic search mode (latency, recall) and the
    tools as the agent sees them. Builds nothing; run ``python -m arxivqa.index build`` first."""
    from .index import open_index

    out_dir = Path(out_dir) if out_dir else config.results_dir()
    queries = load_queries(queries_file)
    index = open_index(name)
    report: dict = {"machine": _machine(), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "index_name": name,
                    "papers": len(index.docs), "embedder": index.embedder.name, "modes": {}}
    report["modes"] = _semantic_modes(index.folder / "chroma", index.embedder, queries)
    env = ArxivEnv(index, seed=0)
    report["tools"] = {"keyword_search": _latency(lambda q: env.keyword_search(q.query), queries)[0],
                       "semantic_search": _latency(lambda q: env.semantic_search(q.query), queries)[0],
                       "engine": index.keyword_engine_name, "semantic_mode": index.semantic.search_mode}
    print(f"tools: {report['tools']}", flush=True)
    lines = [f"# Semantic search modes and tool latency ({report['papers']:,} papers, {report['started']})", "",
             f"Embedder `{report['embedder']}`; {report['machine']['cpus']} CPUs. Latency over the {len(queries)} train "
             "queries, query encoding included; recall against `gold_in_corpus`.", "",
             "| mode | first query (s) | p50 top-10 (ms) | p95 top-10 (ms) | p50 top-50 (ms) | recall@10 | recall@50 |",
             "|---|---|---|---|---|---|---|"]
    for mode, e in report["modes"].items():
        lines.append(f"| {mode} | {e['first_query_seconds']:.1f} | {e['latency_top10']['p50_ms']:.1f} | "
                     f"{e['latency_top10']['p95_ms']:.1f} | {e['latency_top50']['p50_ms']:.1f} | {e['recall@10']:.3f} | {e['recall@50']:.3f} |")
    t = report["tools"]
    lines += ["", f"Tools as the agent sees them (keyword engine `{t['engine']}`, semantic `{t['semantic_mode']}`, "
                  "max_results=10, snippets/abstracts and formatting included): "
                  f"keyword_search p50 {t['keyword_search']['p50_ms']:.1f} ms / p95 {t['keyword_search']['p95_ms']:.1f} ms; "
                  f"semantic_search p50 {t['semantic_search']['p50_ms']:.1f} ms / p95 {t['semantic_search']['p95_ms']:.1f} ms."]
    atomic_write_json(out_dir / "bench_semantic.json", report)
    atomic_write_text(out_dir / "bench_semantic.md", "\n".join(lines) + "\n")
    return report


def _terms(index: SearchIndex, text: str) -> list[str]:
    return list(dict.fromkeys(index.analyzer.terms(text)))


def render_markdown(r: dict) -> str:
    m = r["machine"]
    lines = [f"# Search benchmark ({r['corpus']['papers']:,} papers, {r['started']})", "",
             f"Machine: {m['cpus']} CPUs ({m['cpu_model']}), Python {m['python']}; bm25s {m['bm25s']}, "
             f"whoosh {m['whoosh']}, chromadb {m['chromadb']}.", "",
             f"Corpus load {r['corpus']['load_seconds']:.1f} s; document store {r['docstore_seconds']:.1f} s.", "",
             "| part | build (s) | docs/s | p50 top-10 (ms) | p95 top-10 (ms) | p50 top-50 (ms) | p95 top-50 (ms) | recall@10 | recall@50 |",
             "|---|---|---|---|---|---|---|---|---|"]

    def row(label, e):
        return (f"| {label} | {e['build_seconds']:.0f} | {e['docs_per_second']:.0f} | {e['latency_top10']['p50_ms']:.1f} | "
                f"{e['latency_top10']['p95_ms']:.1f} | {e['latency_top50']['p50_ms']:.1f} | {e['latency_top50']['p95_ms']:.1f} | "
                f"{e['recall@10']:.3f} | {e['recall@50']:.3f} |")

    for eng, e in r["keyword"].items():
        lines.append(row(f"keyword: {eng}", e))
    s = r["semantic"]
    for mode, e in s["modes"].items():
        lines.append(row(f"semantic: {s['embedder']} ({s['dim']}-d), chromadb, {mode} search",
                         {**e, "build_seconds": s["build_seconds"], "docs_per_second": s["docs_per_second"]}))
    for eng, e in r["keyword"].items():
        if "plain_or_top50_sample" in e:
            p = e["plain_or_top50_sample"]
            lines += ["", f"whoosh with plain OR of all query terms, top-50 ({p['n']} queries): p50 {p['p50_ms']:.0f} ms, "
                          f"p95 {p['p95_ms']:.0f} ms (the table's whoosh rows use {e['shaping']})."]
    t = r["tools"]
    lines += ["", f"Semantic build = embedding + chromadb insert; exact search loads the vectors once "
                  f"({s['modes'].get('exact', {}).get('first_query_seconds', float('nan')):.1f} s on the first query).",
              "", f"Tools as the agent sees them (keyword engine {t['engine']}, semantic {t.get('semantic_mode', 'hnsw')} search, "
                  "max_results=10, snippets and formatting included): "
                  f"keyword_search p50 {t['keyword_search']['p50_ms']:.1f} ms / p95 {t['keyword_search']['p95_ms']:.1f} ms; "
                  f"semantic_search p50 {t['semantic_search']['p50_ms']:.1f} ms / p95 {t['semantic_search']['p95_ms']:.1f} ms.",
              "", f"Embedding options on one quality sub-corpus ({r['embedders']['quality_corpus']['papers']:,} papers: "
                  "every gold paper + a seeded sample; exact cosine search):", "",
              "| embedder | dim | docs/s | full corpus (min, est.) | recall@10 | recall@50 |", "|---|---|---|---|---|---|"]
    for n, e in r["embedders"]["options"].items():
        lines.append(f"| {n} | {e['dim']} | {e['docs_per_second']:.0f} | {e['full_corpus_minutes_estimate']:.0f} | "
                     f"{e['recall@10']:.3f} | {e['recall@50']:.3f} |")
    return "\n".join(lines) + "\n"


def bench_agent(policy: str, limit: int = 16, preset_name: str = "cpu-warm", batch: int = 8, index=None,
                out_dir: Path | None = None, paths: Sequence[str] = ("one_at_a_time", "lockstep")) -> dict:
    """Episodes per minute of an in-process policy on the same dev queries, at a training preset's rollout
    budgets, prompt and tool view: today's path (one episode at a time, the whole conversation
    re-encoded every turn) beside lockstep episodes (``batch`` at once, batched decoding, each prompt
    prefix kept as a KV cache). Writes ``results/bench_agent.json``."""
    from .agent import make_policy
    from .corpus import select_queries
    from .evaluate import check_policy, run_agent_eval, run_view, trajectory_metrics
    from .index import open_index
    from .train import preset, rollout_view

    cfg = preset(preset_name)
    view = run_view(policy) or rollout_view(cfg)
    queries = select_queries(split="dev", limit=limit).queries
    index = index or open_index(embedder=cfg.embedder)  # the preset's index (cpu-warm: the MiniLM side)
    loaded = make_policy(policy)
    check_policy(loaded, "--policy")
    result = {"policy": loaded.name, "queries": len(queries), "split": "dev", "preset": preset_name,
              "budgets": view["budgets"].__dict__, "tool_view": view["env_kwargs"], "machine": _machine(),
              "threads": __import__("torch").get_num_threads(), "paths": {}}
    for path in paths:
        t0 = time.perf_counter()
        trajs = run_agent_eval(policy, queries, index, budgets=view["budgets"], system_prompt=view["system_prompt"],
                               env_kwargs=view["env_kwargs"], batch_size=1 if path == "one_at_a_time" else batch,
                               policy=loaded, progress=False, user_template=view["user_template"])
        wall = time.perf_counter() - t0
        m = [trajectory_metrics(t) for t in trajs]
        gen = sum(t.completion_tokens for t in trajs)
        prompt = sum(t.prompt_tokens for t in trajs)
        cached = sum(s.assistant.cached_prompt_tokens for t in trajs for s in t.steps)
        result["paths"][path] = {
            "batch": 1 if path == "one_at_a_time" else batch, "wall_seconds": wall,
            "episodes_per_minute": 60 * len(trajs) / wall, "completion_tokens": gen,
            "completion_tokens_per_second": gen / wall, "prompt_tokens": prompt,
            "prompt_tokens_from_cache": cached, "turns": sum(len(t.steps) for t in trajs),
            "finished": sum(x["finished"] for x in m) / max(1, len(m)),
            "recall@10": sum(x["recall@10"] for x in m) / max(1, len(m))}
        print(path, json.dumps(result["paths"][path]), flush=True)
    if len(result["paths"]) == 2:
        a, b = (result["paths"][p]["episodes_per_minute"] for p in paths)
        result["speedup"] = b / a
    out = (out_dir or config.results_dir()) / "bench_agent.json"
    atomic_write_json(out, result)
    return result


def bench_update(preset_name: str = "cpu-warm", completion_tokens: int | None = None, run: str | None = None,
                 model: str | None = None, repeats: int = 2, schemas: Sequence[str] = ("full", "compact"),
                 out_dir: Path | None = None) -> dict:
    """The update half of a GRPO step, on sequences of a step's size: ``prompts_per_step × num_generations``
    rollouts of the rollout prompt (system prompt, query, the tool schemas of each ``schemas`` view, as the
    chat template renders them) plus ``completion_tokens`` (default: the median of the committed run
    ``run``'s rollouts; TRL counts tool results in it), with the preset's model, dtype, LoRA and micro
    batches. Times, per view: the reference pass (no grad, adapter off: what ``beta`` > 0 costs), the loss
    forward and the backward + AdamW step — what TRL runs after generation; the median of ``repeats``. A
    dense transformer's cost depends on the sequence length, not on the tokens, so the completion is random
    tokens. Writes ``results/bench_update.json``."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .agent import find_run_folder, tool_schemas
    from .models import resolve_dtype, resolve_model
    from .tools import make_env
    from .train import load_rollouts, lora_config, micro_batch, preset, prompt_for

    cfg = preset(preset_name, **({"model": model} if model else {}))
    run_name = run or "rlvr-cpu-warm-uniform-100steps-seed0"
    from_run = run_name if completion_tokens is None else None
    if completion_tokens is None:
        rows = load_rollouts(Path(find_run_folder(run_name)) / "rollouts.jsonl")
        completion_tokens = int(statistics.median(r["trajectory"]["completion_tokens"] for r in rows))
    path = resolve_model(cfg.model)
    tok = AutoTokenizer.from_pretrained(path)
    dtype = resolve_dtype(cfg.dtype)
    net = get_peft_model(AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)), lora_config(cfg))
    optim = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=cfg.learning_rate)
    messages = [{"role": "system", "content": prompt_for(cfg)},
                {"role": "user", "content": cfg.user_template.format(query="sparse attention for long-context language models")}]
    g, c, mb = cfg.num_generations * cfg.prompts_per_step, completion_tokens, micro_batch(cfg)
    result = {"preset": preset_name, "model": cfg.model, "dtype": dtype, "rollouts": g, "micro_batch": mb,
              "completion_tokens": c, "completion_tokens_from": from_run,
              "lora_r": cfg.lora_r, "repeats": repeats, "threads": torch.get_num_threads(), "machine": _machine(),
              "views": {}}
    gen = torch.Generator().manual_seed(0)
    for view in schemas:
        prompt = tok.apply_chat_template(messages, tools=tool_schemas(make_env(schemas=view)),
                                         add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
        completion = torch.randint(0, len(tok), (g, c), generator=gen)
        ids = torch.cat([torch.tensor([prompt] * g), completion], dim=1)
        times: dict[str, list[float]] = {"ref_logprobs": [], "loss_forward": [], "backward_optimizer": []}
        for _ in range(repeats):
            spent = dict.fromkeys(times, 0.0)
            for lo in range(0, g, mb):  # TRL's micro batches: the reference pass, then forward + backward each
                part, target = ids[lo:lo + mb], completion[lo:lo + mb]
                t0 = time.perf_counter()
                with torch.no_grad(), net.disable_adapter():
                    net(input_ids=part, logits_to_keep=c + 1)
                t1 = time.perf_counter()
                logits = net(input_ids=part, logits_to_keep=c + 1).logits[:, :-1].float()
                loss = -torch.log_softmax(logits, -1).gather(-1, target.unsqueeze(-1)).mean()
                t2 = time.perf_counter()
                loss.backward()
                t3 = time.perf_counter()
                for k, seconds in zip(times, (t1 - t0, t2 - t1, t3 - t2)):
                    spent[k] += seconds
            t0 = time.perf_counter()
            optim.step()
            optim.zero_grad(set_to_none=True)
            spent["backward_optimizer"] += time.perf_counter() - t0
            for k in times:
                times[k].append(spent[k])
        row = {"prompt_tokens": len(prompt), "sequence_tokens": len(prompt) + c, "tokens": g * (len(prompt) + c),
               **{k: statistics.median(v) for k, v in times.items()}}
        row["update"] = row["ref_logprobs"] + row["loss_forward"] + row["backward_optimizer"]
        row["update_without_ref"] = row["loss_forward"] + row["backward_optimizer"]
        result["views"][view] = row
        print(view, json.dumps(row), flush=True)
    out = (out_dir or config.results_dir()) / "bench_update.json"
    atomic_write_json(out, result)
    return result


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None and not np.isnan(x)]  # NaN (no gold) left out
    return float(statistics.fmean(xs)) if xs else None


def context_figures(trajs, window: int | None, max_new_tokens: int) -> dict:
    """Per-path figures of ``bench_context``: prompt tokens per turn (mean over the episodes that reached
    the turn, and the largest), seconds per episode, recall, stop reasons, what was trimmed, and how many
    requests would not have fitted ``window`` with room for ``max_new_tokens``."""
    from .evaluate import failed
    from .records import search_recall, submission_recall

    turns = max((len(t.steps) for t in trajs), default=0)
    per_turn = [[t.steps[k].assistant.prompt_tokens for t in trajs if len(t.steps) > k] for k in range(turns)]
    prompts = [s.assistant.prompt_tokens for t in trajs for s in t.steps]
    stops: dict[str, int] = {}
    for t in trajs:
        stops[t.stop_reason.split(":")[0]] = stops.get(t.stop_reason.split(":")[0], 0) + 1
    return {
        "episodes": len(trajs), "turns": len(prompts),
        "prompt_tokens_per_turn": [_mean(xs) for xs in per_turn],
        "max_prompt_tokens_per_turn": [max(xs) for xs in per_turn],
        "mean_prompt_tokens": _mean(prompts), "max_prompt_tokens": max(prompts, default=None),
        "prompt_tokens": sum(prompts), "completion_tokens": sum(t.completion_tokens for t in trajs),
        "seconds_per_episode": _mean([t.seconds for t in trajs]),
        "generation_seconds_per_episode": _mean([t.generation_seconds for t in trajs]),
        "recall@10": _mean([submission_recall(t) for t in trajs]),
        "search_recall": _mean([search_recall(t) for t in trajs]),
        "finished": _mean([float(t.stop_reason == "finished") for t in trajs]),
        "failed_episodes": sum(failed(t) for t in trajs), "stop_reasons": stops,
        "requests_over_window": (sum(p + max_new_tokens > window for p in prompts) if window else None),
        "episodes_trimmed": sum(any(c.trimmed for c in t.context_trims) for t in trajs),
        "turns_trimmed": sum(c.trimmed for t in trajs for c in t.context_trims),
        "max_compacted": max((c.compacted for t in trajs for c in t.context_trims), default=0),
        "max_dropped_turns": max((c.dropped_turns for t in trajs for c in t.context_trims), default=0),
    }


def bench_context(policy: str, limit: int = 10, window: int = 8192, budgets: str | None = None,
                  queries_file: str | None = None, split: str = "dev", batch: int | None = None, index=None,
                  out_dir: Path | None = None, name: str = "bench_context") -> dict:
    """The context budget before vs after, on the same queries: every episode without trimming, then with
    the window ``window`` (``Agent.context_window``). ``budgets`` (``max_turns,max_tool_calls,max_tokens,
    max_new_tokens``; default a run's rollout budgets, else the agent's), the prompt and the tool view are a
    run's own for ``run:`` policies, else the agent's (the full view, whose results fill the context).
    Writes ``<results>/<name>.json``."""
    from .agent import make_policy
    from .corpus import select_queries
    from .evaluate import check_policy, run_agent_eval, run_view
    from .index import open_index
    from .records import Budgets

    view = run_view(policy)
    b = Budgets.parse(budgets) if budgets else view.get("budgets") or Budgets()
    queries = select_queries(queries_file, split, limit).queries
    if not queries:
        raise ValueError("no query with a gold paper in the corpus")
    index = index or open_index()
    loaded = make_policy(policy)
    check_policy(loaded, "--policy")
    result = {"policy": loaded.name, "queries": len(queries), "split": split, "window": window,
              "policy_context_window": getattr(loaded, "context_window", None), "budgets": b.__dict__,
              "tool_view": view.get("env_kwargs") or "agent default", "machine": _machine(),
              "threads": __import__("torch").get_num_threads(), "paths": {}}
    for path, w in (("untrimmed", 0), (f"window_{window}", window)):
        t0 = time.perf_counter()
        trajs = run_agent_eval(policy, queries, index, budgets=b, system_prompt=view.get("system_prompt"),
                               env_kwargs=view.get("env_kwargs"), batch_size=batch, policy=loaded, progress=False,
                               context_window=w, user_template=view.get("user_template"))
        figures = context_figures(trajs, window, b.max_new_tokens) | {"wall_seconds": time.perf_counter() - t0}
        result["paths"][path] = figures
        print(path, json.dumps(figures), flush=True)
    out = (out_dir or config.results_dir()) / f"{name}.json"
    atomic_write_json(out, result)
    return result


SERVER_PATHS = ("in_process", "transformers_serve", "llamacpp")


def bench_servers(limit: int = 10, window: int = 8192, budgets: str | None = None, model: str | None = None,
                  paths: Sequence[str] = SERVER_PATHS, queries_file: str | None = None, split: str = "dev",
                  batch: int | None = None, index=None, out_dir: Path | None = None) -> dict:
    """Episodes per minute of one model on the same queries, budgets and context window, three ways: in
    process (lockstep batches of ``batch``, default ``eval_batch``), over ``transformers serve`` and over
    llama.cpp's server (``LlamaCppServer``, the model's GGUF; skipped with a note when the optional extra
    is not installed). The servers run one episode at a time (llama.cpp serves one request at a time);
    each is started here on loopback and stopped after its episodes. ``model``: a packaged model (default
    the policy model). Writes ``<results>/bench_servers.json`` after every path."""
    from .agent import LocalHFPolicy, OpenAIPolicy
    from .corpus import select_queries
    from .evaluate import run_agent_eval
    from .index import open_index
    from .llm import LLAMACPP_EXTRA, llamacpp_installed, local_server
    from .models import DEFAULT_MODEL, PACKAGED, model_setting, resolve_model
    from .records import Budgets

    model = model or model_setting() or DEFAULT_MODEL
    if model not in PACKAGED:
        raise ValueError(f"bench servers compares a packaged model (llama.cpp serves its GGUF): {sorted(PACKAGED)}")
    unknown = set(paths) - set(SERVER_PATHS)
    if unknown:
        raise ValueError(f"unknown paths {sorted(unknown)}; choose among {SERVER_PATHS}")
    b = Budgets.parse(budgets) if budgets else Budgets()
    queries = select_queries(queries_file, split, limit).queries
    if not queries:
        raise ValueError("no query with a gold paper in the corpus")
    index = index or open_index()
    out = (out_dir or config.results_dir()) / "bench_servers.json"
    result = {"model": model, "queries": len(queries), "split": split, "window": window, "budgets": b.__dict__,
              "machine": _machine(), "threads": __import__("torch").get_num_threads(), "paths": {}, "skipped": {}}

    def run(name: str, policy, batch_size: int) -> None:
        t0 = time.perf_counter()
        trajs = run_agent_eval(policy.name, queries, index, budgets=b, batch_size=batch_size, policy=policy,
                               progress=False, context_window=window)
        wall = time.perf_counter() - t0
        figures = context_figures(trajs, window, b.max_new_tokens)
        result["paths"][name] = figures | {"batch": batch_size, "wall_seconds": wall,
                                           "episodes_per_minute": 60 * len(trajs) / wall,
                                           "completion_tokens_per_second": figures["completion_tokens"] / wall}
        print(name, json.dumps(result["paths"][name]), flush=True)
        atomic_write_json(out, result)

    for path in paths:
        if path == "in_process":
            policy = LocalHFPolicy(model, name=f"local:{model}")
            run(path, policy, batch or config.settings().eval_batch)
            del policy
            continue
        engine = "llamacpp" if path == "llamacpp" else "transformers"
        if engine == "llamacpp" and not llamacpp_installed():
            result["skipped"][path] = f"not installed ({LLAMACPP_EXTRA})"
            print(path, "skipped:", result["skipped"][path], flush=True)
            continue
        kwargs = {"n_ctx": window} if engine == "llamacpp" else {}
        with local_server(model, engine=engine, startup_timeout=600, **kwargs) as url:
            served = model if engine == "llamacpp" else resolve_model(model)  # transformers serve: the folder it serves
            policy = OpenAIPolicy(served, url, api_key_env=None, context_window=window, name=f"{path}:{model}",
                                  max_retries=1, timeout=600)
            run(path, policy, 1)
    atomic_write_json(out, result)
    return result


SAFETY_DATA = Path(__file__).resolve().parents[2] / "tests" / "data"


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def bench_judge_safety(endpoint: str | None = None, run: str | None = None, n_trajs: int = 1,
                       data_dir: Path | None = None, out_dir: Path | None = None) -> dict:
    """The judge's injection defence, measured (``results/judge_safety.json``): the redactor on the attack
    and legitimate sets the tests use (``judge_attacks.jsonl``, ``judge_legit.jsonl``) and on held-out
    ones written after it (``*_heldout.jsonl``, never tuned on); with ``endpoint`` also the judge's score
    shift when every payload is written into real trajectories (the first ``n_trajs`` finished rollouts
    of the committed ``run``), with the defence and without it."""
    from .judge import injection_shift, make_judge, redaction_rates
    from .records import Trajectory

    data_dir = data_dir or SAFETY_DATA
    sets = {name: (_read_jsonl(data_dir / f"judge_attacks{name}.jsonl"), _read_jsonl(data_dir / f"judge_legit{name}.jsonl"))
            for name in ("", "_heldout")}
    out: dict = {"redaction": {("development" if k == "" else "held_out"): redaction_rates(*v) for k, v in sets.items()}}
    if endpoint:
        from .agent import find_run_folder
        from .train import load_rollouts

        rows = load_rollouts(Path(find_run_folder(run or "rlvr-cpu-warm-uniform-100steps-seed0")) / "rollouts.jsonl")
        trajs = [Trajectory.model_validate(r["trajectory"]) for r in rows
                 if r["reward"].get("gates_passed") and r["trajectory"]["steps"]][:n_trajs]
        if not trajs:
            raise ValueError(f"run {run!r} has no finished rollout to write payloads into")
        payloads = [p for a, _ in sets.values() for p in a]
        judge = make_judge(endpoint)
        shifts = {"with_defence": injection_shift(judge, trajs, payloads)}
        judge.sanitise = False
        shifts["without_defence"] = injection_shift(judge, trajs, payloads)
        out["judge"] = {"judge": endpoint, "trajectories": [t.qid for t in trajs], "payloads": len(payloads), **shifts}
    out["machine"] = _machine()
    path = (out_dir or config.results_dir()) / "judge_safety.json"
    atomic_write_text(path, json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "machine"}, indent=1, ensure_ascii=False)[:3000])
    return out


JUDGE_PRECISIONS = ("bfloat16", "float32", "int8", "int8-onednn")


def bench_judge_precision(model: str = "qwen2.5-coder-1.5b-instruct", scoring: str = "blend", pairs: int = 6,
                          precisions: Sequence[str] = ("bfloat16", "int8", "int8-onednn"), set_path: Path | None = None,
                          out_dir: Path | None = None) -> dict:
    """A probability judge's speed and ordering at other numeric precisions (``results/bench_judge_precision.json``):
    ``pairs`` pairs of the judge validity set (evenly spaced through it; their kinds are recorded), each judged in
    ``bfloat16`` / ``float32`` as loaded, or ``int8``: PyTorch's dynamic quantisation of every ``Linear`` (int8
    weights, activations quantised per call) on the default quantised engine (``x86``) or on ``onednn``
    (``int8-onednn``). Per precision: seconds per judgment (after one warm-up judgment), the pairs ordered right,
    every score."""
    import torch

    from .judge import ProbabilityJudge
    from .validity import ValidityPair, read_set

    bad = [x for x in precisions if x not in JUDGE_PRECISIONS]
    if bad:
        raise ValueError(f"unknown precision {bad[0]!r}: choose among {', '.join(JUDGE_PRECISIONS)}")
    data = read_set(set_path or config.results_dir() / "judge_validity_set.json.gz")
    every = [ValidityPair.model_validate(p) for p in data["pairs"]]
    chosen = every[:: max(1, len(every) // max(1, pairs))][:pairs]
    trajs = [t for p in chosen for t in (p.better, p.worse)]
    engine = torch.backends.quantized.engine
    out: dict = {"model": model, "scoring": scoring, "pairs": len(chosen), "kinds": [p.kind for p in chosen], "precisions": {}}
    try:
        for precision in precisions:
            torch.backends.quantized.engine = "onednn" if precision == "int8-onednn" else engine
            judge = ProbabilityJudge(model, scoring, dtype="float32" if precision.startswith("int8") else precision)
            if precision.startswith("int8"):
                judge.model = torch.ao.quantization.quantize_dynamic(judge.model, {torch.nn.Linear}, dtype=torch.qint8)
            judge.score_batch(trajs[:1])  # warm-up: the rubric's cached head, the first call's allocations
            t0 = time.perf_counter()
            scores = [r.score for r in judge.score_batch(trajs)]
            seconds = time.perf_counter() - t0
            right = sum(1.0 if b > w else 0.5 if b == w else 0.0 for b, w in zip(scores[::2], scores[1::2]))
            out["precisions"][precision] = {"seconds_per_judgment": seconds / len(trajs), "pairs_right": right,
                                            "scores": scores}
            print(precision, f"{seconds / len(trajs):.2f} s a judgment, {right:g} of {len(chosen)} pairs", flush=True)
            del judge
    finally:
        torch.backends.quantized.engine = engine
    out["machine"] = _machine()
    path = (out_dir or config.results_dir()) / "bench_judge_precision.json"
    atomic_write_text(path, json.dumps(out, indent=1) + "\n")
    return out


def _scores_read(path: Path, table, run: str, rollouts) -> list:
    """The judge results kept for ``run``'s rollouts in ``table`` (``path``, a ``reward_noise_rollouts.csv``), checked
    row by row against the rollouts' steps and queries."""
    from .judge import JudgeResult

    rows = table[table["run"] == run].reset_index(drop=True)
    same = (len(rows) == len(rollouts) and (rows["step"].to_numpy() == rollouts["step"].to_numpy()).all()
            and (rows["qid"].astype(str).to_numpy() == rollouts["qid"].astype(str).to_numpy()).all())
    if not same:
        raise ValueError(f"{path} does not hold the scores of run {run}'s {len(rollouts)} rollouts "
                         f"(it has {len(rows)} rows for it, or their steps or queries differ): judge again without --scores")
    return [JudgeResult(score=float(r.judge_score), fallback=bool(r.fallback)) for r in rows.itertuples()]


def bench_reward_noise(judge_spec: str, runs: Sequence[str] | None = None, margin: float | None = None,
                       out_dir: Path | None = None, judge=None, scores: Path | None = None) -> dict:
    """Why recall is a noisy reward, measured on real training rollouts (``results/reward_noise.json``,
    ``results/reward_noise_rollouts.csv``, the figure ``results/reward_noise.png``): every rollout of the committed ``runs`` (default: every
    committed RLVR run) gets the reward it trained on (RLVR) and, counterfactually, the RaR reward the
    judge ``judge_spec`` gives it under the same gates and settings; then, within each group (one prompt
    in one step), the pairs RLVR ties and whether the judge or the failure-mode detectors separate them
    (``ablations.rollout_pairs``), and each regime's reward variance per group (``ablations.group_variance``),
    also over the groups whose every rollout passed the gates (there RaR's variance is the judge's own).

    ``scores``: a ``reward_noise_rollouts.csv`` this judge already wrote for the same runs; its judge
    scores are read back (checked row by row against the runs' steps and queries) instead of judging again."""
    import pandas as pd

    from .ablations import HOLISTIC_POINT, group_variance, rollout_pairs, tie_separation, variance_summary
    from .agent import find_run_folder
    from .diagnostics import load_run
    from .judge import make_judge, rar_components
    from .rewards import RewardConfig
    from .train import committed_runs

    margin = HOLISTIC_POINT if margin is None else margin
    folders = [Path(find_run_folder(r)) for r in runs] if runs else [r.path for r in committed_runs(reward="rlvr")]
    if not folders:
        raise ValueError("no run to measure: pass --runs, or commit an RLVR run under results/runs/")
    kept = pd.read_csv(scores) if scores else None
    judge = judge or (None if scores else make_judge(judge_spec))
    frames, sources = [], []
    for folder in folders:
        run = load_run(folder)
        trajs = [t for _, t in run["trajectories"]]
        cfg = RewardConfig.model_validate(run["config"].get("rewards", {}))
        results = _scores_read(scores, kept, folder.name, run["rollouts"]) if scores else judge.score_batch(trajs)
        f = run["rollouts"].copy()
        f.insert(0, "run", folder.name)
        f["rlvr"] = f["reward/total"].astype(float)
        f["judge_score"] = [r.score for r in results]
        f["fallback"] = [r.fallback for r in results]
        comps = [rar_components(t, r, cfg) for t, r in zip(trajs, results)]
        f["rar"] = [total for total, _ in comps]
        f["gates_passed"] = [c["gates_passed"] for _, c in comps]
        frames.append(f)
        sources.append({"run": folder.name, "rollouts": len(f), "steps": int(f["step"].nunique()),
                        "model": run["config"].get("model"), "seed": run["config"].get("seed")})
    frame = pd.concat(frames, ignore_index=True)
    pairs = rollout_pairs(frame, "rlvr", "judge_score", margin)
    groups = group_variance(frame, {"rlvr": "rlvr", "rar": "rar", "judge": "judge_score"}, passed="gates_passed")
    report = {"judge": judge_spec, "margin": margin, "runs": sources, "rollouts": len(frame),
              "fallbacks": int(frame["fallback"].sum()), "groups": len(groups),
              "judge_score_spread": {"min": float(frame["judge_score"].min()), "max": float(frame["judge_score"].max()),
                                     "std": float(frame["judge_score"].std(ddof=0))},
              "ties": tie_separation(pairs),
              "variance": variance_summary(groups, ("rlvr", "rar", "judge")), "machine": _machine()}
    if scores:
        report["scores_read_from"] = Path(scores).name
    out = out_dir or config.results_dir()
    keep = ["run", "step", "qid", "rlvr", "rar", "judge_score", "fallback", "gates_passed", "search_recall",
            *[c for c in frame.columns if c.startswith("fm_")]]
    atomic_write_text(out / "reward_noise_rollouts.csv", frame[keep].to_csv(index=False))
    atomic_write_text(out / "reward_noise.json", json.dumps(report, indent=1) + "\n")
    from .plots import reward_noise, save

    runs_label = "; ".join(f"{x['run']} ({x['model']} · {x['steps']} steps · seed {x['seed']})" for x in sources)
    save(reward_noise(frame[keep], report, title=f"RLVR vs RaR with judge {judge_spec}\n{runs_label}"),
         "reward_noise.png", out)
    print(json.dumps({k: v for k, v in report.items() if k != "machine"}, indent=1)[:3000])
    return report


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m arxivqa.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("search", help="index build + search latency + embedding options")
    s.add_argument("--corpus", help="JSONL(.gz) corpus (default: the configured data directory)")
    s.add_argument("--queries", help="query file (default: queries_train.jsonl)")
    s.add_argument("--name", default="full", help="index name under ARXIVQA_INDEX_DIR (rebuilt from scratch)")
    s.add_argument("--engines", default="bm25s,whoosh")
    s.add_argument("--embedder", default=None, help="embedder of the full index (default: static)")
    s.add_argument("--compare", default="static,minilm-128,minilm", help="embedders compared on the quality sub-corpus")
    s.add_argument("--quality-docs", type=int, default=5000)
    s.add_argument("--whoosh-or-sample", type=int, default=20)
    s.add_argument("--out", default=None, help="results folder (default: ARXIVQA_RESULTS_DIR)")
    m = sub.add_parser("semantic", help="semantic search modes + tool latency on an existing index")
    m.add_argument("--name", default="full")
    m.add_argument("--queries", default=None)
    m.add_argument("--out", default=None)
    g = sub.add_parser("agent", help="episodes/min of an in-process policy: one at a time vs lockstep batches")
    g.add_argument("--policy", required=True, help="local:<model> or run:<run>")
    g.add_argument("--limit", type=int, default=16)
    g.add_argument("--preset", default="cpu-warm", help="whose rollout budgets, prompt and tool view apply")
    g.add_argument("--batch", type=int, default=8)
    g.add_argument("--out", default=None)
    c = sub.add_parser("context", help="the context budget: dev episodes without and with a context window")
    c.add_argument("--policy", required=True, help="any policy name (local:<model>, run:<run>, openai:<model>@<url>, ...)")
    c.add_argument("--limit", type=int, default=10)
    c.add_argument("--window", type=int, default=8192, help="the context window of the trimmed path, in tokens")
    c.add_argument("--budgets", default=None, help="max_turns,max_tool_calls,max_tokens,max_new_tokens")
    c.add_argument("--queries", default=None, help="query file (default: queries_train.jsonl)")
    c.add_argument("--split", default="dev", choices=("dev", "train", "all"))
    c.add_argument("--batch", type=int, default=None, help="lockstep episodes of an in-process policy (default eval_batch)")
    c.add_argument("--out", default=None)
    c.add_argument("--name", default="bench_context", help="the result file's name: <results>/<name>.json")
    v = sub.add_parser("servers", help="episodes/min of one model in process, over transformers serve and over llama.cpp")
    v.add_argument("--model", default=None, help="a packaged model (default the policy model)")
    v.add_argument("--limit", type=int, default=10)
    v.add_argument("--window", type=int, default=8192, help="the context window of every path (llama.cpp's n_ctx)")
    v.add_argument("--budgets", default=None, help="max_turns,max_tool_calls,max_tokens,max_new_tokens")
    v.add_argument("--paths", default=",".join(SERVER_PATHS), help=f"comma-separated, among {','.join(SERVER_PATHS)}")
    v.add_argument("--queries", default=None)
    v.add_argument("--split", default="dev", choices=("dev", "train", "all"))
    v.add_argument("--batch", type=int, default=None, help="lockstep episodes in process (default eval_batch)")
    v.add_argument("--out", default=None)
    u = sub.add_parser("update", help="the update half of a GRPO step (reference pass, loss forward, backward) per tool-schema view")
    u.add_argument("--preset", default="cpu-warm")
    u.add_argument("--model", default=None, help="default: the preset's policy model")
    u.add_argument("--completion-tokens", type=int, default=None, help="default: the median of --run's rollouts")
    u.add_argument("--run", default=None, help="committed run whose rollouts give the completion length")
    u.add_argument("--repeats", type=int, default=2)
    u.add_argument("--schemas", default="full,compact")
    u.add_argument("--out", default=None)
    j = sub.add_parser("judge-safety", help="the judge's injection defence: redaction rates, score shift")
    j.add_argument("--judge", dest="endpoint", default=None,
                   help="also measure the score shift with this judge (local, expected:<model>, yesno:<model>, docs:<model>)")
    j.add_argument("--run", default=None, help="committed run whose finished rollouts carry the payloads")
    j.add_argument("--trajectories", type=int, default=1)
    j.add_argument("--out", default=None)
    q = sub.add_parser("judge-precision", help="a probability judge at other numeric precisions (bfloat16, int8): speed and ordering")
    q.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    q.add_argument("--scoring", default="blend")
    q.add_argument("--pairs", type=int, default=6, help="validity pairs judged at each precision")
    q.add_argument("--precisions", default="bfloat16,int8,int8-onednn", help=f"comma-separated, among {','.join(JUDGE_PRECISIONS)}")
    q.add_argument("--out", default=None)
    n = sub.add_parser("reward-noise", help="RLVR ties the judge or the failure-mode detectors separate; reward variance per group")
    n.add_argument("--judge", required=True, help="the judge giving the RaR reward (local, expected:<model>, yesno:<model>, docs:<model>)")
    n.add_argument("--runs", nargs="+", default=None, help="run folders or names (default: every committed RLVR run)")
    n.add_argument("--margin", type=float, default=None, help="score gap that separates two rollouts (default: one holistic point, 1/9)")
    n.add_argument("--out", default=None)
    n.add_argument("--scores", default=None, help="a reward_noise_rollouts.csv of this judge on the same runs: "
                                                   "its scores are read back instead of judging again")
    a = ap.parse_args(argv)
    if a.cmd == "reward-noise":
        bench_reward_noise(a.judge, a.runs, a.margin, out_dir=Path(a.out) if a.out else None,
                           scores=Path(a.scores) if a.scores else None)
        return
    if a.cmd == "judge-precision":
        bench_judge_precision(a.model, a.scoring, a.pairs, [x for x in a.precisions.split(",") if x],
                              out_dir=Path(a.out) if a.out else None)
        return
    if a.cmd == "servers":
        bench_servers(a.limit, a.window, a.budgets, a.model, tuple(p for p in a.paths.split(",") if p), a.queries,
                      a.split, a.batch, out_dir=Path(a.out) if a.out else None)
        return
    if a.cmd == "judge-safety":
        bench_judge_safety(a.endpoint, a.run, a.trajectories, out_dir=Path(a.out) if a.out else None)
        return
    if a.cmd == "context":
        from .llm import EndpointUnreachable

        try:
            bench_context(a.policy, a.limit, a.window, a.budgets, a.queries, a.split, a.batch,
                          out_dir=Path(a.out) if a.out else None, name=a.name)
        except EndpointUnreachable as exc:
            raise SystemExit(f"error: {exc}") from None
        return
    if a.cmd == "update":
        bench_update(a.preset, a.completion_tokens, a.run, a.model, a.repeats, a.schemas.split(","),
                     out_dir=Path(a.out) if a.out else None)
        return
    if a.cmd == "agent":
        bench_agent(a.policy, a.limit, a.preset, a.batch, out_dir=Path(a.out) if a.out else None)
        return
    if a.cmd == "semantic":
        bench_semantic(a.name, a.queries, Path(a.out) if a.out else None)
        return
    bench_search(a.corpus, a.queries, a.name, tuple(x for x in a.engines.split(",") if x), a.embedder,
                 tuple(x for x in a.compare.split(",") if x), a.quality_docs, a.whoosh_or_sample,
                 Path(a.out) if a.out else None)


if __name__ == "__main__":
    sys.exit(main())
