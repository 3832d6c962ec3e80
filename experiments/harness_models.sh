#!/usr/bin/env bash
# Real models on every harness (issue 30 item 3): qwen2.5-coder-1.5b (embedded, fp32 torch, ToolSpec decoder) as the
# agent on workspace-demo, the AppWorld fixtures (function calling, code actions) and the GAIA fixtures, sequential
# and sa with a learned speculator fitted on tasks the run does not play. Each run is recorded into
# experiments/recordings/<harness>--qwen2.5-coder-1.5b, which tests/test_harness_models.py replays without the model.
# Write-up: experiments/harness_models.md. From the repository root; about an hour on 2 busy CPU cores.
set -euo pipefail
cd "$(dirname "$0")/.."
AGENTSPEC=.venv/bin/agentspec
REC=experiments/recordings
NICE="nice -n 10"  # the machine is shared
mkdir -p runs/harness-models

# A learned speculator fitted on the gold calls of every task of SPLIT of BENCH ("": its default split) but
# HELD_OUT (comma list), saved to OUT.
# `agentspec speculator fit` fits a whole split; these benches have no train split the run tasks are outside of
# (GAIA fixtures: one split), and GAIA's fit needs --backend overlay, which `fit` lacks (it opens Docker).
fit_without() {  # BENCH DATA_DIR BACKEND SPLIT HELD_OUT OUT [OPTION=VALUE ...]
  $NICE .venv/bin/python - "$@" <<'EOF'
import sys
from pathlib import Path

import anyio

from agentspec.bench.registry import open_bench
from agentspec.learned_speculator.command import fit_bench

name, data_dir, backend, split, held_out, out, *options = sys.argv[1:]
bench = open_bench(name, data_dir or None, backend=backend or None,
                   options=dict(o.split("=", 1) for o in options) or None)
held = set(held_out.split(","))
tasks = [t for t in (bench.tasks(split) if split else bench.tasks()) if t.id not in held]
artifact = anyio.run(lambda: fit_bench(bench, tasks, split=f"all but {held_out}"))
Path(out).parent.mkdir(parents=True, exist_ok=True)
artifact.save(Path(out))
print(f"{out}: {artifact.fitted_on.trajectories} trajectories, {artifact.fitted_on.calls} calls")
EOF
}

# --- workspace-demo: tasks 3 and 4 of the 6, the speculator fitted on tasks 1 and 2 (split small) ----------------
WS=$REC/workspace-demo--qwen2.5-coder-1.5b
$NICE $AGENTSPEC speculator fit --bench workspace-demo --split small --out $WS/speculator.json
$NICE $AGENTSPEC run --bench workspace-demo --task-ids ws-todo-report,ws-sales-total \
  --agent-model qwen2.5-coder-1.5b --mode sequential,sa --speculator-model learned:$WS/speculator.json \
  --max-steps 20 --record $WS --out runs/harness-models/workspace-demo

# --- AppWorld fixtures (function calling): 2 of the 3 tasks, the speculator fitted on the third ------------------
# The address task runs with apps=supervisor: it declares no required apps, so by default every app's APIs become
# tools (458 tools, ~65k tokens of schemas: past the model's 32k context), and its answer needs only the
# supervisor's. The note task declares its apps (simple_note, supervisor: 28 tools).
AW_DATA=$(ls -d ~/.cache/agentspec/appworld/fixtures-* | head -1)  # tests/test_appworld.py's generated fixtures
AW=$REC/appworld--qwen2.5-coder-1.5b
fit_without appworld "$AW_DATA" "" dev agspecaddr_2,agspecnote_1 $AW/speculator.json
$NICE $AGENTSPEC run --bench appworld --data-dir "$AW_DATA" --task-ids agspecaddr_2 --bench-option apps=supervisor \
  --agent-model qwen2.5-coder-1.5b --mode sequential,sa --speculator-model learned:$AW/speculator.json \
  --max-steps 20 --record $AW --out runs/harness-models/appworld
$NICE $AGENTSPEC run --bench appworld --data-dir "$AW_DATA" --task-ids agspecnote_1 \
  --agent-model qwen2.5-coder-1.5b --mode sequential,sa --speculator-model learned:$AW/speculator.json \
  --max-steps 20 --record $AW --out runs/harness-models/appworld-note

# --- AppWorld fixtures (code actions): the same 2 tasks, AppWorld's native code blocks ------------------------------
# No learned speculator: it is fitted on API calls, and a code action is one `execute` of free Python.
AWC=$REC/appworld-code--qwen2.5-coder-1.5b
$NICE $AGENTSPEC run --bench appworld --data-dir "$AW_DATA" --task-ids agspecaddr_2,agspecnote_1 --bench-option actions=code \
  --agent-model qwen2.5-coder-1.5b --mode sequential --max-steps 20 --record $AWC --out runs/harness-models/appworld-code

# --- GAIA fixtures: 2 of the 12 questions, the speculator fitted on the other 10 ----------------------------------
GA=$REC/gaia--qwen2.5-coder-1.5b
fit_without gaia tests/data/gaia-format overlay "" ours-0001,ours-0002 $GA/speculator.json
$NICE $AGENTSPEC run --bench gaia --data-dir tests/data/gaia-format --backend overlay --task-ids ours-0001,ours-0002 \
  --agent-model qwen2.5-coder-1.5b --mode sequential,sa --speculator-model learned:$GA/speculator.json \
  --max-steps 20 --record $GA --out runs/harness-models/gaia
