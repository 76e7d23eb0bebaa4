#!/bin/bash
# The self-training study on the fully trained demo base (4,200 steps), target sk, 10 min labelled, the 58-min pool:
# the confidence methods compared on dev, then every system (adapter alone, SimAdapter, full fine-tuning) self-trained
# with the filters and teachers of docs/self_training.md, with and without the LM, and the adapter alone again with a
# wider student and with an adapter + LoRA student. One command: `bash recipes/synthetic_demo/results/self_training/run_full_base_study.sh [OUT]`.
# Not run yet (a GPU or an idle CPU hour); OUT defaults to runs/st/full. THREADS=N sets the threads per process.
set -euo pipefail
OUT=${1:-runs/st/full}
THREADS=${THREADS:-2}
export OMP_NUM_THREADS=$THREADS
RESULTS=recipes/synthetic_demo/results/self_training/full_base
mkdir -p "$RESULTS"
RUN=(output_dir="$OUT" threads="$THREADS" corpus.workers=1 'baselines={finetune: stage_finetune.yaml}'
     'lm.systems=[target_adapter,fusion,finetune]')
ST=('self_training.systems=[target_adapter,fusion,finetune]' self_training.rounds=5
    'self_training.keep_fraction_schedule=[0.6,0.7,0.8,0.9]' self_training.keep_fraction=null
    self_training.max_lm_disagreement=0.1 self_training.teacher=fusion self_training.average_top_n=3
    self_training.fit_nbest_temperature=true self_training.steps_scale=2.0)

# 1. the demo on the full base (4,200 steps) with the LM rows: base, source adapters, target systems, LM
adaptspeech demo "${RUN[@]}"

# 2. which word confidence: every method on sk dev (temperature fitted two-fold) and on test (fitted on dev)
python scripts/confidence_calibration.py --model "$OUT/target_adapter/model" --data "$OUT/prepared" --language sk \
  --lm "$OUT/lm" --threads "$THREADS" --out "$RESULTS/confidence_dev"
python scripts/confidence_calibration.py --model "$OUT/target_adapter/model" --data "$OUT/prepared" --language sk \
  --lm "$OUT/lm" --threads "$THREADS" --split test --fit-split dev --out "$RESULTS/confidence_test"
# learned (each teacher's estimator fitted on dev; the section's default with the LM) had the best dev ROC AUC on this
# base (docs/self_training.md); another method: CONFIDENCE=<method>
# a copy of the run without the adapter alone's rounds (tar: no rsync on a bare machine)
copy_without_rounds() { mkdir -p "$1" && tar -C "$OUT" --exclude=./self_training/target_adapter -cf - . | tar -C "$1" -xf -; }
CONFIDENCE=${CONFIDENCE:-learned}

# 3. self-training of the three systems (rounds reused when the key matches), with and without the LM: results.md
adaptspeech demo "${RUN[@]}" "${ST[@]}" "self_training.confidence=$CONFIDENCE" --only lm,self_training
cp "$OUT/results.md" "$OUT/results.json" "$RESULTS/"

# 4. capacity: the adapter alone with a 4x wider student bottleneck, in a copy of the run without its rounds
WIDE="${OUT}_wide"
copy_without_rounds "$WIDE"
adaptspeech demo output_dir="$WIDE" "${RUN[@]:1}" "${ST[@]}" "self_training.confidence=$CONFIDENCE" \
  'self_training.systems=[target_adapter]' self_training.adapter_bottleneck=256 --only lm,self_training
cp "$WIDE/results.md" "$RESULTS/results_wide_adapter.md"

# 4b. capacity: the adapter alone with LoRA (rank 16) on the attention projections beside its bottleneck adapter
LORA="${OUT}_lora"
copy_without_rounds "$LORA"
adaptspeech demo output_dir="$LORA" "${RUN[@]:1}" "${ST[@]}" "self_training.confidence=$CONFIDENCE" \
  'self_training.systems=[target_adapter]' self_training.adapter_lora=16 --only lm,self_training
cp "$LORA/results.md" "$RESULTS/results_lora_adapter.md"

# 5. the transfer curve's self-training arm at 1 / 3 / 10 minutes on this base
adaptspeech recipe recipes/synthetic_demo --curve 1min,3min,10min --curve-methods finetune,adapter,self_training \
  "${RUN[@]}" "${ST[@]}" "self_training.confidence=$CONFIDENCE"
cp -r "$OUT/curve" "$RESULTS/curve"
