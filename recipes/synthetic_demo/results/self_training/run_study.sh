#!/bin/bash
# the demo-scale self-training study (target sk, 10 min labelled, 60 min pool); base stopped at 2100 of 4200 steps
cd /work/wt25
. /work/main/.venv/bin/activate
export PYTHONPATH=/work/wt25 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
date -u
adaptspeech demo output_dir=runs/st/demo threads=1 corpus.workers=1 'baselines={}' 'self_training.systems=[target_adapter]' \
  self_training.rounds=2 self_training.steps_scale=1.5 --only source_adapters,target_adapter,fusion,lm,self_training
date -u
