#!/bin/sh
# The planned order of the window-attention experiments (docs/results/window_attention.md): the
# core NMT comparison first, then a first pass over the LM and classification tasks, then the
# remaining variants. One training at a time; finished runs are skipped on a restart, so the
# script can be stopped and started again. classify-data (deterministic, seed 1) must have run
# once before classify.
set -e
cd "$(dirname "$0")/.."
Q="python experiments/window_attention.py"
$Q nmt --only transformer window-add-seg relative localness window-mul-seg
[ -f /work/exp/window_attention/data/domains/train.tsv ] || $Q classify-data
$Q classify --only standard window-add-seg relative localness
$Q lm --only standard window-add-seg
$Q nmt
$Q lm --only relative localness window-mul-seg
$Q classify
$Q lm
