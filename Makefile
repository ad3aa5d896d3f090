# tfsmith — the user's entry points. Every target installs what it needs itself.
#   make build        detect this host and build the TensorFlow image fitted to it (the main job)
#   make test         the whole test suite (unit, real-engine, end-to-end)
#   make dockerfiles  regenerate the canonical build contexts in dockerfiles/
#   make bench        side-by-side runtime benchmark (table, JSON, chart)
#   make demo         the five-minute tour: detect, train, optimize, package, smoke-test, bench

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TFSMITH := $(VENV)/bin/tfsmith
EXTRAS ?= optimize,serve,bench,dev
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: build test unit dockerfiles bench demo engine venv clean help

help:
	@sed -n '2,7p' Makefile

# --- set-up -----------------------------------------------------------------------------------------
$(VENV)/.installed: pyproject.toml
	@echo "==> Python environment in $(VENV) (extras: $(EXTRAS))"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	@touch $@

venv: $(VENV)/.installed

# A Docker engine started by hand (installs docker.io + debootstrap when missing) and a local base image.
engine: venv
	@$(PY) -c "from builder.engine.local import ensure_engine, ensure_base_image; ensure_engine(say=print); ensure_base_image(say=print)"

# --- the jobs ---------------------------------------------------------------------------------------
# make build [TARGET=host] [WHEEL=path/to/tensorflow*.whl | WHEEL=pypi] [BUILD_FLAGS="--push REG ..."]
# From source (the default) the TensorFlow wheel is compiled for this host: ~14k actions, many hours on few
# cores (tfsmith prints its estimate first) and it needs GitHub; where GitHub is unreachable it stops at once.
# WHEEL=... builds the runtime image from a prebuilt wheel in minutes (WHEEL=pypi: PyPI's stock CPU wheel).
TARGET ?= host
WHEEL ?=
BASE_IMAGE ?= tfsmith/python:bookworm
BASE_PYTHON ?= 3.11
BUILD_FLAGS ?=
build: engine
	@$(TFSMITH) detect
	@set -e; wheel="$(WHEEL)"; \
	if [ "$$wheel" = pypi ]; then \
	  echo "==> WHEEL=pypi: downloading PyPI's tensorflow-cpu 2.21 wheel for Python $(BASE_PYTHON) (the base image's)"; \
	  $(PY) -m pip download -q --no-deps --only-binary=:all: --python-version $(BASE_PYTHON) \
	    --platform manylinux_2_27_$$(uname -m) --dest .tfsmith/wheels "tensorflow-cpu==2.21.*"; \
	  wheel=$$(ls -t .tfsmith/wheels/tensorflow_cpu-2.21.*.whl | head -n1); \
	fi; \
	if [ -n "$$wheel" ]; then \
	  echo "==> building the $(TARGET) runtime image from $$wheel"; \
	  $(TFSMITH) build --target $(TARGET) --base-image $(BASE_IMAGE) --wheel "$$wheel" $(BUILD_FLAGS); \
	else \
	  echo "==> building TensorFlow from source for $(TARGET) (Python $(BASE_PYTHON), runtime base $(BASE_IMAGE))"; \
	  $(TFSMITH) build --target $(TARGET) --base-image $(BASE_IMAGE) --python $(BASE_PYTHON) $(BUILD_FLAGS) \
	  || { echo "make: no from-source build here; the runnable path is: make build WHEEL=pypi (or WHEEL=path/to.whl)" >&2; exit 2; }; \
	fi

test: engine
	@set +e; $(PY) -m pytest tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; exit 0; fi; exit $$rc

unit: venv
	@$(PY) -m pytest tests/unit -q

dockerfiles: venv
	@$(TFSMITH) dockerfiles --out dockerfiles

# Every runtime side by side (2 threads): the example digits CNN (trained, real accuracy) and MobileNetV2
# (random weights, latency only). Table on the terminal; bench.json / bench.md / bench.png in build/bench/.
BENCH_OUT ?= build/bench
BENCH_THREADS ?= 2
bench: venv
	@$(TFSMITH) example --out $(BENCH_OUT)/example
	@$(TFSMITH) bench $(BENCH_OUT)/example/digits_cnn.keras --data $(BENCH_OUT)/example/digits.npz \
		--threads $(BENCH_THREADS) --budget-s 60 --out $(BENCH_OUT)/digits_cnn
	@$(TFSMITH) bench mobilenet_v2 --threads $(BENCH_THREADS) --budget-s 120 --out $(BENCH_OUT)/mobilenet_v2

# The five-minute tour, each step short and saying where its artifacts are (all under $(DEMO_OUT)/).
DEMO_OUT ?= build/demo
demo: engine
	@echo; echo "==> 1/5 this host: what tfsmith detects"
	@$(TFSMITH) detect
	@echo; echo "==> 2/5 train the example model (small CNN on scikit-learn's bundled digits; no download)"
	@$(TFSMITH) example --out $(DEMO_OUT)/example
	@echo; echo "==> 3/5 optimize it for this host (--recipe auto): prune, quantize, export, evaluate"
	@$(TFSMITH) optimize $(DEMO_OUT)/example/digits_cnn.keras --data $(DEMO_OUT)/example/digits.npz \
		--recipe auto --out $(DEMO_OUT)/optimized
	@echo; echo "==> 4/5 package the chosen .tflite into a LiteRT serving image and smoke-test it with real requests"
	@$(TFSMITH) package $(DEMO_OUT)/optimized --runtime litert --smoke
	@echo; echo "==> 5/5 the optimized artifacts against the runtimes you would otherwise use (2 threads)"
	@$(TFSMITH) bench $(DEMO_OUT)/optimized --data $(DEMO_OUT)/example/digits.npz --threads 2 --budget-s 20 \
		--out $(DEMO_OUT)/bench
	@echo; echo "demo done: model $(DEMO_OUT)/example, artifacts + report $(DEMO_OUT)/optimized, bench $(DEMO_OUT)/bench"

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
