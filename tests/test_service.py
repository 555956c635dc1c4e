"""The search backend as a service: the tiny index served (keyword + documents over FastAPI, the semantic
store through chromadb's server) on free loopback ports, answering exactly what the index answers in
process; ArxivEnv unchanged over it; loopback-only binds; a clear error when nothing answers."""

from __future__ import annotations

import pytest

from arxivqa.index import IndexIncompleteError, SemanticIndex
from arxivqa.service import (RemoteBindRefused, SearchService, ServiceError, ServiceIndex, ServiceUnreachable,
                             check_bind_host, main, percentile)
from arxivqa.tools import ArxivEnv

from conftest import by_title

QUERIES = ["graph neural networks molecules", "sparse attention long context", "reinforcement learning human feedback",
           "protein structure", "federated learning heterogeneity", "no such words zzzz"]


@pytest.fixture(scope="module")
def service(built_index):
    with SearchService(built_index.folder) as running:
        yield running


@pytest.fixture(scope="module")
def remote(service):
    client = ServiceIndex(service.url)
    yield client
    client.close()


def ids(hits):
    return [h.arxiv_id for h in hits]


def test_keyword_search_and_papers_equal_the_index_in_process(built_index, remote):
    assert remote.info.docs == len(built_index.docs) and remote.info.embedder == built_index.embedder.name
    for q in QUERIES:
        (hits, terms), (local, local_terms) = remote.keyword_search(q, 5), built_index.keyword_search(q, 5)
        assert ids(hits) == ids(local) and terms == local_terms
        assert [h.score for h in hits] == pytest.approx([h.score for h in local])
    since = 20230101
    assert ids(remote.keyword_search("learning", 10, since)[0]) == ids(built_index.keyword_search("learning", 10, since)[0])
    wanted = ids(built_index.keyword_search("learning", 10)[0]) + ["9999.99999"]
    assert remote.docs.get_many(wanted) == built_index.docs.get_many(wanted)  # the unknown ID is left out
    assert remote.docs.get(wanted[0]) == built_index.docs.get(wanted[0]) and remote.docs.get("9999.99999") is None


@pytest.mark.parametrize("mode", ["hnsw", "exact"])
def test_semantic_search_through_chromas_server_equals_the_store_in_process(built_index, service, mode):
    remote = ServiceIndex(service.url, search_mode=mode)
    local = SemanticIndex(built_index.folder / "chroma", built_index.embedder, search_mode=mode)
    assert len(remote.semantic) == len(local)
    for q in QUERIES:
        hits, expected = remote.semantic_search(q, 5), local.search(q, 5)
        assert ids(hits) == ids(expected)
        assert [h.score for h in hits] == pytest.approx([h.score for h in expected], abs=1e-5)
    assert ids(remote.semantic_search("graphs", 30, 20240101)) == ids(local.search("graphs", 30, 20240101))
    remote.close()


def test_arxiv_env_runs_unchanged_against_the_service(built_index, service, papers):
    from arxivqa.config import settings

    remote = ServiceIndex(service.url, search_mode=settings().semantic_search)  # the in-process mode
    here, there = ArxivEnv(built_index, seed=7), ArxivEnv(remote, seed=7)
    gold = by_title(papers, "Protein structure").arxiv_id
    for env in (here, there):
        env.reset(qid="q", query="proteins", gold_in_corpus=[gold])
    for call in (lambda e: e.keyword_search(query="protein structure prediction", max_results=3),
                 lambda e: e.semantic_search(query="amino acid sequences to 3D structures", min_date="2019-01-01"),
                 lambda e: e.read_page(paper_id=next(o for o, r in e.episode.id_map.items() if r == gold)),
                 lambda e: e.finish(paper_ids=[next(o for o, r in e.episode.id_map.items() if r == gold)])):
        assert call(there) == call(here)
    assert there.episode.submitted == here.episode.submitted == [gold]
    assert [r.hits for r in there.episode.calls] == [r.hits for r in here.episode.calls]
    remote.close()


