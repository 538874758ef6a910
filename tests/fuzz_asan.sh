#!/usr/bin/env bash
# Build the C extension with AddressSanitizer + UBSan into a scratch directory and run the
# mutation fuzzers against it: memory errors that would not crash a normal build abort here.
#   tests/fuzz_asan.sh [JPEG_CASES] [CACHE_CASES] [SEED]
# JPEG_CASES mutated JPEGs through the reader (tests/fuzz_reader.py), then CACHE_CASES tampered
# caches opened and read (tests/fuzz_cache.py). Either count may be 0 to skip that fuzzer.
set -euo pipefail
cd "$(dirname "$0")/.."
JPEG_CASES=${1:-200000}
CACHE_CASES=${2:-100000}
SEED=${3:-0}
PY=${PY:-.venv/bin/python}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# the whole package (pure Python) beside a sanitized build of its extension
mkdir -p "$OUT/dctnet"
(cd dctnet && find . -name '*.py' -print0 | xargs -0 -I{} cp --parents {} "$OUT/dctnet/")
SUFFIX=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
INC=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
# the same sources and flags as setup.py (crop.c needs -ffp-contract=off), plus the sanitizers — the
# vendored libjpeg included, so its decoder runs sanitized too
LIBJPEG=third_party/libjpeg-turbo
LIBJPEG_SOURCES=$(ls $LIBJPEG/*.c | grep -v -E '/(jdcolext|jdcol565|jdmrgext|jdmrg565|jstdhuff)\.c$')
gcc -shared -fPIC -O1 -g -std=gnu11 -ffp-contract=off -fno-omit-frame-pointer -fsanitize=address,undefined \
    -fno-sanitize-recover=all -I"$INC" -I$LIBJPEG csrc/*.c $LIBJPEG_SOURCES -lm \
    -o "$OUT/dctnet/_jpeg$SUFFIX"
# leaks are checked by the RSS tests instead (CPython itself keeps memory alive at exit)
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export PYTHONPATH="$OUT"
PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
LD_PRELOAD="$PRELOAD" "$PY" -P -c "import dctnet, sys; sys.exit(0 if dctnet.__file__.startswith('$OUT') else 'sanitized build not picked up')"
if [ "$JPEG_CASES" -gt 0 ]; then
  LD_PRELOAD="$PRELOAD" "$PY" tests/fuzz_reader.py --cases "$JPEG_CASES" --seed "$SEED"
fi
if [ "$CACHE_CASES" -gt 0 ]; then
  LD_PRELOAD="$PRELOAD" "$PY" tests/fuzz_cache.py --cases "$CACHE_CASES" --seed "$SEED"
fi
