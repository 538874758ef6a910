# dctnet — the README's commands. Everything installs into .venv; no system package is needed (the
# extension builds its own libjpeg from third_party/libjpeg-turbo) and nothing needs root.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.dctnet-installed
PYTEST_ARGS ?=
# two pytest workers (pytest-xdist), a test file each at a time, one torch thread each: the suite is
# mostly single-threaded work, so two workers use the two cores CI has instead of one
TEST_WORKERS ?= 2

.PHONY: setup test demo bench evidence fuzz clean

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py $(wildcard csrc/*.c csrc/*.h csrc/xxhash/*.[ch] third_party/libjpeg-turbo/*.[ch])
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	# torch/torchvision pinned to the builds that lie on local disk (a different pin downloads GBs)
	$(VPY) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(VPY) -m pip install -q "setuptools>=64" wheel
	$(VPY) -m pip install -q --no-build-isolation -e ".[test]"
	@touch $@

# lint first (ruff: pyflakes and pycodestyle, pyproject.toml's [tool.ruff]), then the suite
test: setup
	$(VPY) -m ruff check dctnet tests benchmarks
	OMP_NUM_THREADS=1 $(VPY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not cuda" --durations=15 $(PYTEST_ARGS)

# The main job: generate a small labelled JPEG dataset and train a DCT-stem ResNet-18 on it.
demo: setup
	$(VPY) -m dctnet train recipes/quickstart.yaml

bench: setup
	$(VPY) benchmarks/decode.py
	$(VPY) benchmarks/loader.py
	$(VPY) benchmarks/cache.py
	$(VPY) benchmarks/stems.py

evidence: setup
	$(VPY) benchmarks/train_imagenette.py --readme

fuzz: setup
	PY=$(VPY) tests/fuzz_asan.sh 200000 100000

clean:
	rm -rf build *.egg-info dctnet/*.so $(VENV)
