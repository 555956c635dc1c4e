#!/bin/bash
# the RaR run at 35 steps on its own training queries (the first 40 of the 74 reachable train queries it trained
# on), its own view and index (demo, MiniLM-128), tokens sampled as in training; OUT=<folder> for the outputs
set -e
cd "$(dirname "$0")/../../.."
R=results/runs/rar-cpu-warm-compact-mixtext3-t1.0-minp0.1-c1536-blend-qwen2.5-coder-1.5b-instruct-global-100steps-seed0
Q=$(mktemp --suffix=.jsonl)
.venv/bin/python - "$R/queries.json" "$Q" <<'PY'
import json, sys
from arxivqa.corpus import queries_path
kept = set(json.load(open(sys.argv[1]))["kept"])
with open(sys.argv[2], "w") as f:
    f.writelines(line for line in open(queries_path()) if json.loads(line)["qid"] in kept)
PY
.venv/bin/python -m arxivqa.evaluate --queries "$Q" --split all --limit 40 --policy run:$R --view run:$R \
  --temperature 1.0 --min-p 0.1 --seed 0 --name verbatim --out "${OUT:-/tmp/agent-context}"
