"""Judge validity pairs: built by construction from real-shaped trajectories; a judge measured on them."""

import json
import math

import pytest

from arxivqa.judge import Judge
from arxivqa.llm import LLM, Endpoint, ResponseCache
from arxivqa.records import AssistantTurn, Hit, Step, ToolCall, ToolCallRecord, Trajectory, submission_recall
from arxivqa.validity import KINDS, build_pairs, is_rich, is_single, measure, spearman, wrong_submission

GOLD = ["2401.00001", "2401.00002"]


def hit(pid, i):
    return Hit(arxiv_id=pid, id=f"P-{i:08x}", title=f"paper {pid}", published="2024-01-01", rank=i)


def search(name, q, ids, turn):
    return ToolCallRecord(call_id=f"{name}{q}{turn}", name=name, arguments={"query": q}, turn=turn, result="...",
                          hits=[hit(pid, i) for i, pid in enumerate(ids, 1)])


def episode(qid, turns, submitted):
    steps = []
    for n, calls in enumerate(turns, 1):
        steps.append(Step(turn=n, assistant=AssistantTurn(text="next", tool_calls=[ToolCall(name=c.name, arguments=c.arguments)
                                                                                    for c in calls]), results=calls))
    fin = ToolCallRecord(call_id="f", name="finish", arguments={"paper_ids": ["x"]}, result="Submitted", turn=len(turns) + 1)
    steps.append(Step(turn=len(turns) + 1, assistant=AssistantTurn(text="done", tool_calls=[ToolCall(name="finish")]),
                      results=[fin]))
    return Trajectory(qid=qid, query=f"query {qid}", gold_in_corpus=GOLD, policy="t", steps=steps, submitted=submitted)


def rich(qid):
    return episode(qid, [[search("keyword_search", "a", ["2401.00001", "9.1"], 1), search("semantic_search", "b", ["9.2"], 1)],
                         [search("keyword_search", "c", ["9.3", "9.4"], 2)]], ["2401.00001"])


def single_offtopic(qid):
    return episode(qid, [[search("keyword_search", f"query {qid}", ["9.5", "9.6"], 1)]], ["9.5"])


def test_pairs_are_ordered_by_construction():
    trajs = [rich("q1"), single_offtopic("q1"), rich("q2"), single_offtopic("q2"), rich("dev1"), single_offtopic("dev1")]
    assert is_rich(trajs[0]) and not is_single(trajs[0]) and is_single(trajs[1]) and not is_rich(trajs[1])
    pairs = build_pairs(trajs, per_kind=5, allowed_qids={"q1", "q2"})
    assert {p.qid for p in pairs} == {"q1", "q2"}  # a query outside the allowed part is never used
    assert {p.kind for p in pairs} == set(KINDS) and len(pairs) == 6
    for p in pairs:
        assert p.better.qid == p.worse.qid
        if p.kind == "right_vs_wrong_submission":
            assert submission_recall(p.better) > 0 == submission_recall(p.worse)
            assert [s.results for s in p.better.steps[:-1]] == [s.results for s in p.worse.steps[:-1]]  # same searches
            assert p.worse.steps[-1].results[0].arguments == {"paper_ids": ["P-00000002"]}  # the first non-gold shown
        else:
            assert submission_recall(p.better) > submission_recall(p.worse)
    assert len(build_pairs(trajs, per_kind=1)) == 3  # at most per_kind of each kind


def test_no_wrong_submission_without_enough_non_gold_papers_shown():
    t = episode("q", [[search("keyword_search", "a", ["2401.00001"], 1)]], ["2401.00001"])
    assert wrong_submission(t) is None


def test_spearman_with_ties_and_degenerate_input():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2, 2], [1, 1, 2, 2]) == pytest.approx(1.0)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3])) and math.isnan(spearman([1, 2], [1, 2]))


def _answer(h):
    return json.dumps({"search_diversity": 2, "thoroughness": 2, "thoughtfulness": 2, "document_relevance": 2,
                       "holistic": h, "rationale": "ok"})


