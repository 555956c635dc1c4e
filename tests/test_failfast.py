"""Fail fast on a dead endpoint (one check, one message naming the URL and the setting) and clean reports
on runs where every episode failed."""

import json
import socket
import time

import pytest
from arxivqa.llm import EndpointUnreachable, check_reachable, open_llm


def _dead_url() -> str:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _queries(tmp_path, papers, n=2):
    qfile = tmp_path / "held_out.jsonl"
    qfile.write_text("".join(json.dumps({"qid": f"h{i}", "query": p.title, "gold_in_corpus": [p.arxiv_id],
                                         "difficulty": "medium"}) + "\n" for i, p in enumerate(papers[:n])))
    return qfile


def test_the_check_names_the_url_and_the_setting():
    url = _dead_url()
    with pytest.raises(EndpointUnreachable) as err:
        check_reachable(url, name="e", chosen_by="--policy")
    assert url in str(err.value) and "--policy" in str(err.value)


def test_a_server_that_answers_anything_is_reachable(scripted_endpoint):
    srv = scripted_endpoint(lambda body: "x")  # answers GET /models with 501: a server is there
    assert check_reachable(srv.base_url, name="s", chosen_by="x") is None
    srv2 = scripted_endpoint(lambda body: "x", get=lambda path: (401, {"error": "bad key"}))
    with pytest.raises(EndpointUnreachable, match="HTTP 401.*MY_KEY"):
        check_reachable(srv2.base_url, name="s", chosen_by="x", api_key_env="MY_KEY")


def test_evaluate_stops_at_once_on_a_dead_endpoint(built_index, papers, tmp_path):
    from arxivqa.evaluate import main

    url, out = _dead_url(), tmp_path / "eval"
    t0 = time.perf_counter()
    with pytest.raises(SystemExit) as exc:
        main(["--policy", f"openai:m@{url}", "--queries", str(_queries(tmp_path, papers)), "--split", "all",
              "--max-turns", "1", "--index", str(built_index.folder), "--out", str(out), "--name", "dead"])
    message = str(exc.value.code)
    assert url in message and "--policy" in message and message.count("\n") == 0
    assert time.perf_counter() - t0 < 5 and not (out / "dead.trajectories.jsonl").exists()


def test_a_labelling_run_stops_at_once_on_a_dead_endpoint(built_index, papers, tmp_path, monkeypatch):
    from arxivqa.labelling import main

    url = _dead_url()
    cfg = tmp_path / "endpoints.toml"
    cfg.write_text(f'[gone]\nbase_url = "{url}"\nmodel = "m"\n')
    monkeypatch.setenv("ARXIVQA_ENDPOINTS", str(cfg))
    with pytest.raises(SystemExit) as exc:
        main(["run", "--endpoint", "gone", "--queries", str(_queries(tmp_path, papers)), "--split", "all",
              "--index", str(built_index.folder), "--store", str(tmp_path / "labels.json"),
              "--runs", str(tmp_path / "runs.jsonl"), "--out", str(tmp_path / "out")])
    message = str(exc.value.code)
    assert url in message and "--endpoint" in message and str(cfg) in message and "[gone]" in message
    assert not (tmp_path / "runs.jsonl").exists()


def test_a_judge_on_a_dead_endpoint_fails_before_training(monkeypatch):
    from types import SimpleNamespace

    from arxivqa.judge import rar_scorer

    url = _dead_url()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    with pytest.raises(EndpointUnreachable, match="judge_endpoint") as err:
        rar_scorer(SimpleNamespace(judge_endpoint=f"openai:m@{url}", judge_rubric="global", rewards=None))
    assert url in str(err.value)


def test_a_local_server_url_setting_is_checked_too(monkeypatch):
    url = _dead_url()
    monkeypatch.setenv("ARXIVQA_LOCAL_LLM_URL", url)
    with pytest.raises(EndpointUnreachable, match="ARXIVQA_LOCAL_LLM_URL"):
        open_llm("local", cache=False)


def test_evaluate_reports_cleanly_when_every_episode_failed(scripted_endpoint, built_index, papers, tmp_path):
    """The server is there but refuses every request (HTTP 400, as a server does for a prompt longer than
    its context): the command finishes, and the reports say how many episodes failed and why."""
    from arxivqa.evaluate import main

    srv = scripted_endpoint(lambda body: 400)
    out = tmp_path / "eval"
    main(["--policy", f"openai:m@{srv.base_url}", "--queries", str(_queries(tmp_path, papers)), "--split", "all",
          "--max-turns", "2", "--index", str(built_index.folder), "--out", str(out), "--name", "t"])
    report = json.loads((out / "t.json").read_text())
    bench, table = report["bench"], report["table"]
    assert bench["failed_episodes"] == 2 and bench["completion_tokens_per_second"] is None
    agent_row = next(r for r in table if r["method"].startswith("openai:"))
    assert agent_row["failed"] == 2 and agent_row["recall@10"] == 0.0
    md = (out / "t.md").read_text()
    assert "2 of 2 episodes failed" in md and "BadRequestError" in md and "n/a completion tokens/s" in md


def test_summaries_of_no_episodes_at_all_do_not_crash(built_index, papers):
    from arxivqa.corpus import Query
    from arxivqa.evaluate import evaluate_trajectories, failure_line, throughput_line

    qs = [Query(qid="q0", query=papers[0].title, gold_in_corpus=[papers[0].arxiv_id])]
    _, _, _, bench = evaluate_trajectories([], built_index, qs, 0.0)
    assert bench["episodes"] == 0 and bench["failed_episodes"] == 0 and failure_line([]) == ""
    assert "n/a episodes/min" in throughput_line(bench)


def test_evaluate_can_show_another_number_of_hits_than_the_view(scripted_endpoint, built_index, papers, tmp_path):
    """``--result-cap``: the policy's searches show at most that many hits (a trained policy seen through
    another tool view than it was trained with); the report records the view it used."""
    from arxivqa.evaluate import main

    words = " ".join(papers[0].title.split()[:3])
    call = json.dumps({"name": "keyword_search", "arguments": {"query": words}})
    srv = scripted_endpoint(lambda body: f"<tool_call>\n{call}\n</tool_call>")
    out = tmp_path / "eval"
    for cap in (2, 1):
        main(["--policy", f"openai:m@{srv.base_url}", "--queries", str(_queries(tmp_path, papers)), "--split", "all",
              "--max-turns", "1", "--index", str(built_index.folder), "--out", str(out), "--name", f"cap{cap}",
              "--result-cap", str(cap)])
        report = json.loads((out / f"cap{cap}.json").read_text())
        assert report["bench"]["env_kwargs"]["result_cap"] == cap
        trajs = [json.loads(line) for line in (out / f"cap{cap}.trajectories.jsonl").read_text().splitlines()]
        searches = [r for t in trajs for s in t["steps"] for r in s["results"] if r["name"] == "keyword_search"]
        assert searches and all(1 <= len(r["hits"]) <= cap for r in searches)
        assert max(len(r["hits"]) for r in searches) == cap
    with pytest.raises(SystemExit):
        main(["--policy", f"openai:m@{srv.base_url}", "--queries", str(_queries(tmp_path, papers)), "--result-cap", "0"])
