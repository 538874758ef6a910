#!/usr/bin/env bash
# Gather, on a machine with network access, what benchmarks/gpu_check.sh needs on a *bare* GPU
# machine (its own Python 3.12 and torch, no network), into the ignored folder .gpu-bundle/ that
# travels with the checkout (name it in the device run's `carry`):
#   .gpu-bundle/wheels/  Python 3.12 wheels of the test dependencies that machine lacks
# (libjpeg is not needed: the extension builds its own from third_party/libjpeg-turbo)
# Run from anywhere:  benchmarks/gpu_prepare.sh      (about 5 MB; a few seconds)
set -euo pipefail
cd "$(dirname "$0")/.."
B=.gpu-bundle
rm -rf "$B" && mkdir -p "$B/wheels"
grep -qx '/.gpu-bundle/' .git/info/exclude 2>/dev/null || echo '/.gpu-bundle/' >> .git/info/exclude
# wheels: only what the GPU image lacks (it has torch, torchvision, numpy, pillow, timm, pyyaml,
# tqdm, matplotlib and pytest); jpeglib is the tests' libjpeg oracle
PLAT="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT \
  -d "$B/wheels" "jpeglib>=1.0"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d "$B/wheels" webdataset
du -sh "$B"
ls "$B/wheels"