def test_a_judge_is_measured_on_pairs_and_pool(scripted_endpoint, tmp_path):
    def reply(body):  # reads the submitted titles: 9 when a gold paper's title is there, 2 otherwise; one failure
        text = body["messages"][1]["content"]
        if "query q3" in text:
            return "no verdict"
        sub = json.loads(text.split("\n", 1)[1].rsplit("\nEND TRAJECTORY", 1)[0])["submitted_titles"]
        return _answer(9 if any("2401.0000" in s for s in sub) else 2)

    srv = scripted_endpoint(reply)
    llm = LLM(Endpoint(name="j", model="m", base_url=srv.base_url, transport_retries=0, max_retries=1),
              cache=ResponseCache(tmp_path / "c.sqlite"))
    trajs = [rich("q1"), single_offtopic("q1"), rich("q2"), single_offtopic("q2")]
    pairs = build_pairs(trajs, per_kind=5)
    pool = [rich("q4"), single_offtopic("q4"), rich("q5"), single_offtopic("q5"), rich("q3")]
    m = measure(Judge(llm), pairs, pool)
    assert m["pairs"] == m["pairs_scored"] == 6 and m["pairwise_accuracy"] == 1.0
    assert set(m["pairwise_accuracy_by_kind"]) == set(KINDS) and m["pool_scored"] == 4
    assert m["spearman_recall"] == pytest.approx(1.0) and m["fallback_rate"] == pytest.approx(1 / 17)
    assert m["seconds_per_judgment"] > 0
    assert len(m["scores"]["pairs"]) == 6 and all(b > w for b, w in m["scores"]["pairs"])
    assert len(m["scores"]["pool"]) == 5 and m["scores"]["pool"].count(None) == 1  # q3's verdict fell back
    from arxivqa.validity import validity_table

    row = validity_table({"judges": {"j": m}}).iloc[0]
    assert row["judge"] == "j" and row["pairwise_accuracy"] == 1.0 and row["pool"] == 4
    assert {f"acc_{k}" for k in KINDS} <= set(row.index)


def test_sources_are_the_teachers_episodes_and_the_runs_rollouts_up_to_a_step(tmp_path):
    from arxivqa.validity import train_sources

    demos = tmp_path / "demos.jsonl"
    demos.write_text(json.dumps({"trajectory": rich("t1").model_dump(mode="json")}) + "\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "rollouts.jsonl").write_text("".join(
        json.dumps({"step": s, "trajectory": single_offtopic(f"q{s}").model_dump(mode="json")}) + "\n" for s in (1, 2, 3)))
    every, policy = train_sources([demos], [run])
    assert [t.qid for t in every] == ["t1", "q1", "q2", "q3"] and [t.qid for t in policy] == ["q1", "q2", "q3"]
    every, policy = train_sources([demos], [run], until_step=2)  # the run as it was at step 2
    assert [t.qid for t in policy] == ["q1", "q2"] and len(every) == 3


def test_a_set_is_identified_by_its_pairs_and_pool_not_its_provenance():
    from arxivqa.validity import set_fingerprint

    pairs = [p.model_dump(mode="json") for p in build_pairs([rich("q1"), single_offtopic("q1")], per_kind=5)]
    a = {"sources": {"runs": ["/somewhere/run"]}, "pairs": pairs, "pool": []}
    b = {"sources": {"runs": ["results/runs/run"]}, "pairs": pairs, "pool": []}
    assert set_fingerprint(a) == set_fingerprint(b) != set_fingerprint({**a, "pairs": pairs[:1]})


