#!/bin/bash
# The demo-scale self-training study of docs/self_training.md (target sk, 10 min labelled, 58 min pool), one thread
# per process on the shared 2-core machine. The base of runs/st/demo was trained by `adaptspeech demo` and stopped at
# step 2,100 of 4,200, then finished there:
#   adaptspeech train --config runs/st/demo/base/stage_spec.json --resume training.max_steps=2100
export OMP_NUM_THREADS=1
RUN=(output_dir=runs/st/demo threads=1 corpus.workers=1 'baselines={finetune: stage_finetune.yaml}'
     'self_training.systems=[target_adapter,fusion,finetune]' self_training.steps_scale=1.5)
# the target stages, full fine-tuning, the LM rows; self-training started with 2 rounds and was stopped after the
# target adapter's round 1 (time), then every system ran 1 round (round 1 of the adapter reused):
adaptspeech demo "${RUN[@]}" self_training.rounds=2 --only source_adapters,target_adapter,fusion,finetune,lm,self_training
adaptspeech demo "${RUN[@]}" self_training.rounds=1 --only self_training
# the LM rows of full fine-tuning too (every round reused): results.md / results.json of this folder
adaptspeech demo "${RUN[@]}" self_training.rounds=1 'lm.systems=[target_adapter,fusion,finetune]' --only lm,self_training
# the transfer curve's self-training arm at 1 / 3 / 10 minutes (one learning rate per method: the ones the committed
# curve chose most often), the 10-minute arm point reusing the demo's round: curve/
adaptspeech recipe recipes/synthetic_demo --curve 1min,3min,10min --curve-methods finetune,adapter,self_training \
  "${RUN[@]:0:4}" self_training.rounds=1 self_training.steps_scale=1.5 \
  'curve.grid.finetune.learning_rate=[0.001]' 'curve.grid.adapter.learning_rate=[0.002]'
