import inspect
import re
import threading

import pytest

from arxivqa.index import Hit
from arxivqa.tools import MAX_QUERY_CHARS, ArxivEnv
from conftest import by_title

OPAQUE = re.compile(r"P-[0-9a-f]{8,}")
ARXIV = re.compile(r"\b\d{4}\.\d{4,5}\b")


@pytest.fixture
def env(built_index):
    e = ArxivEnv(built_index)
    e.reset(qid="q1", gold_in_corpus=[])
    return e


def ids_in(text):
    return OPAQUE.findall(text)


def test_results_show_opaque_ids_only(env, papers):
    for text in (env.keyword_search("graph neural networks"), env.semantic_search("protein folding")):
        assert ids_in(text)
        assert not ARXIV.search(text)
        assert not any(p.arxiv_id in text for p in papers)
    page = env.read_page(ids_in(text)[0])
    assert not any(p.arxiv_id in page for p in papers)


def test_ids_stable_within_episode_and_mapped_back(env, papers):
    target = by_title(papers, "Sparse attention")
    a = ids_in(env.keyword_search("sparse attention transformers", max_results=1))[0]
    b = ids_in(env.semantic_search(target.abstract, max_results=1))[0]
    assert a == b
    assert env.episode.id_map[a] == target.arxiv_id
    assert target.title in env.read_page(a)
    env.finish([a])
    assert env.episode.submitted == [target.arxiv_id]


def test_ids_differ_across_episodes_and_instances(built_index):
    env = ArxivEnv(built_index)
    first = ids_in(env.keyword_search("sparse attention transformers", max_results=1))[0]
    env.reset()
    second = ids_in(env.keyword_search("sparse attention transformers", max_results=1))[0]
    other = ArxivEnv(built_index)
    third = ids_in(other.keyword_search("sparse attention transformers", max_results=1))[0]
    assert len({first, second, third}) == 3
    # an ID of a past episode means nothing now
    assert env.read_page(first).startswith("Error:")


def test_seeded_envs_repeat_their_ids(built_index):
    a, b = ArxivEnv(built_index, seed=5), ArxivEnv(built_index, seed=5)
    assert ids_in(a.keyword_search("diffusion images")) == ids_in(b.keyword_search("diffusion images"))


def test_every_call_is_recorded_with_real_ids(env, papers):
    env.keyword_search("robot grasping")
    env.read_page("P-00000000")
    calls = env.episode.calls
    assert [c.name for c in calls] == ["keyword_search", "read_page"]
    assert calls[0].result_ids and set(calls[0].result_ids) <= {p.arxiv_id for p in papers}
    assert calls[1].error and calls[1].result_ids == []
    assert env.episode.seen_ids() == set(calls[0].result_ids)


def test_a_repeated_search_or_read_is_refused_and_still_recorded(built_index):
    from arxivqa.records import AssistantTurn, Trajectory
    from arxivqa.rewards import duplication_gate

    env = ArxivEnv(built_index)
    first = env.keyword_search(query="robot grasping")
    assert ids_in(first)
    again = env.keyword_search(query="Robot  grasping", max_results=7)  # same call up to case, spaces, max_results
    assert again.startswith("Error:") and "already ran this exact keyword_search" in again
    assert env.episode.calls[-1].error_code == "repeated_call"
    assert not env.keyword_search("robot grasping", min_date="2020-01-01").startswith("Error")  # other arguments run
    pid = ids_in(first)[0]
    assert not env.read_page(pid).startswith("Error") and env.read_page(paper_id=pid).startswith("Error")
    assert not env.semantic_search(query="robot grasping").startswith("Error")  # another tool is another call
    traj = Trajectory(qid="q", query="q", policy="t")
    traj.add_step(AssistantTurn())
    traj.steps[0].results = list(env.episode.calls)
    assert duplication_gate(traj).passed  # no call so far is identical to another, max_results included
    assert env.keyword_search(query="robot grasping").startswith("Error")
    traj.steps[0].results = list(env.episode.calls)
    assert not duplication_gate(traj).passed  # the refused exact repeat is recorded: the gate sees it
    plain = ArxivEnv(built_index, refuse_repeats=False)
    assert plain.keyword_search(query="robot grasping") == plain.keyword_search(query="robot grasping")


def test_read_page_paginates(built_index, papers):
    env = ArxivEnv(built_index)
    pid = ids_in(env.keyword_search("quantisation four bits"))[0]
    page = env.read_page(pid)
    assert "page 1 of 1" in page and "Title: Quantisation" in page
    assert env.read_page(pid, page=2).startswith("Error: page must be between 1 and 1")


