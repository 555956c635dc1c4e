"""Nothing lost, nothing leaked (issue #14): what a hostile or unlucky user does, and what must hold.

1. an API key a server echoes never reaches an error, a record, a repr, a judge result or a runs file;
2. the label store reads under its lock, and a corrupt file is a clear error with the last good copy kept;
3. every data-loading error names its file and line; duplicates and empty fields follow a stated rule;
4. a partial index is refused, with a message that says how to resume; the agent never sees a path;
5. (test_soak.py) a soak of the tools environment and the trajectory store; a training run killed mid-step.
"""

from __future__ import annotations

import json
import logging

import pytest
from pydantic import BaseModel

from arxivqa.llm import LLM, Endpoint, LLMError, scrub

SECRET = "sk-proj-Zx81KqLm02ffA9bC7dE5fG3hJ1"  # the shape of a real key; never a real one


class Answer(BaseModel):
    label: str


def _msgs(text="Classify this."):
    return [{"role": "user", "content": text}]


# --------------------------------------------------------------------------- 1. secrets


def _echo_401(srv):
    def reply(_body):
        auth = srv[0].requests[-1]["headers"].get("authorization", "")
        key = auth.removeprefix("Bearer ")
        return 401, json.dumps({"error": {"message": f"Incorrect API key provided: {key}. You can find your API "
                                                     "key at https://platform.openai.com/account/api-keys.",
                                          "type": "invalid_request_error", "code": "invalid_api_key"}})
    return reply


def _echo_500(srv):
    def reply(_body):
        headers = srv[0].requests[-1]["headers"]
        return 500, json.dumps({"error": {"message": "internal error; request headers were: " + json.dumps(headers)}})
    return reply


def _hosted(srv, monkeypatch, **kw) -> LLM:
    monkeypatch.setenv("ARXIVQA_TEST_ECHO_KEY", SECRET)
    return LLM(Endpoint(name="hosted", model="m", base_url=srv.base_url, api_key_env="ARXIVQA_TEST_ECHO_KEY", **kw))


@pytest.mark.parametrize("echo,retries", [(_echo_401, 0), (_echo_500, 2)])
def test_a_key_echoed_by_the_server_is_scrubbed_everywhere(scripted_endpoint, monkeypatch, caplog, echo, retries):
    holder = []
    srv = scripted_endpoint(echo(holder))
    holder.append(srv)
    caplog.set_level(logging.DEBUG)
    llm = _hosted(srv, monkeypatch, transport_retries=retries, max_retries=1)
    with pytest.raises(LLMError) as failed:
        llm.structured(_msgs(), Answer)
    assert SECRET in json.dumps(srv.requests[0]["headers"])  # the key did reach the server (and came back)
    rec = llm.calls[-1]
    texts = [str(failed.value), repr(failed.value), rec.error, rec.model_dump_json(), repr(llm), caplog.text,
             str(failed.value.__cause__), str(failed.value.__context__ if not failed.value.__suppress_context__ else "")]
    assert not any(SECRET in t for t in texts)
    assert not any(SECRET[:12] in t for t in texts)  # nor a recognisable piece of it
    assert "401" in str(failed.value) or "500" in str(failed.value)  # the reason survives the scrubbing
    # attempts are the requests actually sent (a 401 is not retried; a 500 is, by the transport)
    assert rec.attempts == len(srv.requests) == 1 + retries
    assert f"after {len(srv.requests)} request(s)" in str(failed.value)


def test_the_judge_result_and_the_labeller_runs_file_hold_no_key(scripted_endpoint, monkeypatch, built_index,
                                                                 tmp_path):
    from arxivqa.corpus import Query
    from arxivqa.judge import Judge
    from arxivqa.labelling import Labeller, LabellerConfig, LabelStore
    from arxivqa.records import Trajectory

    holder = []
    srv = scripted_endpoint(_echo_401(holder))
    holder.append(srv)
    llm = _hosted(srv, monkeypatch, transport_retries=0, max_retries=1)
    (result,) = Judge(llm).score_batch([Trajectory(qid="q", query="graph networks", policy="p")])
    assert result.fallback and "401" in result.error and SECRET not in result.error
    runs = tmp_path / "runs.jsonl"
    query = Query(qid="q1", query="sparse attention transformers", gold_in_corpus=[])
    store = LabelStore.open(tmp_path / "labels.json", [query])
    Labeller(llm, built_index, LabellerConfig(n_candidates=2)).run([query], runs, store=store, progress=False)
    text = runs.read_text()
    assert "401" in text and SECRET not in text and SECRET not in (tmp_path / "labels.json").read_text()