def test_a_bad_request_is_the_services_error(remote):
    with pytest.raises(ServiceError, match="HTTP 422"):  # what the client's own records would not send
        remote._request("POST", "/keyword_search", {"query": "graphs", "k": 0})


def test_only_loopback_binds_unless_told():
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert check_bind_host(host) == host
    for host in ("0.0.0.0", "::", "192.168.1.20", "example.org"):
        with pytest.raises(RemoteBindRefused, match="--allow-remote"):
            check_bind_host(host)
        assert check_bind_host(host, allow_remote=True) == host
    with pytest.raises(SystemExit, match="refusing to serve .*0.0.0.0"):  # before any index is opened
        main(["serve", "--host", "0.0.0.0", "--index", "/nonexistent/index"])


def test_no_service_is_a_clear_error_and_an_unavailable_index_to_the_agent(built_index):
    from arxivqa.llm import _free_port

    nowhere = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(ServiceUnreachable, match=f"{nowhere} is not reachable.*make serve-search"):
        ServiceIndex(nowhere)
    with SearchService(built_index.folder) as service:  # a service that goes away under a running environment
        remote = ServiceIndex(service.url)
        env = ArxivEnv(remote)
        assert "papers for" in env.keyword_search(query="graph neural networks")
    text = env.keyword_search(query="diffusion models")
    assert text.startswith("Error:") and env.episode.calls[-1].error_code == "index_unavailable"
    assert "127.0.0.1" not in text  # the address goes to the operator's log, not to the agent
    with pytest.raises(ServiceUnreachable, match="chroma server"):
        remote.semantic_search("graphs")
    assert isinstance(ServiceUnreachable("x"), (IndexIncompleteError, ConnectionError))
    remote.close()


def test_the_benchmark_measures_both_tools_in_process_and_through_the_service(built_index, service, tmp_path):
    from arxivqa.service import bench_service

    out = tmp_path / "bench.json"
    result = bench_service(str(built_index.folder), clients=(1, 2), requests=4, out=out, note="test",
                           url=service.url, blas_threads=(None, 1), progress=lambda line: None)
    assert {r["blas_threads"] for r in result["results"]} == {None, 1}
    cells = {(r["setup"], r["tool"], r["clients"]) for r in result["results"] if r["blas_threads"] == 1}
    assert cells == {(setup, tool, n) for setup, tool in [("in_process", "keyword_search"),
                                                           ("in_process", "semantic_search"),
                                                           ("in_process_hnsw", "semantic_search"),
                                                           ("service", "keyword_search"), ("service", "semantic_search")]
                     for n in (1, 2)}
    assert all(r["requests"] == 4 * r["clients"] and 0 < r["p50_ms"] <= r["p95_ms"] for r in result["results"])
    assert result["index"]["docs"] == len(built_index.docs) and result["conditions"] == "test"
    assert result["machine"]["cpus"] and out.exists()


def test_percentiles_interpolate_between_ranks():
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5 and percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)
    assert percentile([7.0], 95) == 7.0


def test_a_run_setting_can_name_the_service_instead_of_a_folder(built_index, service):
    """``--set index=<service URL>`` (training, SFT demos): ``open_index_spec`` gives the service's client,
    which answers as the index does; a service with another embedder than the run asks for is refused."""
    from arxivqa.index import open_index_spec

    remote = open_index_spec(service.url, embedder=built_index.embedder.name)
    try:
        assert isinstance(remote, ServiceIndex)
        assert ids(remote.keyword_search(QUERIES[0], 5)[0]) == ids(built_index.keyword_search(QUERIES[0], 5)[0])
    finally:
        remote.close()
    with pytest.raises(ValueError, match="embeds with"):
        open_index_spec(service.url, embedder="minilm-not-this-one")
    assert open_index_spec(str(built_index.folder)).folder == built_index.folder  # a folder still opens in process
