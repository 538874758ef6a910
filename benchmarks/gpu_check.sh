#!/usr/bin/env bash
# The project's GPU checks as one command, on a machine with CUDA — also a *bare* one (a stock
# image with its own Python and torch, no libjpeg-dev, no network):
#
#   benchmarks/gpu_check.sh [--allow-no-gpu] [--setup-only] [--help]
#
# Steps, in this order (a timeout in a late, slow compile arm cannot cost an earlier row):
#   1. CUDA tests                   pytest -m cuda over the test files that hold CUDA tests          80 s
#   2. share of a ViT-S step        device_step.py --skip-compile: eager step, kernels, host syncs,
#                                   share of a ViT-S/16 bf16 training step                           45 s
#   3. device transforms, 4:2:0     device_transforms.py --ops: the per-op table, CPU references     55 s
#   4. device transforms, mixed     device_transforms.py --layouts mix                               25 s
#   5. train quickstart, AMP        2 epochs, bf16 autocast                                          40 s
#   6. device step, compiled        device_step.py --skip-train: T.compile_step (CUDA graphs; then
#                                   inductor's default mode while the run is under 40 s)             70 s
#   7. train quickstart, compile    as 5 with train.compile=true                                     70 s
#   8. train deit_s, sync debug     4 steps of recipes/reference/deit_s.yaml at 64x64, generated
#                                   data, train.compile, the loop under set_sync_debug_mode("error")
#                                   (benchmarks/train_sync_debug.py)                                 95 s
# Step timeouts add up to 480 s (8 min; `timeout -k 5`: a step that ignores SIGTERM is killed 5 s
# later) plus about a minute of setup, so that it can run once and be rerun once in a 15-minute lease.
#
# Output in $OUT (or runs/gpu-check/): summary.txt (what it prints), gpu_check.log (everything),
# steps/NN-name.log (each step's output, written as it runs), steps.jsonl (one line per step, appended
# as the step ends: {"step", "rc", "seconds", "timed_out", "timeout_s"}), each step's JSON rows in
# their own file as the step writes them (device_step_share.json and device_step_compiled.json,
# rewritten after every row; device_transforms_420.json and device_transforms_mix.json, written when
# that script ends: until then its rows are in its log) and the trainings' run directories
# (train-*/metrics.jsonl, a line per epoch; no checkpoints).
# The last line: "gpu_check: all M steps passed" or "gpu_check: N of M steps failed: NAMES".
#
# Exit status: 0 every step passed (or no GPU and --allow-no-gpu); 1 a step failed or timed out, no
# CUDA device, or a GPU that torch does not see; 2 torch cannot be imported, a bad argument, or the
# bundle is missing; 3 setup (building the extension, installing the wheels) failed; 128+N stopped by
# signal N (TERM, INT: the running step is stopped and recorded, and the last line says so).
#
# On a bare machine the extension is built in place (it carries its own libjpeg, third_party/) and
# the missing test dependencies are installed from the wheels in .gpu-bundle/: run
# benchmarks/gpu_prepare.sh first on a networked machine and carry .gpu-bundle with the checkout.
#
# GPU_CHECK_DRY=1 (for tests of this script): no torch probe, no CUDA needed, no setup, and every step's
# command is replaced by `true` (the bookkeeping — steps.jsonl, the summary, the exit status — runs as for real).
set -uo pipefail
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.." || exit 2
SETUP_ONLY=0
ALLOW_NO_GPU=0
DRY=0
[ "${GPU_CHECK_DRY:-0}" = 1 ] && DRY=1
for arg in "$@"; do
  case "$arg" in
    --setup-only) SETUP_ONLY=1 ;;      # build + install only (to try the bare-machine path anywhere)
    --allow-no-gpu) ALLOW_NO_GPU=1 ;;  # no CUDA device at all: say so and exit 0
    -h|--help) sed -n '2,/^set -uo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown argument $arg (use --allow-no-gpu, --setup-only, --help)"; exit 2 ;;
  esac