BAD_CALLS = [
    ("read_page", {"paper_id": "P-deadbeef"}, "unknown paper ID"),
    ("read_page", {"paper_id": "2501.00001"}, "not a paper ID of this session"),
    ("read_page", {"paper_id": ["P-1"]}, "invalid arguments"),
    ("read_page", {}, "invalid arguments"),
    ("keyword_search", {"query": ""}, "query is empty"),
    ("keyword_search", {"query": "   "}, "query is empty"),
    ("keyword_search", {"query": "x" * (MAX_QUERY_CHARS + 1)}, "limit is"),
    ("keyword_search", {"query": 42}, "invalid arguments"),
    ("keyword_search", {"query": "ok", "max_results": "many"}, "invalid arguments"),
    ("keyword_search", {"query": "ok", "max_results": 0}, "between 1 and 50"),
    ("semantic_search", {"query": "ok", "max_results": 51}, "between 1 and 50"),
    ("semantic_search", {"query": "ok", "min_date": "last year"}, "min_date"),
    ("finish", {"paper_ids": "P-1"}, "invalid arguments"),
    ("finish", {"paper_ids": ["P-0badc0de"]}, "unknown paper IDs"),
    ("browse", {"url": "x"}, "unknown tool"),
    ("keyword_search", "{not json", "not valid JSON"),
    ("keyword_search", [1, 2], "must be a JSON object"),
]


@pytest.mark.parametrize("name,args,message", BAD_CALLS)
def test_bad_input_is_an_error_message(env, name, args, message):
    out = env._call(name, args)
    assert out.startswith("Error:") and message in out
    assert env.episode.calls[-1].error
    assert not env.episode.finished


def test_finish_limits(env):
    ids = list(dict.fromkeys(ids_in(env.semantic_search("machine learning", max_results=20))))
    assert len(ids) >= 11
    assert "at most 10" in env.finish(ids[:11])
    assert not env.episode.finished
    assert env.finish(ids[:3] + ids[:2]).startswith("Submitted 3 papers")  # duplicates dropped
    assert env.episode.submitted_opaque == ids[:3]
    assert env.keyword_search("more").startswith("Error: finish has already been called")
    assert env.finish(ids[:1]).startswith("Error:")


def test_unknown_arguments_are_dropped_with_a_note(env):
    out = env._call("semantic_search", {"query": "protein", "colour": "blue", "required": ["query"]})
    assert out.startswith("Note: ignored unknown argument(s) 'colour', 'required'") and "P-" in out
    assert env.episode.calls[-1].arguments["colour"] == "blue"  # the record keeps what the agent sent
    assert not env.episode.calls[-1].error and env.episode.calls[-1].result_ids


def test_string_arguments_are_coerced(env):
    assert not env._call("keyword_search", '{"query": "graph", "max_results": "3"}').startswith("Error")


def test_parallel_calls_keep_call_order(env):
    queries = ["graph neural networks", "speech recognition", "music generation", "weather prediction"]
    calls = [("keyword_search", {"query": q, "max_results": 2}) for q in queries] + [("read_page", {"paper_id": "P-x"})]
    out = env._run_parallel(calls, turn=1)
    for q, text in zip(queries, out):
        assert f'"{q}"' in text.splitlines()[0]
    assert out[-1].startswith("Error:")
    recorded = env.episode.calls
    assert [c.arguments.get("query") for c in recorded[:4]] == queries
    assert [c.index for c in recorded] == list(range(5)) and {c.turn for c in recorded} == {1}


class _BarrierIndex:
    """Wraps an index so that a keyword search waits until ``n`` searches are in flight at once."""

    def __init__(self, inner, n):
        self.inner, self.barrier = inner, threading.Barrier(n, timeout=20)
        self.docs, self.analyzer = inner.docs, inner.analyzer

    def keyword_search(self, query, k=10, min_date=None):
        self.barrier.wait()  # breaks (-> error message) if the calls run one after another
        return self.inner.keyword_search(query, k, min_date)


def test_parallel_calls_really_run_concurrently(built_index):
    env = ArxivEnv(_BarrierIndex(built_index, 3))
    out = env._run_parallel([("keyword_search", {"query": q}) for q in ("graph", "speech", "music")])
    assert not any(o.startswith("Error") for o in out), out


def test_finish_in_a_batch_runs_after_the_searches(env):
    pid = ids_in(env.keyword_search("diffusion latent images", max_results=1))[0]
    out = env._run_parallel([("finish", {"paper_ids": [pid]}), ("keyword_search", {"query": "robots"})])
    assert out[0].startswith("Submitted") and not out[1].startswith("Error")


