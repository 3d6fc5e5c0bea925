#!/bin/sh
# Every run behind docs/results/window_attention.md, in the order they are worth running: the NMT
# comparison (seed 1, then seeds 2-3 of the main rows), the LM and classification tasks over all
# variants and seeds, the longer classification runs, then the window statistics and the tables.
# One training per call; finished runs are skipped on a restart, so the script can be stopped and
# started again (two copies may run side by side only on disjoint --only lists).
set -e
cd "$(dirname "$0")/.."
Q="python experiments/window_attention.py"
[ -f exp/window_attention/data/domains/train.tsv ] || $Q classify-data   # needs data/bible, data/domains
$Q nmt
$Q nmt --seed 2 --only transformer window-add-seg relative localness window-mul-seg window-add-seg-all
$Q nmt --seed 3 --only transformer window-add-seg relative localness window-mul-seg window-add-seg-all
$Q classify
$Q classify --seed 2
$Q classify --seed 3
$Q classify --steps 1000 --only standard window-add-seg window-add
$Q lm
$Q lm --seed 2 --only standard window-add-seg localness window-add
$Q windows
$Q report