def test_the_set_is_kept_compressed_and_a_report_of_another_set_is_kept_aside(tmp_path, monkeypatch):
    import arxivqa.judge
    from arxivqa.judge import JudgeResult
    from arxivqa.validity import main, read_set, set_fingerprint, write_set

    pairs = [p.model_dump(mode="json") for p in build_pairs([rich("q1"), single_offtopic("q1")], per_kind=5)]
    data = {"seed": 0, "pairs": pairs, "pool": [rich("q4").model_dump(mode="json")]}
    gz, plain = tmp_path / "set.json.gz", tmp_path / "set.json"
    first = write_set(gz, data).read_bytes()
    assert write_set(gz, data).read_bytes() == first and first[:2] == b"\x1f\x8b"  # gzip, the same bytes again
    assert read_set(gz) == read_set(write_set(plain, data)) == data
    with pytest.raises(FileNotFoundError, match="validity build"):
        read_set(tmp_path / "missing.json.gz")

    class Recall:  # a judge that scores the submission's recall
        def score_batch(self, trajs, desc=None):
            return [JudgeResult(score=submission_recall(t)) for t in trajs]

    monkeypatch.setattr(arxivqa.judge, "make_judge", lambda name: Recall())
    monkeypatch.setenv("ARXIVQA_RESULTS_DIR", str(tmp_path))
    (tmp_path / "judge_validity.json").write_text(json.dumps({"judges": {"old": {}}, "set": {"sha256": "0123"}}))
    main(["measure", "--set", str(gz), "--judges", "recall"])
    report = json.loads((tmp_path / "judge_validity.json").read_text())
    assert report["set"]["sha256"] == set_fingerprint(data) and set(report["judges"]) == {"recall"}
    assert report["judges"]["recall"]["pairwise_accuracy"] == 1.0
    assert set(report["judges"]["recall"]["cpu"]) == {"model", "cores", "bf16_units"}  # where its seconds were taken
    assert json.loads((tmp_path / "judge_validity_0123.json").read_text())["judges"] == {"old": {}}  # not lost


