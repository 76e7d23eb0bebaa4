#!/bin/bash
# Head (b): mix 0..3 on all labelled training audio + the sk untranscribed pool, started once head (a)'s training
# has finished (one training at a time), on the same frozen base model, 400 steps, seed 0, stage_lid.yaml's LR.
set -euo pipefail
WT=/work/wt/lidaudio
OUT=/work/studies/lidaudio
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1 \
    TOKENIZERS_PARALLELISM=false PYTHONPATH=$WT
until [ -f "$OUT/heads_a/heads/mix_0..3_all_audio/stage_summary.json" ]; do sleep 30; done
date -u +"%F %T start b"
cd "$WT"
nice -n 5 /work/main/.venv/bin/python recipes/synthetic_demo/lid_hybrid_study.py --run /work/studies/lid/run \
    --output "$OUT/heads_b" --heads-model /work/studies/lid/run/base_model --only-heads \
    --settings "mix 0..3, all audio + pool" --lid-extra-audio sk=/work/studies/st_learned/self_training/pool
date -u +"%F %T end b"
