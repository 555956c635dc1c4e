import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell
def _():
    import time

    import marimo as mo

    from arxivqa import config
    from arxivqa.config import settings
    from arxivqa.corpus import load_queries, select_queries
    from arxivqa.files import atomic_write_json
    from arxivqa.index import build_for_scale
    from arxivqa.labelling import (Labeller, LabellerConfig, LabelStore, agreement, agreement_summary, labels_dir,
                                   triage)
    from arxivqa.llm import get_endpoint, open_llm
    from arxivqa.plots import labeller_agreement, save, save_table, triage_confusion

    return (LabelStore, Labeller, LabellerConfig, agreement, agreement_summary, atomic_write_json, build_for_scale,
            config, get_endpoint, labeller_agreement, labels_dir, load_queries, mo, open_llm, save, save_table,
            select_queries, settings, time, triage, triage_confusion)


@app.cell
def _(mo):
    mo.md(r"""
    # 02 · Labelling: the deep-research labeller and human re-curation

    Open-ended research queries have no unambiguous ground truth. The seed bootstraps gold labels with a
    deep-research labeller, then re-curates almost every query by hand. Here:

    1. the **labeller** (an LLM plans sub-queries → search subagents run keyword + semantic search in
       parallel → the top candidates are read with `read_page` → one structured verdict per candidate →
       ≤10 proposals with reasons) on a few train queries, with the offline local endpoint by default;
    2. its **agreement** with the given gold, per difficulty;
    3. **difficulty triage** of queries, next to the given difficulty;
    4. a **re-curation UI**: one query at a time, the original gold, the labeller's proposals with reasons,
       a search box; accept / reject / add / remove, saved to the label store with history;
    5. **export** of the curated labels in the query-file format the trainer reads.

    Settings: `ARXIVQA_LLM` (endpoint name in `configs/endpoints.toml`, default `local`: the packaged
    Qwen2.5-Coder-0.5B-Instruct served on loopback), `ARXIVQA_LABEL_QUERIES` (default 3),
    `ARXIVQA_TRIAGE_QUERIES` (default 6). Runs resume and LLM answers are cached, so a rerun is quick.
    For more queries: `python -m arxivqa.labelling run --limit 10`.
    """)
    return


