#!/usr/bin/env bash
# The project's GPU checks, as one command for a machine with CUDA: the CUDA-marked tests and the
# device-transform benchmark (images/s for a 256 x 224² batch). Without a GPU it says so and stops.
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
