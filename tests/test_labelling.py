"""The label store (history, atomicity, export), agreement figures, and the labeller end to end."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from arxivqa.corpus import Query, load_queries
from arxivqa.labelling import (Candidate, Labeller, LabellerConfig, LabellerRun, LabelStore, Verdict,
                               agreement, agreement_summary, load_runs)
from arxivqa.llm import LLM, Endpoint

QUERIES = [
    Query(qid="q1", query="sparse attention", gold=["a", "b", "x-not-in-corpus"], gold_in_corpus=["a", "b"],
          difficulty="easy"),
    Query(qid="q2", query="protein folding", gold=["c"], gold_in_corpus=["c"], difficulty=None),
]


def _run(qid="q1", proposed=("b", "n1"), gold=("a", "b"), cands=("a", "b", "n1", "n2"), difficulty="easy"):
    return LabellerRun(qid=qid, query="q", difficulty=difficulty, gold_in_corpus=list(gold), endpoint="e",
                       candidates=[Candidate(arxiv_id=c, rank=i + 1,
                                             verdict=Verdict(relevant=c in proposed, score=3 if c in proposed else 0,
                                                             reason=f"because {c}")) for i, c in enumerate(cands)],
                       proposed=list(proposed))


def test_a_new_store_holds_the_original_gold(tmp_path):
    store = LabelStore.open(tmp_path / "labels.json", QUERIES)
    assert store.queries["q1"].labels() == ["a", "b", "x-not-in-corpus"]
    assert store.queries["q1"].history[0].source == "original"
    assert LabelStore(tmp_path / "labels.json").queries["q2"].labels() == ["c"]  # persisted


def test_proposals_stay_pending_until_a_person_decides(tmp_path):
    store = LabelStore.open(tmp_path / "labels.json", QUERIES)
    store.propose(_run(proposed=("b", "n1", "n2")))
    ql = store.queries["q1"]
    assert ql.labels() == ["a", "b", "x-not-in-corpus"] and ql.pending() == ["n1", "n2"]
    assert ql.latest_proposal().reasons["n1"] == "because n1"
    store.decide("q1", "accept", ["n1"], reason="on topic")
    store.decide("q1", "reject", ["n2"])
    store.decide("q1", "remove", ["a"], reason="wrong paper")
    ql = store.queries["q1"]
    assert ql.labels() == ["b", "x-not-in-corpus", "n1"] and ql.pending() == []
    assert [e.source for e in ql.history] == ["original", "labeller", "human", "human", "human"]


def test_a_labeller_rerun_keeps_every_human_decision(tmp_path):
    path = tmp_path / "labels.json"
    store = LabelStore.open(path, QUERIES)
    store.propose(_run(proposed=("n1",)))
    store.decide("q1", "accept", ["n1"])
    store.decide("q1", "add", ["h1"], reason="found by hand")
    store.set_difficulty("q1", "hard", reason="vague")
    # the labeller runs again (a new process), proposes something else
    again = LabelStore.open(path, QUERIES)
    again.propose(_run(proposed=("n3",)))
    ql = LabelStore(path).queries["q1"]
    assert ql.labels() == ["a", "b", "x-not-in-corpus", "n1", "h1"] and ql.pending() == ["n3"]
    assert ql.current_difficulty() == "hard"
    assert [e.action for e in ql.history] == ["gold", "propose", "accept", "add", "difficulty", "propose"]


def test_two_writers_do_not_lose_each_others_events(tmp_path):
    path = tmp_path / "labels.json"
    person, labeller = LabelStore.open(path, QUERIES), LabelStore.open(path, QUERIES)
    person.decide("q2", "add", ["h9"])
    labeller.propose(_run(qid="q2", proposed=("n7",), gold=("c",)))  # its in-memory copy predates the add
    ql = LabelStore(path).queries["q2"]
    assert ql.labels() == ["c", "h9"] and ql.pending() == ["n7"]


def test_an_interrupted_write_leaves_the_previous_state(tmp_path, monkeypatch):
    path = tmp_path / "labels.json"
    store = LabelStore.open(path, QUERIES)
    store.decide("q1", "add", ["h1"])
    before = path.read_bytes()

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("power cut between writing the temporary file and renaming it")

    monkeypatch.setattr("arxivqa.files.os.replace", crash)
    with pytest.raises(KeyboardInterrupt):
        store.decide("q1", "add", ["h2"])
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert store.queries["q1"].labels()[-1] == "h1"  # memory did not move ahead of the file either
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert LabelStore(path).queries["q1"].labels()[-1] == "h1"


def test_a_killed_writer_never_leaves_a_broken_file(tmp_path):
    path = tmp_path / "labels.json"
    LabelStore.open(path, QUERIES)
    code = ("import sys; from arxivqa.labelling import LabelStore\n"
            "s = LabelStore(sys.argv[1])\n"
            "for i in range(100000):\n"
            "    s.decide('q1', 'add', [f'h{i}'])\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)])
    time.sleep(4.0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    labels = LabelStore(path).queries["q1"].labels()  # parses: the file is whole
    added = [x for x in labels if x.startswith("h")]
    assert added and added == [f"h{i}" for i in range(len(added))]  # a prefix of the writes, none half-done


def test_export_writes_the_query_file_format(tmp_path):
    store = LabelStore.open(tmp_path / "labels.json", QUERIES)
    store.propose(_run(proposed=("n1", "n2")))
    store.decide("q1", "accept", ["n1"])
    store.set_difficulty("q2", "medium")
    out = tmp_path / "curated.jsonl"
    store.export(out)
    rows = {q.qid: q for q in load_queries(out)}
    assert rows["q1"].gold == ["a", "b", "x-not-in-corpus", "n1"]
    assert rows["q1"].gold_in_corpus == ["a", "b", "n1"]  # the original's missing paper stays out
    assert rows["q1"].difficulty == "easy" and rows["q2"].difficulty == "medium"
    assert set(json.loads(out.read_text().splitlines()[0])) >= {"qid", "query", "gold", "gold_in_corpus", "difficulty"}
    with_pending = {q.qid: q for q in store.export(tmp_path / "p.jsonl", include_pending=True)}
    assert with_pending["q1"].gold[-1] == "n2"


def test_agreement_with_the_given_gold():
    frame = agreement([_run(proposed=("b", "n1")), _run(qid="q3", proposed=(), gold=("z",), cands=("y",),
                                                         difficulty=None)])
    r1 = frame.set_index("qid").loc["q1"]
    assert (r1.precision, r1.recall, r1.candidate_recall, r1.hits) == (0.5, 0.5, 1.0, 1)
    r3 = frame.set_index("qid").loc["q3"]
    assert r3.recall == 0.0 and r3.candidate_recall == 0.0 and r3.difficulty == "unlabelled"
    summary = agreement_summary(frame).set_index("difficulty")
    assert summary.loc["all", "n"] == 2 and summary.loc["all", "recall"] == 0.25
    assert summary.loc["easy", "precision"] == 0.5


def test_the_labeller_end_to_end_over_a_scripted_endpoint(scripted_endpoint, built_index, papers, tmp_path):
    target = next(p for p in papers if p.title.startswith("Sparse attention"))

    def reply(body):
        text = body["messages"][-1]["content"]
        if "plan a literature search" in text:
            return '{"sub_queries": ["sparse attention long sequences", "protein folding", "linear memory attention"]}'
        relevant = "Sparse attention" in text
        return json.dumps({"relevant": relevant, "score": 3 if relevant else 0, "reason": "checked the abstract"})

    srv = scripted_endpoint(reply)
    llm = LLM(Endpoint(name="scripted", model="m", base_url=srv.base_url, transport_retries=0))
    q = Query(qid="t1", query="attention for very long documents", gold_in_corpus=[target.arxiv_id],
              difficulty="medium")
    store = LabelStore.open(tmp_path / "labels.json", [q])
    runs_path = tmp_path / "runs.jsonl"
    labeller = Labeller(llm, built_index, LabellerConfig(n_candidates=5))
    runs = labeller.run([q], runs_path, store=store, progress=False)
    run = runs[0]
    assert run.sub_queries == [q.query, "sparse attention long sequences", "linear memory attention"]
    assert "protein folding" in run.errors[0]  # off topic (no word shared with the query): dropped, and said so
    assert len(run.candidates) == 5 and all(c.verdict for c in run.candidates)
    assert run.proposed == [target.arxiv_id] and run.llm_calls == 6 and run.llm_failures == 0
    assert any(c.found_by for c in run.candidates)
    assert store.queries["t1"].latest_proposal().ids == [target.arxiv_id]
    assert store.queries["t1"].pending() == []  # it is gold already: nothing left to decide
    # resumable: a second run of the same file makes no LLM call
    n = len(srv.requests)
    assert labeller.run([q], runs_path, progress=False)[0].proposed == run.proposed and len(srv.requests) == n
    assert len(load_runs(runs_path)) == 1


def test_the_labeller_survives_a_failing_endpoint(scripted_endpoint, built_index, tmp_path):
    srv = scripted_endpoint(lambda body: "not json")
    llm = LLM(Endpoint(name="broken", model="m", base_url=srv.base_url, transport_retries=0, max_retries=1))
    run = Labeller(llm, built_index, LabellerConfig(n_candidates=2)).label(Query(qid="b", query="diffusion models"))
    assert run.sub_queries == ["diffusion models"] and run.proposed == []
    assert run.llm_failures == 3 and len(run.errors) == 3 and all(c.error for c in run.candidates)


def test_the_labeller_with_the_local_model(llm_server, built_index, papers):
    llm = LLM(Endpoint(name="local", model="qwen2.5-coder-0.5b-instruct", max_retries=2), base_url=llm_server)
    target = next(p for p in papers if p.title.startswith("Group relative"))
    run = Labeller(llm, built_index, LabellerConfig(n_sub_queries=1, n_candidates=2)).label(
        Query(qid="l", query="GRPO for math reasoning", gold_in_corpus=[target.arxiv_id]))
    assert 1 <= len(run.sub_queries) <= 2 and len(run.candidates) == 2
    assert all((c.verdict is None) != (c.error is None) for c in run.candidates)  # judged, or the failure kept
    assert set(run.proposed) <= {c.arxiv_id for c in run.candidates}
    assert run.llm_calls == 3