done
DEST=${OUT:-runs/gpu-check}
mkdir -p "$DEST"
LOG="$DEST/gpu_check.log"
SUMMARY="$DEST/summary.txt"
STEPS_JSONL="$DEST/steps.jsonl"
: >"$LOG"
: >"$SUMMARY"
export PYTHONUNBUFFERED=1
say() { echo "$*" | tee -a "$SUMMARY"; }
PY=${PY:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi

# 0. torch, and a CUDA device it sees (not in a dry run)
if [ $DRY = 0 ]; then
  ERR=$(mktemp)
  PROBE=$("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda or "none", int(torch.cuda.is_available()))' \
    2>"$ERR")
  PROBE_RC=$?
  PROBE_ERR=$(grep -v '^[[:space:]]*$' "$ERR" | tail -1)   # an import's error: the traceback's last line
  PROBE_WARN=$(sed -n 's/^.*Warning: //p' "$ERR" | head -1)  # e.g. "CUDA initialization: The NVIDIA driver ... is too old"
  rm -f "$ERR"
  if [ $PROBE_RC -ne 0 ]; then
    say "gpu_check: cannot import torch with $PY: ${PROBE_ERR:-exit $PROBE_RC}"
    exit 2
  fi
  read -r TORCH_VERSION TORCH_CUDA HAS_CUDA <<<"$(printf '%s\n' "$PROBE" | tail -1)"
  if [ "$HAS_CUDA" != 1 ] && [ $SETUP_ONLY = 0 ]; then
    SMI=none
    GPU_LISTED=0
    if command -v nvidia-smi >/dev/null 2>&1; then
      if SMI_OUT=$(nvidia-smi --query-gpu=driver_version,name --format=csv,noheader 2>&1); then
        SMI=$(printf '%s\n' "$SMI_OUT" | grep -v '^[[:space:]]*$' | paste -sd ';' -)
        if [ -n "$SMI" ]; then GPU_LISTED=1; else SMI="no GPU listed"; fi
      else
        SMI="failed: $(printf '%s\n' "$SMI_OUT" | grep -v '^[[:space:]]*$' | tail -1)"
      fi
    fi
    if [ $GPU_LISTED = 1 ]; then
      say "gpu_check: torch $TORCH_VERSION (torch.version.cuda $TORCH_CUDA); nvidia-smi (driver_version, name):" \
          "$SMI${PROBE_WARN:+; torch says: $PROBE_WARN}"
      say "gpu_check: FAILED: torch does not see the GPU the driver sees (likely a driver too old for the wheel's" \
          "CUDA $TORCH_CUDA)"
      exit 1
    fi
    REASON="gpu_check: no CUDA device (nvidia-smi: $SMI; torch $TORCH_VERSION, CUDA $TORCH_CUDA); pass --allow-no-gpu to exit 0"
    say "$REASON"
    [ $ALLOW_NO_GPU = 1 ] && exit 0
    exit 1
  fi
fi

# 1. the extension and the test dependencies, where they are not installed
t0=$(date +%s)
if [ $DRY = 1 ]; then
  say "setup: skipped (dry run, GPU_CHECK_DRY=1: every step runs \`true\`)"
else
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
  INFO=$("$PY" -c "import torch, dctnet, jpeglib; print('GPU:', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, '| torch', torch.__version__, '| CUDA', torch.version.cuda, '|', dctnet.libjpeg_version(), '|', dctnet.__file__)" 2>>"$LOG") || \
    { say "gpu_check: setup: importing torch, dctnet and jpeglib failed"; tail -5 "$LOG"; exit 3; }
  say "$INFO"
  say "setup: $(( $(date +%s) - t0 )) s"
fi
[ $SETUP_ONLY = 1 ] && exit 0

# 2. the steps: each one's output streams into steps/NN-name.log; one line in steps.jsonl when it ends
mkdir -p "$DEST/steps"
: >"$STEPS_JSONL"
NSTEPS=0
FAILED=()
STEP_PID='' STEP_NAME='' STEP_START=0 STEP_LIMIT=0
json_str() { local s=${1//\\/\\\\}; printf '"%s"' "${s//\"/\\\"}"; }
step() {  # step NAME TIMEOUT_S CMD...: run under timeout, record it, its last lines (STEP_TAIL, 14) in the summary
  local name=$1 limit=$2 keep=${STEP_TAIL:-14}
  shift 2
  NSTEPS=$((NSTEPS + 1))
  local slug out start rc secs timed_out=false status
  slug=$(printf '%s' "$name" | tr -cs '[:alnum:]' '-' | tr '[:upper:]' '[:lower:]')
  out="$DEST/steps/$(printf '%02d' "$NSTEPS")-${slug%-}.log"
  [ $DRY = 1 ] && set -- true
  echo "=== $name (timeout $limit s): $*" >>"$LOG"
  start=$(date +%s)
  STEP_NAME=$name STEP_START=$start STEP_LIMIT=$limit
  # in the background, so that a TERM or INT to this script is handled at once (on_signal) rather than after it
  timeout -k 5 "$limit" "$@" >"$out" 2>&1 &
  STEP_PID=$!
  wait "$STEP_PID"
  rc=$?
  STEP_PID='' STEP_NAME=''
  secs=$(( $(date +%s) - start ))
  cat "$out" >>"$LOG"
  # 124: timeout's TERM; 137: its KILL 5 s later (or an OOM kill: then the step ended before its limit)
  if [ $rc = 124 ] || { [ $rc = 137 ] && [ "$secs" -ge "$limit" ]; }; then timed_out=true; fi
  printf '{"step": %s, "rc": %d, "seconds": %d, "timed_out": %s, "timeout_s": %d}\n' \
    "$(json_str "$name")" "$rc" "$secs" "$timed_out" "$limit" >>"$STEPS_JSONL"
  if [ $rc = 0 ]; then
    status="ok in $secs s"
  elif [ $timed_out = true ]; then
    status="FAILED: timed out after $limit s"
  else
    status="FAILED: exit $rc in $secs s"
  fi
  [ $rc = 0 ] || FAILED+=("$name")
  say "--- $name: $status"
  grep -E "passed|failed|FAILED|error|images/s|ms/batch|us/sample|costs|layouts:|epoch|top1|Error|^(device-step|eager|compiled|kernels|sync-debug|share)" "$out" | \
    tail -"$keep" | tee -a "$SUMMARY"
}

on_signal() {  # on_signal SIG N: this script was stopped: stop the running step, record it, say so, exit 128+N
  trap - TERM INT
  [ -n "$STEP_PID" ] && kill -TERM "$STEP_PID" 2>/dev/null && wait "$STEP_PID" 2>/dev/null
  [ -n "$STEP_NAME" ] && printf '{"step": %s, "rc": %d, "seconds": %d, "timed_out": false, "timeout_s": %d, "interrupted": "%s"}\n' \
    "$(json_str "$STEP_NAME")" $((128 + $2)) $(( $(date +%s) - STEP_START )) "$STEP_LIMIT" "SIG$1" >>"$STEPS_JSONL"
  local done=$NSTEPS where="between steps" names
  if [ -n "$STEP_NAME" ]; then done=$((NSTEPS - 1)); where="in step $NSTEPS, $STEP_NAME"; FAILED+=("$STEP_NAME"); fi
  names=$(printf '%s, ' "${FAILED[@]}")
  say "gpu_check: interrupted (SIG$1) $where after $done finished steps; not passed: ${names%, }"
  exit $((128 + $2))
}
trap 'on_signal TERM 15' TERM
trap 'on_signal INT 2' INT

# only the files that hold CUDA tests: the others may import what a bare machine lacks (nbclient, ...)
mapfile -t CUDA_TESTS < <(grep -l "mark.cuda" tests/test_*.py)
step "CUDA tests" 80 "$PY" -m pytest -q -p no:cacheprovider -m cuda "${CUDA_TESTS[@]}"
# The share of a ViT-S/16 (DCT stem) bf16 training step, before any compile arm: eager step, kernels per step
# at B and B/2, set_sync_debug_mode("error") on the device step, then the share (~5 lines, all kept).
STEP_TAIL=20 step "share of a ViT-S step" 45 "$PY" benchmarks/device_step.py --device cuda --batch 256 --size 224 \
  --skip-compile --json "$DEST/device_step_share.json"
# 4:2:0 with the per-op table (~45 rows; all of them kept in the summary), then the mixed layouts (the step rows)
STEP_TAIL=60 step "device transforms + ops, 4:2:0" 55 "$PY" benchmarks/device_transforms.py --device cuda --batch 256 \
  --size 224 --ops --json "$DEST/device_transforms_420.json"
step "device transforms, mixed layouts" 25 "$PY" benchmarks/device_transforms.py --device cuda --batch 256 --size 224 \
  --layouts mix --json "$DEST/device_transforms_mix.json"
# Training on the GPU: the quickstart recipe (mixed layouts, bf16 autocast), 2 epochs; run directories in $DEST
# without checkpoints (metrics.jsonl, plot.png, recipe.yaml, pipeline.txt: small)
step "train quickstart, AMP" 40 "$PY" -m dctnet train recipes/quickstart.yaml --set optim.epochs=2 \
  --set train.progress=false --set train.checkpoint=false --out "$DEST/train-amp"
# The compile arms. The DeiT device step compiled: T.compile_step with CUDA graphs; inductor's default mode
# only if the run is still under 40 s; its eager rows again as the baseline (~6 lines).
STEP_TAIL=20 step "device step, compiled" 70 "$PY" benchmarks/device_step.py --device cuda --batch 256 --size 224 \
  --skip-train --budget-s 40 --json "$DEST/device_step_compiled.json"
step "train quickstart, AMP + compile" 70 "$PY" -m dctnet train recipes/quickstart.yaml --set optim.epochs=2 \
  --set train.progress=false --set train.checkpoint=false --set train.compile=true --out "$DEST/train-compile"
# DeiT-S (timm, device-rgb, DeiT's augmentation) on generated data at 64², 4 steps of 32 (the compiled device
# step's warm-up batch, then its graph: compiled, recorded, replayed twice), train.compile, the training loop
# under torch.cuda.set_sync_debug_mode("error"): any host sync there fails the step, naming it; so does a
# compiled step that never ran its graph
step "train deit_s 64x64, compile, sync debug" 95 "$PY" benchmarks/train_sync_debug.py recipes/reference/deit_s.yaml \
  data.source=synthetic data.root=.dctnet-data/gpu-check-deit data.synthetic_classes=4 \
  data.synthetic_train_per_class=48 data.synthetic_val_per_class=8 data.image_size=64 \
  data.batch_size=32 optim.epochs=1 train.max_steps=4 train.compile=true train.checkpoint=false train.progress=false \
  "train.out=$DEST/train-deit-sync"

say "total: $(( $(date +%s) - t0 )) s"
if [ ${#FAILED[@]} -gt 0 ]; then
  names=$(printf '%s, ' "${FAILED[@]}")
  say "gpu_check: ${#FAILED[@]} of $NSTEPS steps failed: ${names%, }"
  exit 1
fi
say "gpu_check: all $NSTEPS steps passed"
