#!/bin/bash
# The self-training study on the fully trained demo base as run on a 2-core CPU (docs/self_training.md, "On the fully
# trained base"): a demo run without baselines and LM rows (RUN, e.g. `adaptspeech demo output_dir=runs/ref threads=1
# 'baselines={}' lm.enabled=false`) gains the full fine-tuning baseline and the LM rows, then three copies of it
# self-train all three systems (up to 2 rounds, 5 for topipl) with SimAdapter fusion labelling round 1, one per arm:
#   agreement: WeNet NST's LM / best-path agreement (CER below 10%), then the 80% most confident (max_prob/min);
#   learned:   the learned word confidence (fitted on dev for each teacher), the 80% most confident;
#   topipl:    the learned arm's filter, every student the average of its 3 best checkpoints by dev CER (TopIPL), up to
#              5 rounds (the rounds stop when dev CER stops improving).
# Usage: bash recipes/synthetic_demo/results/self_training/run_full_base_filters.sh RUN [OUT_PREFIX]
set -euo pipefail
RUN=${1:?a finished demo run}
PREFIX=${2:-runs/st_filters}
export OMP_NUM_THREADS=${THREADS:-1}
COMMON=(threads="$OMP_NUM_THREADS" corpus.workers=1 'baselines={finetune: stage_finetune.yaml}'
        'lm.systems=[target_adapter,fusion,finetune]')
ST=('self_training.systems=[target_adapter,fusion,finetune]' self_training.keep_fraction=0.8
    self_training.teacher=fusion self_training.steps_scale=2.0)
RESULTS=recipes/synthetic_demo/results/self_training/full_base
mkdir -p "$RESULTS"

# 1. the baseline and the LM rows on the finished run (nothing else retrained)
adaptspeech demo output_dir="$RUN" "${COMMON[@]}" --only finetune,lm

# 2. one copy of the run per filter (the pool is built once, in the first), each self-trained
for arm in agreement learned topipl; do
  OUT="${PREFIX}_$arm"
  mkdir -p "$OUT" && tar -C "$RUN" --exclude=./self_training -cf - . | tar -C "$OUT" -xf -
  if [ -d "${PREFIX}_agreement/self_training/pool" ] && [ "$arm" != agreement ]; then
    mkdir -p "$OUT/self_training" && cp -a "${PREFIX}_agreement/self_training/pool" \
      "${PREFIX}_agreement/self_training/pool_record.json" "$OUT/self_training/"
  fi
  if [ "$arm" = agreement ]; then
    FILTER=(self_training.rounds=2 self_training.max_lm_disagreement=0.1 self_training.confidence=max_prob/min)
  elif [ "$arm" = learned ]; then FILTER=(self_training.rounds=2 self_training.confidence=learned)
  else FILTER=(self_training.rounds=5 self_training.confidence=learned self_training.average_top_n=3); fi
  adaptspeech demo output_dir="$OUT" "${COMMON[@]}" "${ST[@]}" "${FILTER[@]}" --only lm,self_training
  cp "$OUT/results.md" "$RESULTS/results_$arm.md"
  cp "$OUT/results.json" "$RESULTS/results_$arm.json"
done
