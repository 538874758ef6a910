#!/usr/bin/env bash
# The project's GPU checks, as one command for a machine with CUDA: the CUDA-marked tests and the
# device-transform benchmark (images/s for a 256 x 224² batch) and two short training runs (AMP,
# torch.compile). Without a GPU it says so and stops.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check: no CUDA device visible; nothing to run"
  exit 0
fi
"$PY" -c "import torch; print('GPU:', torch.cuda.get_device_name(0), '| torch', torch.__version__)"
"$PY" -m pytest -q -m cuda tests
"$PY" benchmarks/device_transforms.py --device cuda --batch 256 --size 224
# Training on the GPU: the quickstart recipe (bf16 autocast, then torch.compile), 2 epochs each.
"$PY" -m dctnet train recipes/quickstart.yaml --set optim.epochs=2 --set train.progress=false --out runs/gpu-check-amp
"$PY" -m dctnet train recipes/quickstart.yaml --set optim.epochs=2 --set train.progress=false --set train.compile=true \
  --out runs/gpu-check-compile
