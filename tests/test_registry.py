"""Runs are found by what they are (their config), wherever they lie; small helpers the notebooks share."""

import json

import pytest

from arxivqa.train import (TrainConfig, find_run, find_runs, list_runs, preset, read_run, run_options, run_identity,
                           same_run)


def _fake_run(folder, cfg: TrainConfig, steps=3, finished=True):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(cfg.model_dump_json())
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "loss": 0.0}) + "\n" for i in range(1, steps + 1)))
    if finished:
        (folder / "final").mkdir()
        (folder / "final" / "adapter_config.json").write_text("{}")
    return folder


def _base_and_warm(tmp_path, monkeypatch):
    """A results folder for committed runs, a base-model preset, a warm-started one, and its build record."""
    monkeypatch.setenv("ARXIVQA_RESULTS_DIR", str(tmp_path / "results"))
    base = preset("cpu-warm", reward="rlvr", max_steps=100)
    warm = base.model_copy(update={"model": "qwen-warm", "temperature": 1.0})
    return tmp_path / "results" / "runs", base, warm, {"model": "qwen-warm", "sft_sha256": "aaaa", "build_sha256": "4f37"}


def test_a_run_is_found_by_its_config_not_its_folder_name(tmp_path):
    here, committed = tmp_path / "runs", tmp_path / "results" / "runs"
    rlvr = preset("cpu-demo", reward="rlvr", max_steps=3)
    curriculum = rlvr.model_copy(update={"curriculum": "easy-to-hard"})
    rar = preset("cpu-demo", reward="rar", max_steps=2, judge_endpoint="local-smollm2")
    _fake_run(here / "whatever-name", rlvr)
    _fake_run(committed / "rlvr-long", curriculum, steps=100)
    _fake_run(here / "half-done", rar, steps=1, finished=False)
    roots = [here, committed]
    assert find_run(rlvr, roots).name == "whatever-name"
    assert find_run(curriculum, roots).path == committed / "rlvr-long" and find_run(curriculum, roots).steps_done == 100
    assert find_run(rar, roots) is None and find_run(rar, roots, finished=None).name == "half-done"
    # what a run *is* ignores how it was executed (threads, checkpoint cadence)
    assert find_run(rlvr.model_copy(update={"threads": 1, "save_steps": 5}), roots) is not None
    assert find_run(rlvr.model_copy(update={"seed": 1}), roots) is None
    assert {r.name for r in find_runs(roots, reward="rlvr")} == {"whatever-name", "rlvr-long"}
    assert [r.name for r in find_runs(roots, reward="rar", judge_endpoint="local-smollm2")] == ["half-done"]
    with pytest.raises(ValueError, match="not TrainConfig fields"):
        find_runs(roots, judge="x")
    assert run_identity(rlvr) != run_identity(curriculum)


def test_labels_and_picker_options(tmp_path):
    one = read_run(_fake_run(tmp_path / "a", preset("cpu-demo", reward="rlvr", max_steps=1), steps=1))
    many = read_run(_fake_run(tmp_path / "b", preset("cpu-demo", reward="rlvr", max_steps=1,
                                                     curriculum="easy-to-hard"), steps=1))
    assert "· 1 step ·" in one.label() and one.label() == many.label()  # the label says what a figure needs
    options = run_options(list_runs([tmp_path]))
    assert len(options) == 2 and all(" · uniform · " in k or " · easy-to-hard · " in k for k in options)
    assert same_run(one, tmp_path / "a") and not same_run(one, many) and not same_run(one, None)


def test_the_signature_window_never_compares_a_step_with_itself():
    import pandas as pd

    from arxivqa.diagnostics import early_late, signature_window

    assert [signature_window(n) for n in (0, 1, 2, 3, 9, 10, 100)] == [1, 1, 1, 1, 4, 5, 5]
    summary = pd.DataFrame({"step": [1, 2, 3], "tool_calls_mean": [1.0, 2.0, 4.0]})
    table = early_late(summary, pd.DataFrame({"step": [1, 2, 3], "reward": [0.0, 0.5, 1.0]}))
    row = table.set_index("measure").loc["tool calls per rollout"]
    assert list(table.columns) == ["measure", "first 1 step", "last 1 step"] and (row.iloc[0], row.iloc[1]) == (1.0, 4.0)


def test_a_figure_caption_states_model_scale_steps_and_seed():
    from arxivqa.plots import policy_caption

    cap = policy_caption({"base": ("qwen", 0, "-"), "RLVR": ("qwen", 20, 0), "RaR": ("qwen", 10, 0)}, "demo")
    assert cap == "qwen · demo · steps: RLVR 20, RaR 10 (no GRPO steps: base) · seed 0"
    assert policy_caption({"RLVR": ("qwen", 20, 0), "RaR": ("qwen", 20, 0)}, "full") == "qwen · full · 20 steps · seed 0"


