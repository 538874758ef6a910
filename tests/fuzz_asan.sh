#!/usr/bin/env bash
# Build the reader with AddressSanitizer + UBSan into a scratch directory and run the mutation
# fuzzer against it: memory errors that would not crash a normal build abort here.
#   tests/fuzz_asan.sh [CASES] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
CASES=${1:-100000}
SEED=${2:-0}
PY=${PY:-.venv/bin/python}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
mkdir -p "$OUT/dctnet"
cp dctnet/*.py "$OUT/dctnet/"
SUFFIX=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
INC=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
gcc -shared -fPIC -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
    -I"$INC" csrc/module.c csrc/dctjpeg.c csrc/sparse.c -ljpeg -o "$OUT/dctnet/_jpeg$SUFFIX"
# DEEPBIND is incompatible with the sanitizer runtime; leaks are checked by the RSS test instead
# (CPython itself keeps memory alive at exit).
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 DCTNET_NO_DEEPBIND=1 \
LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
PYTHONPATH="$OUT" "$PY" tests/fuzz_reader.py --cases "$CASES" --seed "$SEED"
