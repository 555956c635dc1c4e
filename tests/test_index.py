import datetime as dt

import pytest

from arxivqa.index import Analyzer, SearchIndex, date_int, snippets
from conftest import by_title

NASTY = ['AND OR NOT', '"unbalanced', "title:(graph", "*", "?", "~2", "a^3", "\\", "[1 TO 5]", "{", "-",
         "'; DROP TABLE papers; --", "the of and", "🙂 émoji ünïcode", "x" * 900, "graph AND (neural OR",
         "NOT", "::::", "%%%", "\x00"]


@pytest.mark.parametrize("engine", ["bm25s", "whoosh"])
def test_keyword_round_trip(built_index, papers, engine):
    idx = SearchIndex(built_index.folder, keyword_engine=engine)
    target = by_title(papers, "Sparse attention")
    hits, terms = idx.keyword_search("sparse attention long documents", 5)
    assert hits[0].arxiv_id == target.arxiv_id
    assert "attent" in terms  # stemmed


@pytest.mark.parametrize("engine", ["bm25s", "whoosh"])
@pytest.mark.parametrize("query", NASTY)
def test_query_syntax_never_raises(built_index, engine, query):
    idx = SearchIndex(built_index.folder, keyword_engine=engine)
    hits, _ = idx.keyword_search(query, 10)
    assert isinstance(hits, list)


@pytest.mark.parametrize("engine", ["bm25s", "whoosh"])
def test_keyword_min_date(built_index, papers, engine):
    idx = SearchIndex(built_index.folder, keyword_engine=engine)
    since = dt.date(2024, 1, 1)
    hits, _ = idx.keyword_search("learning models", 50, date_int(since))
    dates = {p.arxiv_id: p.published for p in papers}
    assert hits and all(dates[h.arxiv_id] >= since for h in hits)
    assert not idx.keyword_search("learning models", 50, date_int(dt.date(2100, 1, 1)))[0]


def test_semantic_round_trip(built_index, papers):
    target = by_title(papers, "Protein structure")
    hits = built_index.semantic_search(target.abstract, 3)
    assert hits[0].arxiv_id == target.arxiv_id
    since = dt.date(2025, 1, 1)
    dates = {p.arxiv_id: p.published for p in papers}
    hits = built_index.semantic_search("language models", 30, date_int(since))
    assert hits and all(dates[h.arxiv_id] >= since for h in hits)


def test_build_is_idempotent(built_index, papers):
    report = built_index.build(papers, keyword_engines=["bm25s", "whoosh"])
    assert report.docs_added == 0 and report.embed_added == 0
    assert report.keyword_built == {"bm25s": False, "whoosh": False}
    assert len(built_index.docs) == len(papers) == len(built_index.semantic)


def test_interrupted_build_resumes_with_only_the_missing(tmp_path, papers):
    folder = tmp_path / "idx"
    first = SearchIndex(folder)
    first.docs.add(papers[:10])
    first.semantic.add(papers[:10])
    (folder / "bm25s.tmp").mkdir(parents=True)  # debris of a keyword build killed midway
    (folder / "bm25s.tmp" / "junk").write_text("half-written")

    again = SearchIndex(folder)
    report = again.build(papers, keyword_engines=["bm25s", "whoosh"])
    assert report.docs_added == len(papers) - 10
    assert report.embed_added == len(papers) - 10
    assert len(again.docs) == len(again.semantic) == len(papers)
    hits, _ = again.keyword_search("protein structure amino acid", 3)
    assert hits[0].arxiv_id == by_title(papers, "Protein structure").arxiv_id
    assert not (folder / "bm25s.tmp").exists()


def test_whoosh_build_resumes(tmp_path, papers):
    from arxivqa.index import WhooshEngine

    a = Analyzer()
    assert WhooshEngine.build(tmp_path / "w", papers[:7], a) == 7
    assert WhooshEngine.build(tmp_path / "w", papers, a) == len(papers) - 7
    assert WhooshEngine(tmp_path / "w").covers(len(papers))


def test_docstore(built_index, papers):
    p = papers[5]
    assert built_index.docs.get(p.arxiv_id) == p
    assert built_index.docs.get("9999.99999") is None
    assert p.arxiv_id in built_index.docs
    assert set(built_index.docs.get_many([p.arxiv_id, "nope"])) == {p.arxiv_id}


def test_snippets_mark_matches_and_stay_short():
    a = Analyzer()
    text = ("Background filler sentence. " * 30) + "Here graph networks learn. " + ("More filler words. " * 30)
    out = snippets(text, set(a.terms("graphs network")), a, max_snippets=2, width=400)
    assert out and "**graph**" in out[0] and "**networks**" in out[0]
    assert all(len(s) <= 440 for s in out)
    assert snippets("no overlap here", {"zebra"}, a) == ["no overlap here"]


def test_unknown_engine_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="unknown keyword engine"):
        SearchIndex(tmp_path, keyword_engine="lucene")


def test_missing_index_is_a_clear_error(tmp_path):
    from arxivqa.index import open_index

    with pytest.raises(FileNotFoundError, match="build it first"):
        open_index(folder=tmp_path / "none")


def test_exact_and_hnsw_modes_agree_on_a_small_index(built_index, papers):
    from arxivqa.index import SemanticIndex

    hnsw = SemanticIndex(built_index.folder / "chroma", built_index.embedder, search_mode="hnsw")
    exact = SemanticIndex(built_index.folder / "chroma", built_index.embedder, search_mode="exact")
    for q in ("protein structure", "speech audio", "federated clients"):
        assert [h.arxiv_id for h in exact.search(q, 5)] == [h.arxiv_id for h in hnsw.search(q, 5)]
    since = date_int(dt.date(2024, 1, 1))
    assert {h.arxiv_id for h in exact.search("models", 30, since)} == {h.arxiv_id for h in hnsw.search("models", 30, since)}
    with pytest.raises(ValueError, match="semantic search mode"):
        SemanticIndex(built_index.folder / "chroma", built_index.embedder, search_mode="lsh")


def test_exact_mode_sees_papers_added_later(tmp_path, papers):
    idx = SearchIndex(tmp_path / "grow")
    idx.semantic.add(papers[:5])
    assert len(idx.semantic_search("anything", 50)) == 5
    idx.semantic.add(papers)
    assert len(idx.semantic_search("anything", 50)) == len(papers)


def test_exact_mode_pages_through_the_collection(built_index, papers, monkeypatch):
    from arxivqa.index import SemanticIndex

    monkeypatch.setattr(SemanticIndex, "PAGE", 7)
    exact = SemanticIndex(built_index.folder / "chroma", built_index.embedder, search_mode="exact")
    assert {h.arxiv_id for h in exact.search("anything", 100)} == {p.arxiv_id for p in papers}
