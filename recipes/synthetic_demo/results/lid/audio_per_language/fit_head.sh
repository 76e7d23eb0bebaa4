#!/bin/bash
# The hybrid (own hypotheses, char 4-gram, k = 2/3, fitted on dev) on the cached systems' passes of
# /work/studies/lid_text with the posteriors of head $1 swapped in; output folder $2.
set -euo pipefail
HEAD=$1 OUTF=$2
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1 \
    TOKENIZERS_PARALLELISM=false PYTHONPATH=/work/wt/lidaudio
PY="nice -n 5 /work/main/.venv/bin/python /work/wt/lidaudio/recipes/synthetic_demo/lid_text_study.py"
PREP=/work/studies/lid/run/prepared
date -u +"%F %T swap"
$PY --prepared $PREP --output $OUTF --swap-head $HEAD --passes-from /work/studies/lid_text/passes.json
date -u +"%F %T fit"
$PY --prepared $PREP --output $OUTF --fit --orders 4 --top-k 2 3 --lm-fits train
date -u +"%F %T word lists"
$PY --prepared $PREP --output $OUTF --word-lists 10000 --corpus /work/studies/ref/corpus --orders 4 --top-k 2 3
cp $OUTF/lid_text_word_lists.md $OUTF/lid_text_word_lists_10000.md
cp $OUTF/lid_text_word_lists.json $OUTF/lid_text_word_lists_10000.json
date -u +"%F %T done"