def test_scrub_removes_bearer_and_key_shaped_tokens():
    text = ("Authorization: Bearer abc.def-123_XYZ, other key sk-live-0123456789abcdef, "
            '{"api_key": "hunter2hunter2"}, configured key my-own-secret-value')
    out = scrub(text, ["my-own-secret-value", "", None])
    for leaked in ("abc.def-123_XYZ", "sk-live-0123456789abcdef", "hunter2hunter2", "my-own-secret-value"):
        assert leaked not in out
    assert out.count("[redacted]") == 4 and "Authorization: Bearer [redacted]" in out
    assert scrub("an ordinary error: 404 not found") == "an ordinary error: 404 not found"


# --------------------------------------------------------------------------- 2. the label store


def _store(tmp_path):
    from arxivqa.corpus import Query
    from arxivqa.labelling import LabelStore

    path = tmp_path / "labels.json"
    LabelStore.open(path, [Query(qid="q0", query="sparse attention", gold=["A"], gold_in_corpus=["A"])])
    return path


def test_an_export_from_a_stale_view_keeps_every_label(tmp_path):
    from arxivqa.corpus import load_queries
    from arxivqa.labelling import LabelStore

    path = _store(tmp_path)
    a, b = LabelStore(path), LabelStore(path)
    b.decide("q0", "add", ["X"])
    a.export(tmp_path / "out.jsonl")
    assert load_queries(tmp_path / "out.jsonl")[0].gold == ["A", "X"]
    assert a.queries["q0"].labels() == ["A", "X"]  # a plain read is current too


@pytest.mark.parametrize("content,problem", [
    ('{"format": "arxivqa-labels/1", "queries": {"q0": {"qid": "q0", "que', "not valid JSON"),
    ("", "empty"),
    ('{"queries": []}', "not a label store"),
    ('{"format": "arxivqa-labels/1"}', "not a label store"),
    ('{"queries": {"q0": {"qid": 3}}}', "'q0' is not valid"),
    ("[1, 2]", "not a label store"),
])
def test_a_corrupt_store_is_a_clear_error_with_the_last_good_copy_kept(tmp_path, content, problem):
    from arxivqa.labelling import LabelStore, LabelStoreError, main

    path = _store(tmp_path)
    LabelStore(path).decide("q0", "add", ["X"])
    good = path.read_bytes()
    path.write_text(content)
    for attempt in (lambda: LabelStore(path), lambda: LabelStore.open(path)):
        with pytest.raises(LabelStoreError) as err:
            attempt()
        msg = str(err.value)
        assert str(path) in msg and problem in msg and "python -m arxivqa.labelling restore" in msg
    assert path.read_text() == content  # nothing was written over it
    assert (tmp_path / "labels.json.bak").read_bytes() == good
    main(["restore", "--store", str(path)])  # the documented recovery command
    assert LabelStore(path).queries["q0"].labels() == ["A", "X"]
    kept = list(tmp_path.glob("labels.json.corrupt-*"))
    assert len(kept) == 1 and kept[0].read_text() == content  # the broken file is kept for inspection


def test_orphaned_temporary_files_are_cleaned_up(tmp_path):
    from arxivqa.labelling import LabelStore

    path = _store(tmp_path)
    orphan = tmp_path / ".labels.json.abc123.tmp"  # what a writer killed before its rename leaves
    orphan.write_text('{"half": ')
    LabelStore(path).decide("q0", "add", ["X"])
    assert not orphan.exists() and not list(tmp_path.glob("*.tmp"))


# --------------------------------------------------------------------------- 3. data loading


def _gz_corpus(tmp_path, papers, n=None):
    import gzip

    path = tmp_path / "corpus.jsonl.gz"
    rows = [p.model_dump_json() for p in papers][:n]
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("\n".join(rows) + "\n")
    return path


