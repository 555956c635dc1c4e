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


def test_a_training_run_killed_mid_step_resumes_from_its_checkpoint_with_the_same_data_order(tiny_run, tmp_path):
    """A GRPO run (tiny model, real TRL) SIGKILLed during step 3, after checkpoint 2, then resumed with
    --resume: every step is logged once, and each step trained on the queries an uninterrupted run of
    the same settings (the shared ``tiny_run``) trained on."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from arxivqa.train import load_rollouts

    sets, _cfg, whole = tiny_run

    def command(out, resume=False):
        args = [sys.executable, "-m", "arxivqa.train", "--preset", "cpu-demo", "--reward", "rlvr", "--out", str(out)]
        for s in sets:
            args += ["--set", s]
        return args + (["--resume"] if resume else [])

    env = {**os.environ, "ARXIVQA_RESULTS_DIR": str(tmp_path / "results")}
    cut = tmp_path / "cut"
    proc = subprocess.Popen(command(cut), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while not (cut / "checkpoint-2" / "trainer_state.json").exists():  # step 3 begins right after this
        assert proc.poll() is None and time.time() < deadline, "the run ended before its second checkpoint"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (cut / "final").exists()
    subprocess.run(command(cut, resume=True), check=True, env=env, capture_output=True, timeout=600)

    def by_step(run):
        rows = load_rollouts(run / "rollouts.jsonl")
        out = {}
        for r in rows:
            out.setdefault(r["step"], []).append(r["trajectory"]["qid"])
        return out

    assert sorted(by_step(cut)) == [1, 2, 3] and all(len(v) == 2 for v in by_step(cut).values())
    assert by_step(cut) == by_step(whole)
    assert (cut / "final" / "adapter_config.json").exists()