def test_the_mean_of_two_measured_judges_is_computed_from_their_scores(tmp_path, monkeypatch):
    import arxivqa.judge
    from arxivqa.judge import JudgeResult
    from arxivqa.validity import combine, main, write_set

    trajs = [rich("q1"), single_offtopic("q1"), rich("q2"), single_offtopic("q2")]
    pairs = build_pairs(trajs, per_kind=5)
    pool = [rich("q4"), single_offtopic("q4"), rich("q5")]

    class Fixed:  # scores by position in the order measure asks: every pair's better, worse, then the pool
        def __init__(self, scores):
            self.scores, self.at = scores, 0

        def score_batch(self, trajs, desc=None):
            asked, self.at = self.scores[self.at:self.at + len(trajs)], self.at + len(trajs)
            return [JudgeResult(score=s) if s is not None else JudgeResult(score=0.0, fallback=True) for s in asked]

    # a prefers the better of every pair by 0.2 (one pool item fell back); b prefers the worse by 0.1
    n = len(pairs)
    a = measure(Fixed([0.6, 0.4] * n + [0.9, None, 0.5]), pairs, pool)
    b = measure(Fixed([0.4, 0.5] * n + [0.1, 0.2, 0.3]), pairs, pool)
    assert a["pairwise_accuracy"] == 1.0 and b["pairwise_accuracy"] == 0.0
    both = combine(pairs, pool, [a, b])
    assert both["pairwise_accuracy"] == 1.0 and both["mean_of"] == 2  # (0.6+0.4)/2 = 0.5 > (0.4+0.5)/2 = 0.45
    assert both["scores"]["pool"] == [pytest.approx(0.5), None, pytest.approx(0.4)]  # a fallback stays one
    assert both["fallback_rate"] == pytest.approx(1 / (2 * n + 3))
    assert both["seconds_per_judgment"] == pytest.approx(a["seconds_per_judgment"] + b["seconds_per_judgment"])
    with pytest.raises(ValueError, match="the set has"):
        combine(pairs, pool[:2], [a, b])

    # the command: only judges measured on this very set
    gz = write_set(tmp_path / "set.json.gz", {"seed": 0, "pairs": [p.model_dump(mode="json") for p in pairs],
                                              "pool": [t.model_dump(mode="json") for t in pool]})
    monkeypatch.setenv("ARXIVQA_RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("ARXIVQA_RUNS_DIR", str(tmp_path / "data" / "runs"))  # progress files go under data/validity/
    judges = {"a": Fixed([0.6, 0.4] * n + [0.9, None, 0.5]), "b": Fixed([0.4, 0.5] * n + [0.1, 0.2, 0.3])}
    monkeypatch.setattr(arxivqa.judge, "make_judge", lambda name: judges[name])
    with pytest.raises(SystemExit, match="measure the judges on it first"):
        main(["combine", "--set", str(gz), "a", "b"])
    main(["measure", "--set", str(gz), "--judges", "a", "b"])
    assert not list(tmp_path.rglob("*.progress.json"))  # kept in the report, the progress files are gone
    with pytest.raises(SystemExit, match="not measured judges.*: c"):
        main(["combine", "--set", str(gz), "a", "c"])
    main(["combine", "--set", str(gz), "a", "b", "--name", "ab"])
    report = json.loads((tmp_path / "judge_validity.json").read_text())
    assert report["judges"]["ab"]["pairwise_accuracy"] == 1.0 and report["judges"]["ab"]["of"] == ["a", "b"]
    # where the parts' seconds were measured is kept with them; the sum has a CPU only when they share one
    ab = report["judges"]["ab"]
    assert ab["cpu"] == report["judges"]["a"]["cpu"] and set(ab["parts"]) == {"a", "b"}
    report["judges"]["b"]["cpu"] = {"model": "another CPU"}
    (tmp_path / "judge_validity.json").write_text(json.dumps(report))
    main(["combine", "--set", str(gz), "a", "b", "--name", "ab"])
    ab = json.loads((tmp_path / "judge_validity.json").read_text())["judges"]["ab"]
    assert ab["cpu"] is None and ab["parts"]["b"]["cpu"] == {"model": "another CPU"}
    assert set(report["judges"]) == {"a", "b", "ab"}


def test_the_measured_judges_a_name_loads_are_offered_best_first(tmp_path):
    from arxivqa.validity import measured_judges

    path = tmp_path / "judge_validity.json"
    assert measured_judges(path) == {}
    path.write_text(json.dumps({"judges": {
        "docs:m": {"pairwise_accuracy": 0.6}, "blend:m": {"pairwise_accuracy": 0.83},
        "mean(docs:m, expected:m)": {"pairwise_accuracy": 0.9, "mean_of": 2},  # a mean of probability judges loads
        "mean(local, docs:m)": {"pairwise_accuracy": 0.95, "mean_of": 2},  # one with an endpoint does not
        "local": {"pairwise_accuracy": 0.7}, "expected:m": {"pairwise_accuracy": None}}}))
    assert list(measured_judges(path).items()) == [("mean(docs:m, expected:m)", 0.9), ("blend:m", 0.83), ("docs:m", 0.6)]


class RecallJudge:
    """Scores a trajectory by its recall@10, a fallback for query q3; stops (an interrupted measurement) once
    it has judged ``stop_after`` trajectories, and counts what it judged."""

    def __init__(self, stop_after: int | None = None):
        self.stop_after, self.seen = stop_after, []

    def score_batch(self, trajs, desc=None):
        from arxivqa.judge import JudgeResult

        if self.stop_after is not None and len(self.seen) + len(trajs) > self.stop_after:
            raise KeyboardInterrupt
        self.seen += [t.qid for t in trajs]
        return [JudgeResult(score=0.0, fallback=True) if t.qid == "q3" else JudgeResult(score=submission_recall(t))
                for t in trajs]


def test_an_interrupted_measurement_goes_on_from_its_progress_file(tmp_path):
    trajs = [rich("q1"), single_offtopic("q1"), rich("q2"), single_offtopic("q2")]
    pairs = build_pairs(trajs, per_kind=5)
    pool = [rich("q4"), single_offtopic("q4"), rich("q3"), single_offtopic("q5")]
    whole = measure(RecallJudge(), pairs, pool, chunk=3, name="r")
    progress = tmp_path / "validity" / "r.json"
    with pytest.raises(KeyboardInterrupt):
        measure(RecallJudge(stop_after=7), pairs, pool, progress=progress, chunk=3, name="r")
    kept = json.loads(progress.read_text())
    assert len(kept["scores"]) == 6  # two chunks of three were judged before the third was refused
    again = RecallJudge()
    m = measure(again, pairs, pool, progress=progress, chunk=3, name="r")
    assert len(again.seen) == 2 * len(pairs) + len(pool) - 6  # only what was left was judged
    assert m["scores"] == whole["scores"] and m["pairwise_accuracy"] == whole["pairwise_accuracy"]
    assert m["fallback_rate"] == whole["fallback_rate"] > 0
    progress.unlink()  # the caller's part, once the result is kept (validity measure: in the report)
    # another judge's progress is not taken for this one's
    with pytest.raises(KeyboardInterrupt):
        measure(RecallJudge(stop_after=4), pairs, pool, progress=progress, chunk=3, name="r")
    other = RecallJudge()
    measure(other, pairs, pool, progress=progress, chunk=3, name="s")
    assert len(other.seen) == 2 * len(pairs) + len(pool)
