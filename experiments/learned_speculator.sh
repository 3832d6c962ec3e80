#!/usr/bin/env bash
# The figures of experiments/learned_speculator.md, from the repository root (tau2 data beside the checkout).
set -euo pipefail
A=".venv/bin/agentspec"; D="--data-dir ../shared/data/tau2"; OUT=runs/learned-speculator; mkdir -p $OUT
BASE="--solo --agent oracle --latency-model smc-paper $D --no-progress"; RUN="$BASE --speculator-model learned:runs/spec.json"
$A speculator fit --bench tau2-telecom --split train $D --out runs/spec.json | tail -1 > $OUT/fit.json
for split in test small; do
  $A speculator score --bench tau2-telecom --split $split --speculator runs/spec.json $D | tail -1 > $OUT/score-$split.json
  $A speculator score --bench tau2-telecom --split $split --speculator runs/spec.json --lookahead $D | tail -1 > $OUT/score-$split-lookahead.json
done
# Learning online, prequential: each task scored, then learned from (as a run's --learn-online does).
for split in test small; do
  $A speculator score --bench tau2-telecom --split $split --speculator runs/spec.json --learn-online $D | tail -1 > $OUT/score-$split-online.json
done
$A speculator score --bench tau2-telecom --split train --folds 5 $D | tail -1 > $OUT/cv5.json
$A speculator score --bench tau2-telecom --split train --folds 5 --lookahead $D | tail -1 > $OUT/cv5-lookahead.json
# Virtual clock, oracle authority, the learned speculator (look-ahead on), shipped macros; --spec-width 1 and 3.
for split in test small; do
  for width in 1 3; do
    $A run --json --bench tau2-telecom --split $split $RUN --mode sequential,sa,smc --spec-width $width \
      --out $OUT/run-$split-w$width --overwrite | tail -1 > $OUT/run-$split-w$width.json
  done
done
# Macros mined with the learned speculator as labeller (looking ahead in each sample's fork), then smc with them
# (verified macro commit, the default); also mined with a lower reliability bound (--tau 0.3).
$A mine --bench tau2-telecom --split train --speculator-model learned:runs/spec.json --samples 1 $D \
  --out runs/macros-learned.json --no-progress | tail -1 > $OUT/mine.json
$A mine --bench tau2-telecom --split train --speculator-model learned:runs/spec.json --samples 1 --tau 0.3 $D \
  --out runs/macros-learned-tau03.json --no-progress | tail -1 > $OUT/mine-tau03.json
for split in test small; do
  for width in 1 3; do
    $A run --json --bench tau2-telecom --split $split $RUN --mode smc --spec-width $width --macros runs/macros-learned.json \
      --out $OUT/run-$split-w$width-learned-macros --overwrite | tail -1 > $OUT/run-$split-w$width-learned-macros.json
  done
done
$A run --json --bench tau2-telecom --split test $RUN --mode smc --macros runs/macros-learned-tau03.json \
  --out $OUT/run-test-w1-learned-macros-tau03 --overwrite | tail -1 > $OUT/run-test-w1-learned-macros-tau03.json
# The look-ahead cap: 13 calls, the fit's first-level probes (no chained batch), scored and run.
$A speculator fit --bench tau2-telecom --split train $D --lookahead-cap 13 --out runs/spec-cap13.json | tail -1 > $OUT/fit-cap13.json
$A speculator score --bench tau2-telecom --split test --speculator runs/spec-cap13.json --lookahead $D | tail -1 > $OUT/score-test-cap13.json
$A run --json --bench tau2-telecom --split test $BASE --mode sequential,sa,smc --speculator-model learned:runs/spec-cap13.json \
  --out $OUT/run-test-w1-cap13 --overwrite | tail -1 > $OUT/run-test-w1-cap13.json
# Learning online: the same test run with --learn-online (each mode learns from the file afresh).
$A run --json --bench tau2-telecom --split test $RUN --mode sa --learn-online --save-speculator runs/spec-online.json \
  --out $OUT/run-test-online --overwrite | tail -1 > $OUT/run-test-online.json
