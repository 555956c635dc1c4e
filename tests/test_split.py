"""The train/dev split: one function selects the parts, and every consumer draws from the part it names.

These run on the real query file (``queries_train.jsonl`` in the data folder) where it is present, and on
a written stand-in file otherwise, so the properties hold on any checkout.
"""

import json
from collections import Counter

import pytest

from arxivqa.corpus import Query, load_queries, queries_path, select_queries, split_queries


def _stand_in(tmp_path):
    rows = []
    for i in range(60):
        diff = ["easy", "medium", "hard", None][i % 4]
        rows.append({"qid": f"q{i}", "query": f"query number {i} about topic {i % 17}", "difficulty": diff,
                     "gold": [f"2501.{i:05d}"], "gold_in_corpus": [f"2501.{i:05d}"] if i % 5 else []})
    rows.append({**rows[3], "qid": "q3-relabelled", "gold": ["2501.99999"]})  # the same text, labelled twice
    path = tmp_path / "queries.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def query_file(tmp_path):
    real = queries_path()
    return real if real.exists() else _stand_in(tmp_path)


def test_the_parts_are_disjoint_cover_the_file_and_keep_duplicate_texts_together(query_file):
    queries = load_queries(query_file)
    parts = split_queries(queries)
    train, dev = {q.qid for q in parts.train}, {q.qid for q in parts.dev}
    assert train and dev and not train & dev
    assert train | dev == {q.qid for q in queries} and len(parts.train) + len(parts.dev) == len(queries)
    side = {}
    for q in queries:
        key = " ".join(q.query.lower().split())
        side.setdefault(key, set()).add(q.qid in dev)
    assert all(len(s) == 1 for s in side.values())  # a text labelled twice never straddles the split


def test_the_split_is_stratified_by_difficulty(query_file):
    queries = load_queries(query_file)
    parts = split_queries(queries, dev_fraction=0.3)
    total, in_dev = Counter(q.difficulty for q in queries), Counter(q.difficulty for q in parts.dev)
    for diff, n in total.items():
        assert abs(in_dev[diff] - 0.3 * n) <= 2, (diff, in_dev[diff], n)


def test_select_queries_names_its_part_and_keeps_only_scorable_queries(query_file):
    parts = split_queries(load_queries(query_file))
    train = select_queries(query_file, "train")
    dev = select_queries(query_file, "dev", limit=3)
    assert [q.qid for q in train.queries] == [q.qid for q in parts.train if q.gold_in_corpus]
    assert [q.qid for q in dev.queries] == [q.qid for q in parts.dev if q.gold_in_corpus][:3]
    assert train.unscorable == sum(not q.gold_in_corpus for q in parts.train)
    assert dev.tag.endswith("-dev3") and train.tag != dev.tag
    every = select_queries(query_file, "all", scorable_only=False)
    assert len(every.queries) == len(load_queries(query_file))
    with pytest.raises(ValueError, match="split"):
        select_queries(query_file, "test")


def test_training_labelling_and_evaluation_draw_from_the_part_they_name(query_file, monkeypatch):
    """The leak this guards against: training unpacked (train, dev) as (dev, train) and so trained on the
    queries that evaluation then reported as held out."""
    from arxivqa.evaluate import eval_queries
    from arxivqa.train import TrainConfig, load_training_queries

    parts = split_queries(load_queries(query_file))
    train_ids, dev_ids = {q.qid for q in parts.train}, {q.qid for q in parts.dev}
    trained = {q.qid for q in load_training_queries(TrainConfig(queries=str(query_file), split="train"))}
    assert trained and trained <= train_ids and not trained & dev_ids
    for curriculum in ("uniform", "easy-to-hard"):
        cfg = TrainConfig(queries=str(query_file), split="train", curriculum=curriculum)
        assert {q.qid for q in load_training_queries(cfg)} == trained
    evaluated, _tag = eval_queries(str(query_file), "dev")
    assert evaluated and {q.qid for q in evaluated} <= dev_ids
    monkeypatch.setenv("ARXIVQA_EVAL_QUERIES_FILE", str(query_file))
    monkeypatch.delenv("ARXIVQA_EVAL_SPLIT", raising=False)
    assert {q.qid for q in eval_queries()[0]} <= dev_ids  # the default evaluation part is dev


def test_the_labelling_command_labels_train_queries_only(query_file, monkeypatch):
    """``python -m arxivqa.labelling run --split train`` must draw from train: checked up to the point
    where it would open the index (nothing is labelled here)."""
    import arxivqa.index
    from arxivqa import labelling

    seen = {}

    class Stop(Exception):
        pass

    def fake_open_index(*a, **k):
        raise Stop

    import arxivqa.corpus as corpus

    real_select = corpus.select_queries

    def spy(*a, **k):
        sel = real_select(*a, **k)
        seen["qids"] = {q.qid for q in sel.queries}
        return sel

    monkeypatch.setattr(corpus, "select_queries", spy)
    monkeypatch.setattr(arxivqa.index, "open_index", fake_open_index)
    with pytest.raises(Stop):
        labelling.main(["run", "--queries", str(query_file), "--split", "train", "--limit", "50"])
    parts = split_queries(load_queries(query_file))
    assert seen["qids"] and seen["qids"] <= {q.qid for q in parts.train}


def test_a_query_record_without_gold_is_not_scorable():
    from arxivqa.corpus import scorable

    qs = [Query(qid="a", query="x", gold_in_corpus=[]), Query(qid="b", query="y", gold_in_corpus=["1"])]
    assert [q.qid for q in scorable(qs)] == ["b"]
