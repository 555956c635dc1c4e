"""Soak (issue #14, item 5): thousands of episodes of a scripted random policy (valid, malformed and
hostile calls) through the tools environment and the trajectory store. The default run does a smaller
soak; ``pytest -m slow`` (or ``python -m arxivqa.soak``) runs the full 2,000 episodes."""

import pytest

from arxivqa.soak import run_soak


def _check(report, episodes):
    assert report.episodes == episodes and report.calls > 2 * episodes
    assert report.escaped == 0, report.escaped_examples
    assert report.violations == 0, report.violation_examples
    assert report.saved == report.loaded == episodes and report.mismatched == 0
    assert set(report.kinds) == {"valid", "malformed", "hostile"} and min(report.kinds.values()) > episodes / 4
    # bounded memory: after the warm-up, resident memory does not grow with the number of episodes
    assert report.growth_after_warmup_mb < 64, report.as_dict()


def test_a_short_soak(built_index, tmp_path):
    report = run_soak(built_index, episodes=200, out=tmp_path, chunk=50)
    _check(report, 200)
    assert len(list(tmp_path.glob("trajectories-*.jsonl"))) == 4


@pytest.mark.slow
def test_the_full_soak(built_index):
    report = run_soak(built_index, episodes=2000)
    print("soak:", report.as_dict())
    _check(report, 2000)


def test_a_trajectory_with_cut_values_loads_back_unchanged(tmp_path):
    """The soak's first finding: values cut for storage were cut again, differently, on every load."""
    from arxivqa.records import (AssistantTurn, ToolCall, ToolCallRecord, Trajectory, load_trajectories,
                                 save_trajectories)

    traj = Trajectory.start({"qid": "q", "query": "x" * 9000}, policy="p")
    step = traj.add_step(AssistantTurn(text="t" * 60000, tool_calls=[ToolCall(name="keyword_search", arguments={
        "query": "{" * 5000, "ids": list(range(50)), **{f"k{i}": i for i in range(30)}})]))
    step.results = [ToolCallRecord(name="read_page", arguments={"paper_id": ["p"] * 25}, result="r" * 30000)]
    save_trajectories(tmp_path / "t.jsonl", [traj])
    (back,) = load_trajectories(tmp_path / "t.jsonl")
    assert back == traj
    save_trajectories(tmp_path / "t2.jsonl", [back])
    assert (tmp_path / "t2.jsonl").read_text() == (tmp_path / "t.jsonl").read_text()
