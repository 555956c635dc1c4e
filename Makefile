# arxivqa — one-command entry points. Everything runs offline on a CPU by default.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.py))

.PHONY: setup test demo index index-full bench export edit serve label train-rlvr train-rar clean-index

setup: $(VENV)/.setup-done  ## create .venv, install the pinned CPU set, prepare the offline embedder

$(VENV)/.setup-done: requirements.txt requirements-nodeps.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install -r requirements.txt
	$(PY) -m pip install --no-deps -r requirements-nodeps.txt
	$(PY) -m pip install --no-deps -e .
	$(PY) -m arxivqa.embed prepare
	touch $@

test: setup  ## the test suite (a few minutes on 2 cores)
	$(PY) -m pytest

demo: setup  ## run every notebook headless at CPU demo scale; figures and tables go to results/
	@for nb in $(NOTEBOOKS); do echo "== $$nb"; $(PY) $$nb || exit 1; done

index: setup  ## build the demo index (ARXIVQA_SCALE=full for all 139,670 papers)
	$(PY) -m arxivqa.index build

index-full: setup
	$(PY) -m arxivqa.index build --scale full

bench: setup  ## full-corpus search benchmark -> results/bench_search.{json,md} (~40 min on 2 cores)
	$(PY) -m arxivqa.bench search

export: setup  ## export each notebook with its outputs to .ipynb for JupyterLab
	@mkdir -p results/notebooks
	@for nb in $(NOTEBOOKS); do $(VENV)/bin/marimo export ipynb --include-outputs --force "$$nb" -o results/notebooks/$$(basename $$nb .py).ipynb || exit 1; done

serve: setup  ## run the local LLM endpoint in the foreground; share it with ARXIVQA_LOCAL_LLM_URL
	$(PY) -m arxivqa.llm serve

label: setup  ## the deep-research labeller on 10 train queries -> data/labels, results/labelling
	$(PY) -m arxivqa.labelling run --limit 10

train-rlvr: setup  ## cpu-demo RLVR GRPO run (20 steps) -> data/runs/rlvr-cli
	$(PY) -m arxivqa.train --preset cpu-demo --reward rlvr --out data/runs/rlvr-cli

train-rar: setup  ## cpu-demo RaR GRPO run with the local judge -> data/runs/rar-cli
	$(PY) -m arxivqa.train --preset cpu-demo --reward rar --set max_steps=10 --out data/runs/rar-cli

edit: setup  ## open the notebooks in marimo
	$(VENV)/bin/marimo edit notebooks/

clean-index:
	rm -rf data/index
