#!/usr/bin/env bash
# The project's GPU checks as one command, on a machine with CUDA — also a *bare* one (a stock
# image with its own Python and torch, no libjpeg-dev, no network): the CUDA-marked tests, the
# device-transform benchmark for 4:2:0 with its per-op table (every op, policy and the DeiT list,
# beside timm's / torchvision's one-core CPU cost) and for a realistic mix of layouts, the DeiT device
# step eager vs compiled (kernels, host syncs, share of a ViT-S step), and two short trainings (bf16
# AMP, then torch.compile). Writes a summary (and the full log) to $OUT, or runs/gpu-check/.
#
# On a bare machine the extension is built in place (it carries its own libjpeg, third_party/) and
# the missing test dependencies are installed from the wheels in .gpu-bundle/: run
# benchmarks/gpu_prepare.sh first on a networked machine and carry .gpu-bundle with the checkout.
# Budget: about 9 minutes of step timeouts (545 s) plus setup, so that it can run once and be rerun once
# in a 15-minute lease (most steps finish well inside their timeouts).
set -uo pipefail
cd "$(dirname "$0")/.."
DEST=${OUT:-runs/gpu-check}
mkdir -p "$DEST"
LOG="$DEST/gpu_check.log"
SUMMARY="$DEST/summary.txt"
: >"$LOG"
: >"$SUMMARY"
export PYTHONUNBUFFERED=1
say() { echo "$*" | tee -a "$SUMMARY"; }
PY=${PY:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
SETUP_ONLY=0
[ "${1:-}" = "--setup-only" ] && SETUP_ONLY=1  # build + install only (to try the bare-machine path anywhere)
if [ $SETUP_ONLY = 0 ] && ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  say "gpu_check: no CUDA device visible; nothing to run"
  exit 0
fi

# 1. the extension and the test dependencies, where they are not installed
t0=$(date +%s)
if ! "$PY" -c "import dctnet._jpeg" 2>/dev/null; then
  B="$PWD/.gpu-bundle"
  if [ ! -d "$B/wheels" ]; then
    say "gpu_check: dctnet is not built here and .gpu-bundle/ is missing: run benchmarks/gpu_prepare.sh on a" \
        "networked machine and carry .gpu-bundle"
    exit 2
  fi
  "$PY" setup.py -q build_ext --inplace >>"$LOG" 2>&1 || { say "gpu_check: building the extension failed"; tail -30 "$LOG"; exit 3; }
  SITE=/tmp/dctnet-site
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$B"/wheels/*.whl >>"$LOG" 2>&1 || \
    { say "gpu_check: installing the carried wheels failed"; tail -30 "$LOG"; exit 3; }
  export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
say "$("$PY" -c "import torch, dctnet, jpeglib; print('GPU:', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, '| torch', torch.__version__, '|', dctnet.libjpeg_version(), '|', dctnet.__file__)")"
say "setup: $(( $(date +%s) - t0 )) s"
[ $SETUP_ONLY = 1 ] && exit 0

step() {  # step NAME TIMEOUT_S CMD...: run, keep its output in the log, its last lines (STEP_TAIL, 14) in the summary
  local name=$1 limit=$2 keep=${STEP_TAIL:-14}
  shift 2
  local s=$(date +%s)
  echo "=== $name" >>"$LOG"
  timeout "$limit" "$@" >"$DEST/step.out" 2>&1
  local rc=$?
  cat "$DEST/step.out" >>"$LOG"
  say "--- $name: exit $rc in $(( $(date +%s) - s )) s"
  grep -E "passed|failed|error|images/s|ms/batch|us/sample|costs|layouts:|epoch|top1|Error|^(device-step|eager|compiled|kernels|sync-debug|share)" "$DEST/step.out" | \
    tail -"$keep" | tee -a "$SUMMARY"
  rm -f "$DEST/step.out"
}

# Timeouts were trimmed (tests 150 -> 120, 4:2:0 75 -> 70, mixed 45 -> 40, trainings 100 -> 80 and 120 -> 105 s)
# to make room for the device-step check (130 s) within about 9 minutes.
# only the files that hold CUDA tests: the others may import what a bare machine lacks (nbclient, ...)
step "CUDA tests" 120 "$PY" -m pytest -q -p no:cacheprovider -m cuda $(grep -l "mark.cuda" tests/test_*.py)
# 4:2:0 with the per-op table (~45 rows; all of them kept in the summary, the JSON beside it), then the mixed layouts
# (the step rows only). Timeouts: 70 + 40 s (120 s before the device-step check came).
STEP_TAIL=60 step "device transforms + ops, 4:2:0" 70 "$PY" benchmarks/device_transforms.py --device cuda --batch 256 \
  --size 224 --ops --json "$DEST/device_transforms.json"
step "device transforms, mixed layouts" 40 "$PY" benchmarks/device_transforms.py --device cuda --batch 256 --size 224 \
  --layouts mix
# The DeiT device step (bicubic crop + DeiT list): eager vs T.compile_step (CUDA graphs; inductor's default mode only
# if the run is still under 60 s), kernels per step at B and B/2, set_sync_debug_mode("error"), share of a ViT-S/16
# (DCT stem) bf16 training step. ~8 lines, all kept; its rows in device_step.json.
STEP_TAIL=20 step "device step, eager vs compiled" 130 "$PY" benchmarks/device_step.py --device cuda --batch 256 \
  --size 224 --budget-s 60 --json "$DEST/device_step.json"
# Training on the GPU: the quickstart recipe (mixed layouts; bf16 autocast, then torch.compile), 2 epochs each.
# Run directories stay out of $OUT (checkpoints are large; only the summary and the log travel back).
step "train quickstart, AMP" 80 "$PY" -m dctnet train recipes/quickstart.yaml --set optim.epochs=2 \
  --set train.progress=false --out runs/gpu-check-amp
step "train quickstart, AMP + compile" 105 "$PY" -m dctnet train recipes/quickstart.yaml --set optim.epochs=2 \
  --set train.progress=false --set train.compile=true --out runs/gpu-check-compile
say "total: $(( $(date +%s) - t0 )) s"
