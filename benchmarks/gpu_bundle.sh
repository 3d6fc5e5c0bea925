#!/usr/bin/env bash
# The folder a GPU machine without network access needs for issue 37's GPU check (item 5): the race's
# pieces, OpenNMT-py's vocabulary of them, OpenNMT-py 3.5.1 and what it imports as wheels for that
# machine's Python, and run.sh (test_cuda.py, then benchmarks/gpu_race.py). Built here, carried there.
#
#   bash benchmarks/gpu_bundle.sh DATA VOCAB [BUNDLE] [PYVER]
#     DATA: a peer_race.py data folder (exp/race-tf/data); VOCAB: a folder with OpenNMT-py's
#     vocab.en / vocab.es of those pieces (a race's opennmt/vocab); BUNDLE: default gpu;
#     PYVER: the GPU machine's Python, default 3.12
#   there, from the repository root:  OUT=results-folder bash BUNDLE/run.sh
#
# spacy (imported at the top of OpenNMT-py's terminology transform, which the race never uses) is
# replaced by a module whose load() fails: its wheel and dependencies are ~60 MB more to carry.
set -euo pipefail
data=${1:?DATA folder}; vocab=${2:?VOCAB folder}; bundle=${3:-gpu}; pyver=${4:-3.12}
mkdir -p "$bundle/whl" "$bundle/data" "$bundle/vocab" "$bundle/spacy_stub/spacy"
python -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$bundle/whl" \
  OpenNMT-py==3.5.1 configargparse fasttext-wheel pyahocorasick pyonmttok rapidfuzz sacremoses
for f in train.en train.es train.sp.en train.sp.es dev.en dev.es dev.sp.en dev.sp.es spm.en.model spm.es.model; do
  cp "$data/$f" "$bundle/data/"
done
cp "$vocab/vocab.en" "$vocab/vocab.es" "$bundle/vocab/"
cat > "$bundle/spacy_stub/spacy/__init__.py" <<'PY'
"""Stand-in for spacy: OpenNMT-py 3.5.1 imports it at the top of its terminology transform, which
the race never uses. Any use fails loudly."""


def load(*args, **kwargs):
    raise ImportError("spacy is not installed on this machine (stand-in for an unused import)")
PY
cat > "$bundle/run.sh" <<'RUN'
# issue 37 item 5: the CUDA tests, then attnmt's and OpenNMT-py 3.5.1's trainers on this GPU in turn
# (run from the repository root; results in $OUT)
export PYTHONUNBUFFERED=1
B=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd); R=/tmp/race; mkdir -p $R $OUT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/smi.txt 2>&1; cat $OUT/smi.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $B/whl/*.whl > $OUT/pip.log 2>&1 || { echo "pip failed"; tail -5 $OUT/pip.log; }
export PYTHONPATH=/tmp/site:$B/spacy_stub
python3 -c "import torch, onmt.bin.train, sacremoses; print('torch', torch.__version__, torch.cuda.get_device_name(0), 'onmt ok')" 2>&1 | tail -2
timeout ${TESTS_S:-150} python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py > $OUT/cuda_tests.log 2>&1; echo "cuda tests rc $?"; tail -12 $OUT/cuda_tests.log
timeout ${RACE_S:-420} python3 benchmarks/gpu_race.py --data $B/data --vocab $B/vocab --budget ${BUDGET:-150} --size 512 --batch 8192 --out $R ${RACE_ARGS:-} > $OUT/race.json 2> $OUT/race.err; echo "race rc $?"; cat $OUT/race.json; tail -5 $OUT/race.err
cp $R/attnmt.train.log $OUT/ 2>/dev/null; cp $R/opennmt/train.log $OUT/opennmt.train.log 2>/dev/null; cp $R/attnmt/log.jsonl $OUT/attnmt.log.jsonl 2>/dev/null
RUN
du -sh "$bundle"
