#!/usr/bin/env bash
# The figures of experiments/verified_smc.md, from the repository root (tau2 data beside the checkout).
set -euo pipefail
A=".venv/bin/agentspec"; D="--data-dir ../shared/data/tau2"; OUT=runs/verified-smc; mkdir -p $OUT
RUN="--bench tau2-telecom --solo --agent oracle --latency-model smc-paper $D --no-progress"
$A speculator fit --bench tau2-telecom --split train $D --out runs/spec.json | tail -1 > $OUT/fit.json
for speculator in noisy-oracle:0.8 learned:runs/spec.json; do
  name=${speculator%%:*}
  # the learned speculator is fitted on train, which base contains: test only
  splits="base test"; [ "$name" = learned ] && splits="test"
  for split in $splits; do
    $A run --json $RUN --split $split --speculator-model $speculator --mode sequential,sa,smc --macro-commit trusted \
      | tail -1 > $OUT/$name-$split-trusted.json
    $A run --json $RUN --split $split --speculator-model $speculator --mode smc --macro-commit verified \
      | tail -1 > $OUT/$name-$split-verified.json
  done
done
