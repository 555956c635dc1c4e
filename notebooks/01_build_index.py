import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell
def _():
    import marimo as mo

    from arxivqa import config
    from arxivqa.corpus import iter_papers, load_queries, stats_frame
    from arxivqa.evaluate import one_shot_baselines, summarize
    from arxivqa.index import build_for_scale
    from arxivqa.plots import abstract_lengths, papers_per_month, recall_by_difficulty, save, save_table, top_categories
    from arxivqa.tools import ArxivEnv

    return (
        ArxivEnv,
        abstract_lengths,
        build_for_scale,
        config,
        iter_papers,
        load_queries,
        mo,
        one_shot_baselines,
        papers_per_month,
        recall_by_difficulty,
        save,
        save_table,
        stats_frame,
        summarize,
        top_categories,
    )


@app.cell
def _(mo):
    mo.md("""
    # 01 · The corpus, the index, and one-shot retrieval baselines

    The agent of ArxivQA searches ~140K arXiv AI papers with four tools: `keyword_search` (BM25),
    `semantic_search` (embeddings), `read_page` and `finish`. This notebook looks at the corpus,
    builds both indexes, lets you try the tools, and measures what **one** search call finds
    without any agent: BM25, dense retrieval, and their reciprocal-rank fusion, at recall@10/@50
    against the gold papers of the 192 real alphaXiv queries.

    Scale is a setting: `ARXIVQA_SCALE=demo` (default; every gold paper plus a seeded sample,
    20,000 papers) or `full` (all 139,670). Figures and tables go to `results/`.
    """)
    return


@app.cell
def _(config, mo):
    scale = mo.ui.dropdown(options=list(config.SCALES), value=config.scale(), label="index scale")
    scale
    return (scale,)


@app.cell
def _(iter_papers, mo, stats_frame):
    stats = stats_frame(iter_papers())
    mo.md(
        f"""
        ## The corpus
        **{len(stats):,} papers**, {stats['published'].min():%Y-%m-%d} to {stats['published'].max():%Y-%m-%d};
        {(stats['published'] >= '2025-01-01').mean():.0%} published since 2025;
        {(stats['n_categories'] == 0).sum():,} without categories (from category-less listings);
        {(stats['n_authors'] == 0).sum():,} without authors. Abstracts only: `read_page` serves title,
        authors, date, categories, abstract and comment.
        """
    )
    return (stats,)


@app.cell
def _(abstract_lengths, mo, papers_per_month, save, stats, top_categories):
    _figs = {"01_papers_per_month.png": papers_per_month(stats), "01_categories.png": top_categories(stats),
             "01_abstract_lengths.png": abstract_lengths(stats)}
    for _name, _fig in _figs.items():
        save(_fig, _name)
    mo.vstack([mo.hstack([_figs["01_categories.png"], _figs["01_abstract_lengths.png"]]), _figs["01_papers_per_month.png"]])
    return


@app.cell
def _(build_for_scale, mo, scale):
    with mo.status.spinner(title=f"Building the {scale.value} index (idempotent: a rebuild adds only what is missing)"):
        index, build_report = build_for_scale(scale.value)
    mo.md(
        f"""
        ## The index (`{scale.value}`)
        `{index.folder}`: {build_report.docs:,} papers; this run added {build_report.docs_added:,} documents and
        {build_report.embed_added:,} embeddings ({build_report.embed_seconds:.1f} s); keyword engine
        `{index.keyword_engine_name}` {'built' if any(build_report.keyword_built.values()) else 'already current'}
        ({sum(build_report.keyword_seconds.values()):.1f} s); embedder `{index.embedder.name}` ({index.embedder.dim}-d).
        """
    )
    return (index,)


@app.cell
def _(mo):
    query = mo.ui.text(value="reinforcement learning for retrieval agents that call search tools", label="query",
                       full_width=True)
    mo.vstack([mo.md("## Search playground\nType a query; click a row to read the paper as `read_page` shows it."), query])
    return (query,)


@app.cell
def _(ArxivEnv, index, mo, query):
    import pandas as _pd

    def _table(hits):
        papers = index.docs.get_many([h.arxiv_id for h in hits])
        return _pd.DataFrame([{"arxiv_id": h.arxiv_id, "published": str(papers[h.arxiv_id].published),
                               "title": papers[h.arxiv_id].title, "score": round(h.score, 3)} for h in hits])

    keyword_table = mo.ui.table(_table(index.keyword_search(query.value, 10)[0]), selection="single", label="keyword_search (BM25)")
    semantic_table = mo.ui.table(_table(index.semantic_search(query.value, 10)), selection="single", label="semantic_search (embeddings)")
    _env = ArxivEnv(index)
    agent_view = mo.accordion({"What the agent sees (opaque IDs, snippets)": mo.plain_text(_env.keyword_search(query.value, max_results=3))})
    mo.vstack([mo.hstack([keyword_table, semantic_table], widths="equal"), agent_view])
    return keyword_table, semantic_table


@app.cell
def _(index, keyword_table, mo, semantic_table):
    _rows = [t.value for t in (keyword_table, semantic_table) if t.value is not None and len(t.value)]
    if _rows:
        _paper = index.docs.get(_rows[-1].iloc[0]["arxiv_id"])
        _view = mo.plain_text(_paper.page_text())
    else:
        _view = mo.md("_Select a row to read the paper._")
    _view
    return


@app.cell
def _(index, load_queries, mo, one_shot_baselines, scale, summarize):
    queries = load_queries()
    per_query = one_shot_baselines(index, queries, ks=(10, 50))
    baseline_summary = summarize(per_query, ["recall@10", "recall@50"])
    mo.vstack([
        mo.md(f"""
        ## One-shot retrieval baselines (`{scale.value}` index)
        One call per query, no agent: BM25 (keyword engine), dense (embeddings), hybrid = reciprocal-rank
        fusion (k=60) of their top-100. Scored against `gold_in_corpus` on the {per_query['qid'].nunique()}
        of {len(queries)} queries that have a gold paper in the corpus.
        {'**Demo scale keeps every gold paper among 20,000**, so these recalls are higher than on the full corpus.' if scale.value == 'demo' else ''}
        """),
        mo.ui.table(baseline_summary, selection=None),
    ])
    return baseline_summary, per_query


@app.cell
def _(
    baseline_summary,
    index,
    per_query,
    recall_by_difficulty,
    save,
    save_table,
    scale,
):
    save_table(baseline_summary, f"01_baselines_{scale.value}")
    save_table(per_query, f"01_baselines_{scale.value}_per_query")
    _fig = recall_by_difficulty(baseline_summary, title=f"One-shot retrieval · BM25 + {index.embedder.name} embeddings · "
                                                    f"{scale.value} index · deterministic (sample seed 0)")
    save(_fig, f"01_baselines_{scale.value}.png")
    _fig
    return


if __name__ == "__main__":
    app.run()