def test_a_gzip_cut_short_names_the_file_and_the_last_good_line(tmp_path, papers):
    from arxivqa.corpus import DataError, iter_papers

    many = [p.model_copy(update={"arxiv_id": f"{p.arxiv_id}-{i}"}) for i in range(40) for p in papers]
    path = _gz_corpus(tmp_path, many)  # big enough that a cut leaves whole lines before it
    data = path.read_bytes()
    for cut in (len(data) * 2 // 3, len(data) - 20, len(data) - 4):  # mid-stream, in the last line, in the trailer
        path.write_bytes(data[:cut])
        got = []
        with pytest.raises(DataError, match=r"corpus\.jsonl\.gz: the compressed file is cut short after line \d+") as err:
            for p in iter_papers(path):
                got.append(p)
        assert f"after line {len(got)} " in str(err.value)  # the last line yielded is the last good one
        assert got == many[: len(got)]


def test_a_flipped_byte_in_the_gzip_stream_names_the_file(tmp_path, papers):
    from arxivqa.corpus import DataError, iter_papers

    path = _gz_corpus(tmp_path, papers)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"corpus\.jsonl\.gz"):
        list(iter_papers(path))


def test_invalid_utf8_names_file_and_line(tmp_path, papers):
    from arxivqa.corpus import DataError, iter_papers, load_queries

    lines = [p.model_dump_json().encode() for p in papers[:5]]
    lines[3] = lines[3].replace(b"Federated", b"Feder\xffated").replace(b"Graph", b"Gr\xffaph")
    lines[3] = lines[3][:30] + b"\xff" + lines[3][30:]
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(DataError, match=r"c\.jsonl:4: not UTF-8"):
        list(iter_papers(path))
    q = tmp_path / "q.jsonl"
    q.write_bytes(b'{"qid": "a", "query": "ok"}\n{"qid": "b", "query": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"q\.jsonl:2: not UTF-8"):
        load_queries(q)


def test_duplicate_ids_follow_the_stated_rule(tmp_path, papers):
    from arxivqa.corpus import DataError, DataWarning, iter_papers, select

    rows = [p.model_dump_json() for p in papers]
    exact = tmp_path / "exact.jsonl"
    exact.write_text("\n".join(rows + rows[:3]) + "\n")  # three exact repeats: skipped and reported
    with pytest.warns(DataWarning, match=r"exact\.jsonl: skipped 3 exact duplicate.*line 31"):
        assert [p.arxiv_id for p in iter_papers(exact)] == [p.arxiv_id for p in papers]
    other = papers[4].model_copy(update={"title": "Another paper under the same ID"})
    conflict = tmp_path / "conflict.jsonl"
    conflict.write_text("\n".join(rows + [other.model_dump_json()]) + "\n")
    with pytest.raises(DataError, match=rf"conflict\.jsonl:31: duplicate arxiv_id '{papers[4].arxiv_id}'.*line 5"):
        list(iter_papers(conflict))
    # select counts every paper once: a repeat does not eat a place, a conflict is refused
    assert len(select(papers + papers[:5], n=len(papers))) == len(papers)
    with pytest.raises(DataError, match=papers[4].arxiv_id):
        select(papers + [other], n=len(papers))


def test_duplicate_qids_and_empty_fields_are_refused(tmp_path, papers):
    from arxivqa.corpus import DataError, iter_papers, load_queries
    from conftest import write_jsonl

    q = write_jsonl(tmp_path / "q.jsonl", [{"qid": "a", "query": "one"}, {"qid": "b", "query": "two"},
                                           {"qid": "a", "query": "three"}])
    with pytest.raises(DataError, match=r"q\.jsonl:3: duplicate qid 'a'.*line 1"):
        load_queries(q)
    for i, row in enumerate([{"qid": "", "query": "x"}, {"qid": "c", "query": "   "}]):
        path = write_jsonl(tmp_path / f"e{i}.jsonl", [{"qid": "ok", "query": "fine"}, row])
        with pytest.raises(DataError, match=rf"(?s)e{i}\.jsonl:2: .*must not be empty"):
            load_queries(path)
    good = papers[0].model_dump(mode="json")
    for field in ("arxiv_id", "abstract", "title"):
        path = write_jsonl(tmp_path / f"p-{field}.jsonl", [good, {**good, "arxiv_id": "2501.99999", field: " "}])
        with pytest.raises(DataError, match=rf"(?s)p-{field}\.jsonl:2: .*{field}.*must not be empty"):
            list(iter_papers(path))