def test_episodes_are_keyed_by_run_name_not_by_where_the_repository_lies():
    from arxivqa.evaluate import policy_key

    assert policy_key("run:/a/b/rlvr-x") == policy_key("run:/elsewhere/rlvr-x") == "run-rlvr-x"
    assert policy_key("openai:m@http://127.0.0.1:1/v1") == "openai-m" and policy_key("local") == "local"


def test_committed_runs_come_finished_and_longest_first_and_an_unfinished_one_says_so(tmp_path, monkeypatch):
    from arxivqa.train import committed_runs

    monkeypatch.setenv("ARXIVQA_RESULTS_DIR", str(tmp_path / "results"))
    root = tmp_path / "results" / "runs"
    cfg = preset("cpu-warm", reward="rlvr", max_steps=100)
    _fake_run(root / "short", cfg, steps=10)
    _fake_run(root / "long", cfg, steps=100)
    _fake_run(root / "partial", cfg, steps=60, finished=False)
    _fake_run(root / "other", cfg.model_copy(update={"curriculum": "easy-to-hard"}), steps=100)
    runs = committed_runs(reward="rlvr", curriculum="uniform")
    assert [r.name for r in runs] == ["long", "short", "partial"]
    assert "60 steps of 100 (unfinished)" in runs[-1].label() and "unfinished" not in runs[0].label()


def test_of_runs_as_long_the_warm_started_one_comes_first_and_its_twin_is_the_other_schedule_trained_alike(
        tmp_path, monkeypatch):
    from arxivqa.train import committed_runs, twin_run

    root, base, warm, build = _base_and_warm(tmp_path, monkeypatch)
    _fake_run(root / "a-base", base, steps=100)
    (_fake_run(root / "b-warm", warm, steps=100) / "warm_start.json").write_text(json.dumps(build))
    _fake_run(root / "c-base-e2h", base.model_copy(update={"curriculum": "easy-to-hard"}), steps=100)
    (_fake_run(root / "d-warm-e2h-t07", warm.model_copy(update={"curriculum": "easy-to-hard", "temperature": 0.7}),
               steps=30, finished=False) / "warm_start.json").write_text(json.dumps(build))
    mine = committed_runs(reward="rlvr", curriculum="uniform")
    theirs = committed_runs(reward="rlvr", curriculum="easy-to-hard")
    assert [r.name for r in mine] == ["b-warm", "a-base"]
    # the warm run's easy-to-hard run differs in temperature: not its twin; the base run's twin is found
    assert twin_run(theirs, mine[0]) is None and twin_run(theirs, mine[1]).name == "c-base-e2h"
    (_fake_run(root / "e-warm-e2h", warm.model_copy(update={"curriculum": "easy-to-hard"}), steps=40, finished=False)
     / "warm_start.json").write_text(json.dumps(build))
    theirs = committed_runs(reward="rlvr", curriculum="easy-to-hard")
    assert twin_run(theirs, mine[0]).name == "e-warm-e2h"
    # the same build made again (its record rewritten, the same build digest) is the same training
    (root / "e-warm-e2h" / "warm_start.json").write_text(json.dumps({**build, "sft_sha256": "bbbb"}))
    assert twin_run(committed_runs(reward="rlvr", curriculum="easy-to-hard"), mine[0]).name == "e-warm-e2h"
    # another warm-start build of the same model name is not the same training
    (root / "e-warm-e2h" / "warm_start.json").write_text(json.dumps({**build, "sft_sha256": "bbbb",
                                                                     "build_sha256": "0000"}))
    assert twin_run(committed_runs(reward="rlvr", curriculum="easy-to-hard"), mine[0]) is None


def test_a_rar_run_is_set_beside_the_rlvr_run_of_its_start_and_settings(tmp_path, monkeypatch):
    from arxivqa.train import committed_runs, reward_twin

    root, base, warm, build = _base_and_warm(tmp_path, monkeypatch)
    _fake_run(root / "a-base", base, steps=100)
    (_fake_run(root / "b-warm-t07", warm.model_copy(update={"temperature": 0.7}), steps=100) / "warm_start.json").write_text(
        json.dumps(build))
    rar = _fake_run(root / "r-warm", warm.model_copy(update={"reward": "rar", "judge_endpoint": "blend:m"}), steps=10,
                    finished=False)
    (rar / "warm_start.json").write_text(json.dumps(build))
    (rar_run,) = committed_runs(reward="rar")
    rlvr = committed_runs(reward="rlvr")
    # no RLVR run trained like it: the one from the same warm start (another temperature) before the base model's
    assert reward_twin(rlvr, rar_run).name == "b-warm-t07"
    (_fake_run(root / "c-warm", warm, steps=100) / "warm_start.json").write_text(json.dumps(build))
    assert reward_twin(committed_runs(reward="rlvr"), rar_run).name == "c-warm"
    assert reward_twin([], rar_run) is None
