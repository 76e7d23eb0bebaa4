#!/bin/bash
# The demo-scale self-training study of docs/self_training.md (target sk, 10 min labelled, 58 min pool).
# The base of runs/st/demo was trained by `adaptspeech demo` and stopped at step 2,100 of 4,200, then finished there:
#   adaptspeech train --config runs/st/demo/base/stage_spec.json --resume training.max_steps=2100
export OMP_NUM_THREADS=1
# the target stages, the LM rows and 2 rounds of self-training of the target adapter alone
adaptspeech demo output_dir=runs/st/demo threads=1 corpus.workers=1 'baselines={}' 'self_training.systems=[target_adapter]' \
  self_training.rounds=2 self_training.steps_scale=1.5 --only source_adapters,target_adapter,fusion,lm,self_training
# the table again, every round reused (after the fix of the self-trained LM row's cells): results.md / results.json
adaptspeech demo output_dir=runs/st/demo threads=1 corpus.workers=1 'baselines={}' 'self_training.systems=[target_adapter]' \
  self_training.rounds=2 self_training.steps_scale=1.5 --only self_training
