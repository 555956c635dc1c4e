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
import os
import signal
import subprocess
import sys
import time

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


# --------------------------------------------------------------------------- 4. partial indexes

KILL_AT = r'''
import os, signal, sys
sys.path.insert(0, sys.argv[3])
from conftest import make_papers
from arxivqa import embed, index as ix

point, folder = sys.argv[1], sys.argv[2]
calls = [0]

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

def after(n, fn):
    def wrapped(*args, **kwargs):
        calls[0] += 1
        if calls[0] == n:
            die()
        return fn(*args, **kwargs)
    return wrapped

if point == "whoosh":  # in the middle of the whoosh build, after one committed batch
    import whoosh.writing
    ix.WhooshEngine.build.__defaults__ = (5,)
    whoosh.writing.SegmentWriter.add_document = after(12, whoosh.writing.SegmentWriter.add_document)
elif point == "before-embedding":
    ix.SemanticIndex.add = die
elif point == "during-embedding":  # after one committed batch of 8 of the 30 papers
    ix.SemanticIndex.add.__defaults__ = (8,)
    embed.StaticEmbedder.encode = after(2, embed.StaticEmbedder.encode)
elif point == "before-manifest":
    ix.SearchIndex.write_manifest = die
ix.SearchIndex(folder).build(make_papers(), keyword_engines=["bm25s", "whoosh"])
'''


def _killed_build(tmp_path, point):
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    folder = tmp_path / "idx" / "demo"
    proc = subprocess.run([sys.executable, "-c", KILL_AT, point, str(folder), str(Path(__file__).parent)],
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    return folder


@pytest.mark.parametrize("point", ["whoosh", "before-embedding", "during-embedding"])
def test_an_index_killed_mid_build_is_refused_then_resumed(tmp_path, papers, monkeypatch, point):
    from arxivqa.index import IndexIncompleteError, SearchIndex, open_index
    from arxivqa.tools import ArxivEnv

    folder = _killed_build(tmp_path, point)
    monkeypatch.setenv("ARXIVQA_INDEX_DIR", str(folder.parent))
    for engine in ("bm25s", "whoosh"):
        assert not SearchIndex(folder, keyword_engine=engine).exists()
        with pytest.raises(IndexIncompleteError) as err:
            open_index(folder=folder, keyword_engine=engine)
        msg = str(err.value)
        assert str(folder) in msg and "incomplete" in msg
        assert f"python -m arxivqa.index build --scale demo --engines {engine}" in msg  # how to resume
    # the agent is told the index is unavailable, never where it lives
    env = ArxivEnv(index_name="demo")
    for text in (env.keyword_search("graph neural networks"), env.semantic_search("protein folding")):
        assert text.startswith("Error: the search index is not available") and str(tmp_path) not in text
        assert "/" not in text
    assert {c.error_code for c in env.episode.calls} == {"index_unavailable"}
    # resuming (the build again) completes it; then it opens and every paper is searchable
    SearchIndex(folder).build(papers, keyword_engines=["bm25s", "whoosh"])
    for engine in ("bm25s", "whoosh"):
        idx = open_index(folder=folder, keyword_engine=engine)
        assert idx.keyword_search("protein structure amino acid", 3)[0]
    assert len(idx.semantic_search("anything", 100)) == len(papers)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["docs"] == len(papers)
    assert {k: v["count"] for k, v in manifest["components"].items()} == {
        "bm25s": len(papers), "whoosh": len(papers), "semantic:static": len(papers)}
    assert manifest["components"]["semantic:static"]["embedder"] == "static"
    assert all("built" in v for v in manifest["components"].values())


def test_an_index_killed_just_before_its_manifest_is_checked_and_adopted(tmp_path, papers):
    from arxivqa.index import open_index

    folder = _killed_build(tmp_path, "before-manifest")
    assert not (folder / "manifest.json").exists()
    idx = open_index(folder=folder, keyword_engine="whoosh")  # every component is whole: accepted ...
    assert json.loads((folder / "manifest.json").read_text())["docs"] == len(papers)  # ... and recorded
    assert len(idx.semantic_search("anything", 100)) == len(papers)


def _other_embedder():
    import numpy as np

    from arxivqa.embed import Embedder

    class Other(Embedder):
        name, dim = "other", 8

        def encode(self, texts):
            return np.ones((len(texts), 8), np.float32)

    return Other()


def test_a_mismatched_index_is_refused(built_index, tmp_path, papers):
    import shutil

    from arxivqa.index import IndexIncompleteError, SearchIndex

    folder = tmp_path / "copy"
    shutil.copytree(built_index.folder, folder)
    SearchIndex(folder).check()  # the fixture's index is whole
    with pytest.raises(IndexIncompleteError, match=r"no complete semantic index for the embedder 'other' \(built for: static\)"):
        SearchIndex(folder, embedder=_other_embedder()).check()
    extra = papers[0].model_copy(update={"arxiv_id": "2601.00001"})
    SearchIndex(folder).docs.add([extra])  # the store changed after the build: the rest no longer covers it
    with pytest.raises(IndexIncompleteError, match=rf"document store holds {len(papers) + 1} papers, the manifest {len(papers)}"):
        SearchIndex(folder).check()


def test_a_missing_index_never_shows_the_agent_a_path(tmp_path, monkeypatch):
    from arxivqa.index import IndexIncompleteError, open_index
    from arxivqa.tools import ArxivEnv

    monkeypatch.setenv("ARXIVQA_INDEX_DIR", str(tmp_path / "indexes"))
    with pytest.raises(IndexIncompleteError, match="build it first"):
        open_index("demo")
    assert not (tmp_path / "indexes").exists()  # looking did not create an empty index
    env = ArxivEnv(index_name="demo")
    texts = [env.keyword_search("graph"), env.semantic_search("graph"), env.read_page("P-12345678"),
             env._call("keyword_search", '{"query": "graph"}')]
    assert all(t.startswith("Error:") for t in texts)
    assert not any(str(tmp_path) in t or "/indexes" in t for t in texts)


def test_a_second_embedders_collection_is_checked_and_added_to_the_manifest(built_index, tmp_path, papers):
    """An index holds one collection per embedder: one added by a later build (or before manifests) is
    accepted once it covers every paper, and the first embedder's collection still is."""
    import json
    import shutil

    from arxivqa.index import SearchIndex, SemanticIndex

    folder = tmp_path / "copy"
    shutil.copytree(built_index.folder, folder)
    other = _other_embedder()
    SemanticIndex(folder / "chroma", other).add(papers)  # built outside the manifest's build
    SearchIndex(folder, embedder=other).check()
    comps = json.loads((folder / "manifest.json").read_text())["components"]
    assert {"semantic:static", "semantic:other"} <= set(comps)
    SearchIndex(folder).check()  # the static collection is still whole and listed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_a_started_server_dies_with_the_process_that_started_it(tmp_path):
    # the parent starts a long child the way LocalServer starts `transformers serve`, reports its PID,
    # and is then killed with SIGKILL (no cleanup code runs); the child must not outlive it
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "from arxivqa.llm import die_with_parent\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], preexec_fn=die_with_parent)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(120)\n")], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    os.kill(child, 0)  # running
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        try:  # reaped by init, or a zombie of ours: either way it stopped running
            if open(f"/proc/{child}/stat").read().split()[2] == "Z":
                return
        except FileNotFoundError:
            return
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the child outlived its parent")