def test_an_engine_failure_is_a_message_not_an_exception(built_index):
    class Broken:
        docs, analyzer = built_index.docs, built_index.analyzer

        def semantic_search(self, *a, **k):
            raise RuntimeError("disk on fire")

    out = ArxivEnv(Broken()).semantic_search("anything")
    assert out.startswith("Error: semantic_search failed") and "disk on fire" in out


def test_trl_sees_exactly_the_four_tools_with_schemas():
    """What GRPOTrainer(environment_factory=ArxivEnv) does: public functions of the class, minus reset."""
    from transformers.utils import get_json_schema

    names = [n for n, _ in inspect.getmembers(ArxivEnv, predicate=inspect.isfunction)
             if n not in ("reset", "get_reward") and not n.startswith("_")]
    assert sorted(names) == ["finish", "keyword_search", "read_page", "semantic_search"]
    env = ArxivEnv(index=None)  # the factory is called with no arguments; the index opens lazily
    schemas = {n: get_json_schema(getattr(env, n)) for n in names}
    params = schemas["keyword_search"]["function"]["parameters"]
    assert params["required"] == ["query"]
    assert set(params["properties"]) == {"query", "max_results", "min_date"}
    assert schemas["finish"]["function"]["parameters"]["properties"]["paper_ids"]["type"] == "array"
    assert env.reset(qid="x", gold_in_corpus=["2501.00001"]) is None
    assert env.episode.row["gold_in_corpus"] == ["2501.00001"]


def test_format_skips_hits_missing_from_the_store(built_index):
    class Ghost:
        docs, analyzer = built_index.docs, built_index.analyzer

        def semantic_search(self, *a, **k):
            return [Hit("0000.00000", 1.0)] + built_index.semantic_search("robots", 1)

    out = ArxivEnv(Ghost()).semantic_search("robots")
    assert len(ids_in(out)) == 1


def test_a_compact_view_caps_hits_and_can_show_titles_only(built_index):
    env = ArxivEnv(built_index, result_cap=2, abstract_chars=0, max_snippets=0)
    sem = env.semantic_search(query="transformers for long documents", max_results=10)
    kw = env.keyword_search(query="attention transformers", max_results=10)
    assert len(env.episode.calls[0].result_ids) == 2 and len(env.episode.calls[1].result_ids) == 2
    assert "abstract:" not in sem and "snippet:" not in kw and "title:" in sem and "title:" in kw
    short = ArxivEnv(built_index, abstract_chars=40).semantic_search(query="transformers for long documents")
    assert all(len(line) < 70 for line in short.splitlines() if "abstract:" in line)


def test_compact_schemas_are_terse_and_the_tools_answer_the_same(built_index, papers):
    """``schemas="compact"``: one required argument per tool and shorter descriptions in what TRL and the
    agent send the model; the same calls give the same texts, hits and submission as the full schemas."""
    from arxivqa.agent import tool_schemas
    from arxivqa.tools import CompactArxivEnv, make_env

    full, compact = make_env(built_index, seed=3), make_env(built_index, schemas="compact", seed=3)
    assert type(full) is ArxivEnv and type(compact) is CompactArxivEnv
    short = {s["function"]["name"]: s["function"] for s in tool_schemas(compact)}
    long = {s["function"]["name"]: s["function"] for s in tool_schemas(full)}
    assert sorted(short) == sorted(long) == ["finish", "keyword_search", "read_page", "semantic_search"]
    assert {n: list(f["parameters"]["properties"]) for n, f in short.items()} == {
        "keyword_search": ["query"], "semantic_search": ["query"], "read_page": ["paper_id"], "finish": ["paper_ids"]}
    assert len(str(short)) < 0.7 * len(str(long))
    for e in (full, compact):
        e.reset(qid="q", gold_in_corpus=[])
    texts = []
    for e in (full, compact):
        kw = e.keyword_search(query="attention transformers")
        sem = e.semantic_search(query="transformers for long documents")
        first = ids_in(kw)[0]
        texts.append((kw, sem, e.read_page(paper_id=first), e.finish(paper_ids=[first])))
    assert texts[0] == texts[1]
    assert full.episode.submitted == compact.episode.submitted and full.episode.submitted
    # what only the full schemas offer is ignored with a note, and the call still runs
    e = make_env(built_index, schemas="compact")
    e.reset(qid="q", gold_in_corpus=[])
    out = e._call("keyword_search", {"query": "graph", "max_results": 3})
    assert out.startswith("Note: ignored unknown argument(s) 'max_results'") and ids_in(out)
    with pytest.raises(ValueError, match="unknown tool schemas 'tiny'"):
        make_env(built_index, schemas="tiny")