@app.cell
def _(LabelStore, build_for_scale, config, get_endpoint, labels_dir, load_queries, select_queries, settings):
    index, _ = build_for_scale()
    all_queries = load_queries()
    _s = settings()
    n_label, n_triage = _s.label_queries, _s.triage_queries
    endpoint = get_endpoint()
    # the labeller and the triage work on the train part only: the dev part stays unseen for evaluation
    train_queries = select_queries(split="train", scorable_only=False).queries
    to_label = select_queries(split="train", limit=n_label).queries if n_label else []
    _rated = [q for q in train_queries if q.difficulty][: n_triage - n_triage // 2]
    _unrated = [q for q in train_queries if not q.difficulty][: n_triage // 2]
    to_triage = _rated + _unrated
    store = LabelStore.open(labels_dir() / "labels.json", all_queries)
    runs_path = labels_dir() / f"runs-{endpoint.name}.jsonl"
    scale_name = config.scale()
    return endpoint, index, runs_path, scale_name, store, to_label, to_triage


@app.cell
def _(Labeller, LabellerConfig, endpoint, index, mo, open_llm, runs_path, store, time, to_label, to_triage, triage):
    _t0 = time.perf_counter()
    with mo.status.spinner(title=f"starting / reaching the LLM endpoint '{endpoint.name}'"):
        llm = open_llm(endpoint)
    _t1 = time.perf_counter()
    runs = Labeller(llm, index, LabellerConfig()).run(to_label, runs_path, store=store)
    _t2 = time.perf_counter()
    triaged = triage(llm, to_triage, desc="triage")
    _t3 = time.perf_counter()
    for _row in triaged.itertuples():
        if _row.predicted and store.queries[_row.qid].triaged_difficulty() != _row.predicted:
            store.set_difficulty(_row.qid, _row.predicted, reason=_row.reason, source="labeller", by=endpoint.name)
    llm_stats = llm.stats.as_dict()
    stage_seconds = {"endpoint start": _t1 - _t0, "labeller": _t2 - _t1, "triage": _t3 - _t2}
    llm.close()
    return llm_stats, runs, stage_seconds, triaged


@app.cell
def _(agreement, agreement_summary, atomic_write_json, config, endpoint, labeller_agreement, llm_stats, mo, runs,
      save, save_table, scale_name, stage_seconds):
    per_query = agreement(runs)
    summary = agreement_summary(per_query)
    save_table(per_query, "02_labeller_agreement_per_query")
    save_table(summary, "02_labeller_agreement")
    _fig = labeller_agreement(summary, title=f"Labeller {endpoint.model} (greedy) vs. given gold · {len(runs)} train "
                                             f"queries · {scale_name} index")
    save(_fig, "02_labeller_agreement.png")
    atomic_write_json(config.results_dir() / "02_labelling.json",
                      {"endpoint": endpoint.name, "model": endpoint.model, "scale": scale_name, "queries": len(runs),
                       "llm": llm_stats, "stage_seconds": stage_seconds})
    mo.vstack([
        mo.md(f"""
    ## Agreement with the given gold ({len(runs)} train queries, {scale_name} index)
    *precision*: share of proposals that are given gold; *recall*: share of given gold proposed;
    *candidate recall*: share of given gold that the searches surfaced at all (the ceiling for judging).
    LLM: {llm_stats['calls']} calls ({llm_stats['cache_hits']} from the cache), {llm_stats['failures']} failed after
    retries, {llm_stats['completion_tokens']} tokens written. The given gold is itself silver (a research agent's
    labels, curated): disagreement is not all the labeller's error.
    """),
        mo.ui.table(summary, selection=None),
        _fig,
    ])
    return


@app.cell
def _(atomic_write_json, endpoint, mo, save, save_table, triage_confusion, triaged):
    save_table(triaged, "02_triage")
    _rated = triaged.dropna(subset=["given"])
    _acc = float((_rated["given"] == _rated["predicted"]).mean()) if len(_rated) else float("nan")
    _fig = triage_confusion(triaged, title=f"Triage by {endpoint.model} (greedy) · {len(_rated)} rated train queries "
                                          f"(accuracy {_acc:.2f})")
    save(_fig, "02_triage.png")
    mo.vstack([mo.md(f"## Difficulty triage\nAgreement with the given difficulty: **{_acc:.2f}** on {len(_rated)} "
                     f"queries; {len(triaged) - len(_rated)} unrated queries get a proposed difficulty (stored as a "
                     "labeller event; a person's choice in the UI below overrides it)."),
               mo.ui.table(triaged, selection=None), _fig])
    return


@app.cell
def _(mo):
    mo.md(r"""
    ## Re-curation
    Pick a query; tick the proposals to **accept** (the other pending ones are **rejected** if you tick
    the box), labels to **remove**, and papers from the search box to **add**; then *save decisions*.
    Every decision is appended to the query's history in `data/labels/labels.json` (atomic write);
    a rerun of the labeller only adds new proposals.
    """)
    return


@app.cell
def _(mo, runs, store):
    _labelled = {r.qid for r in runs}
    _order = sorted(store.queries.values(), key=lambda q: (q.qid not in _labelled, q.qid))
    pick = mo.ui.dropdown(options={f"{q.qid}: {q.query[:80]}": q.qid for q in _order},
                          value=f"{_order[0].qid}: {_order[0].query[:80]}" if _order else None, label="query")
    search_box = mo.ui.text(label="search the index", placeholder="keywords or a description", full_width=True)
    mo.vstack([pick, search_box])
    return pick, search_box


@app.cell
def _(index, mo, pick, search_box, store):
    ql = store.queries[pick.value]
    _prop = ql.latest_proposal()
    _reasons = _prop.reasons if _prop else {}
    _pending = ql.pending()
    _titles = index.docs.get_many(ql.labels() + _pending)

    def _t(i):
        return _titles[i].title[:90] if i in _titles else "(not in this index)"

    accept = mo.ui.multiselect(options={f"{i}: {_t(i)} — {_reasons.get(i, '')[:80]}": i for i in _pending},
                               label="accept proposals")
    reject_rest = mo.ui.checkbox(label="reject the pending proposals I did not accept")
    remove = mo.ui.multiselect(options={f"{i}: {_t(i)}": i for i in ql.labels()}, label="remove labels")
    _rows = []
    if search_box.value.strip():
        _hits, _ = index.keyword_search(search_box.value, 10)
        _ids = list(dict.fromkeys([h.arxiv_id for h in _hits] +
                                  [h.arxiv_id for h in index.semantic_search(search_box.value, 10)]))
        _found = index.docs.get_many(_ids)
        _rows = [{"arxiv_id": i, "date": str(_found[i].published), "title": _found[i].title,
                  "already a label": i in ql.labels()} for i in _ids if i in _found]
    found = mo.ui.table(_rows, selection="multi", label="search results: select to add") if _rows else None
    reason = mo.ui.text(label="reason (kept in the history)", full_width=True)
    save_button = mo.ui.run_button(label="save decisions")
    mo.vstack([mo.md(f"**{ql.query}**  \nGiven difficulty: `{ql.difficulty}` · now: `{ql.current_difficulty()}`"
                     f" · triage: `{ql.triaged_difficulty()}`"),
               accept, reject_rest, remove, found or mo.md("_Type in the search box to find papers to add._"),
               reason, save_button])
    return accept, found, ql, reason, reject_rest, remove, save_button


@app.cell
def _(accept, found, mo, ql, reason, reject_rest, remove, save_button, store):
    saved = 0
    if save_button.value:
        _acc = list(accept.value)
        _rej = [i for i in ql.pending() if i not in _acc] if reject_rest.value else []
        _add = [r["arxiv_id"] for r in (found.value if found is not None else [])]
        for _action, _ids in (("accept", _acc), ("reject", _rej), ("add", _add), ("remove", list(remove.value))):
            store.decide(ql.qid, _action, _ids, reason=reason.value)
            saved += len(_ids)
    mo.md(f"Saved {saved} decisions." if saved else "")
    return (saved,)


@app.cell
def _(index, mo, pick, saved, store):
    _ = saved  # refresh after a save
    _ql = store.queries[pick.value]
    _titles = index.docs.get_many(_ql.labels())
    _hist = [{"time": e.time, "source": e.source, "action": e.action, "ids": ", ".join(e.ids[:6]) +
              (" …" if len(e.ids) > 6 else ""), "reason": e.reason[:80], "by": e.by} for e in _ql.history]
    mo.vstack([
        mo.md(f"**Current labels** ({len(_ql.labels())}; original {len(_ql.original())}, pending {len(_ql.pending())})"),
        mo.ui.table([{"arxiv_id": i, "title": _titles[i].title if i in _titles else "(not in this index)"}
                     for i in _ql.labels()], selection=None),
        mo.md("**History**"), mo.ui.table(_hist, selection=None),
    ])
    return


@app.cell
def _(index, labels_dir, mo, saved, store):
    _ = saved
    curated_path = labels_dir() / "queries_curated.jsonl"
    _qs = store.export(curated_path, in_corpus=lambda i: i in index.docs)
    _changed = sum(1 for ql in store.queries.values() if ql.labels() != ql.original())
    mo.md(f"""
    ## Export
    `{curated_path}`: {len(_qs)} queries in the query-file format ({_changed} with labels changed by curation).
    Train or evaluate on it with `--queries {curated_path}` (e.g. `python -m arxivqa.evaluate --queries … --split all`).
    `gold_in_corpus` is checked against this notebook's index.
    """)
    return


if __name__ == "__main__":
    app.run()
