import datetime as dt
import gzip
import random

import pytest

from arxivqa import config
from arxivqa.corpus import DataMissingError, Paper, iter_papers, load_queries, select
from conftest import write_jsonl


def test_reads_jsonl_and_gz_alike(tmp_path, corpus_file, papers):
    gz = tmp_path / "c.jsonl.gz"
    with gzip.open(gz, "wt") as fh:
        fh.write(corpus_file.read_text())
    assert list(iter_papers(corpus_file)) == papers
    assert list(iter_papers(gz)) == papers


def test_record_fields_are_typed(papers, corpus_file):
    p = next(iter_papers(corpus_file))
    assert isinstance(p.published, dt.date)
    assert p.text.startswith(p.title)
    page = p.page_text()
    assert p.abstract in page and p.published.isoformat() in page


def test_null_authors_and_categories_become_empty_lists():
    p = Paper.model_validate({"arxiv_id": "2501.00001", "title": "t", "abstract": "a", "authors": None,
                              "categories": None, "published": "2025-01-02"})
    assert p.authors == [] and p.categories == []


def test_bad_line_names_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"arxiv_id": "1", "title": "t", "abstract": "a", "published": "2025-01-01"},
                                                {"arxiv_id": "2", "title": "t"}])
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        list(iter_papers(path))


def test_missing_data_names_the_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("ARXIVQA_DATA_DIR", str(tmp_path / "nowhere"))
    assert config.settings().data_dir == (tmp_path / "nowhere").resolve()
    with pytest.raises(DataMissingError, match="ARXIVQA_DATA_DIR"):
        list(iter_papers())
    with pytest.raises(DataMissingError, match="ARXIVQA_DATA_DIR"):
        load_queries()


def test_select_is_deterministic_and_order_independent(papers):
    shuffled = papers[:]
    random.Random(3).shuffle(shuffled)
    a = select(papers, n=10, seed=7)
    b = select(shuffled, n=10, seed=7)
    assert [p.arxiv_id for p in a] == [p.arxiv_id for p in b]
    assert len(a) == 10
    assert [p.arxiv_id for p in a] != [p.arxiv_id for p in select(papers, n=10, seed=8)]


def test_select_filters_and_forced_ids(papers):
    keep = papers[0].arxiv_id  # a cs.CV paper from 2019
    out = select(papers, categories=["cs.CL"], min_date="2022-01-01", max_date="2025-12-31", include_ids=[keep])
    assert keep in {p.arxiv_id for p in out}
    for p in out:
        if p.arxiv_id != keep:
            assert "cs.CL" in p.categories and dt.date(2022, 1, 1) <= p.published <= dt.date(2025, 12, 31)
    # forced IDs count towards n and survive any cut
    cut = select(papers, n=3, include_ids=[keep])
    assert len(cut) == 3 and keep in {p.arxiv_id for p in cut}
    with pytest.raises(ValueError):
        select(papers, n=-1)


def test_real_query_file_if_present():
    try:
        queries = load_queries()
    except DataMissingError:
        pytest.skip("the shared data folder is not here")
    assert len(queries) == 192
    assert sum(bool(q.gold_in_corpus) for q in queries) == 177
    assert {q.difficulty for q in queries} == {"easy", "medium", "hard", None}
