"""The settings: one typed object, read from the environment in one place, documented in the README."""

import ast
from pathlib import Path

import pytest

from arxivqa import config
from arxivqa.config import Settings, settings

LIB = Path(config.__file__).parent
README = Path(config.REPO_ROOT) / "README.md"


def test_the_readme_settings_table_is_the_settings_object():
    assert Settings.table() in README.read_text(), \
        "README's settings table is out of date: paste `python -m arxivqa.config table` into it"


def test_only_config_reads_the_environment():
    """No module but config.py touches os.environ / os.getenv (notebooks neither)."""
    offenders = []
    files = [p for p in LIB.glob("*.py") if p.name != "config.py"]
    files += sorted((Path(config.REPO_ROOT) / "notebooks").glob("*.py"))
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv") \
                    and isinstance(node.value, ast.Name) and node.value.id == "os":
                offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, f"read the environment through arxivqa.config: {offenders}"


def test_values_are_typed_and_a_bad_value_names_its_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("ARXIVQA_TRAIN_STEPS", "7")
    monkeypatch.setenv("ARXIVQA_EVAL_JUDGES", "local, local-smollm2 ,")
    monkeypatch.setenv("ARXIVQA_COMPARE_CURRICULUM", "1")
    monkeypatch.setenv("ARXIVQA_RESULTS_DIR", str(tmp_path / "r"))
    s = settings()
    assert s.train_steps == 7 and s.eval_judges == ["local", "local-smollm2"] and s.compare_curriculum is True
    assert s.results_dir == (tmp_path / "r").resolve() and config.results_dir() == s.results_dir
    assert {"train_steps", "eval_judges"} <= s.model_fields_set and "rar_steps" not in s.model_fields_set
    monkeypatch.setenv("ARXIVQA_SCALE", "huge")
    with pytest.raises(ValueError, match="ARXIVQA_SCALE='huge'"):
        settings()
    monkeypatch.setenv("ARXIVQA_SCALE", "full")
    monkeypatch.setenv("ARXIVQA_DEMO_PAPERS", "many")
    with pytest.raises(ValueError, match="ARXIVQA_DEMO_PAPERS"):
        settings()


def test_the_environment_is_read_once_until_a_setting_changes(monkeypatch):
    monkeypatch.setenv("ARXIVQA_DEMO_EPISODES", "2")
    first = settings()
    assert settings() is first  # no re-read while nothing changed
    monkeypatch.setenv("ARXIVQA_DEMO_EPISODES", "4")
    assert settings() is not first and settings().demo_episodes == 4


def test_training_configs_take_their_steps_from_the_settings(monkeypatch):
    from arxivqa.train import configured

    for var in ("ARXIVQA_TRAIN_STEPS", "ARXIVQA_RAR_STEPS", "ARXIVQA_PRESET"):
        monkeypatch.delenv(var, raising=False)
    assert configured("rlvr").max_steps == Settings().train_steps
    assert configured("rar").max_steps == Settings().rar_steps
    monkeypatch.setenv("ARXIVQA_RAR_STEPS", "3")
    assert configured("rar", judge_rubric="query").max_steps == 3
    monkeypatch.setenv("ARXIVQA_PRESET", "paper")
    monkeypatch.delenv("ARXIVQA_RAR_STEPS")
    assert configured("rlvr").max_steps == 250 * 24  # the paper preset keeps its own unless steps are set
