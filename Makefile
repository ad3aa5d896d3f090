# tfsmith — the user's entry points. Every target installs what it needs itself.
#   make build        detect this host and build the TensorFlow image fitted to it (the main job)
#   make test         the whole test suite (unit, real-engine, end-to-end)
#   make test-quick   unit tests and the fast end-to-end ones: the inner loop
#   make dockerfiles  regenerate the canonical build contexts in dockerfiles/
#   make bench        side-by-side runtime benchmark (table, JSON, chart)
#   make demo         the five-minute tour: detect, train, optimize, package, smoke-test, bench
#   make docs         the documentation site (strict: a broken link or a page outside the navigation fails)

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TFSMITH := $(VENV)/bin/tfsmith
EXTRAS ?= optimize,serve,bench,dev,docs
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: build test test-quick unit dockerfiles bench demo engine venv clean help mlserver-venv

help:
	@sed -n '2,8p' Makefile

# --- set-up -----------------------------------------------------------------------------------------
$(VENV)/.installed: pyproject.toml
	@echo "==> Python environment in $(VENV) (extras: $(EXTRAS))"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	@# matplotlib builds its font cache on first import (it runs fc-list); done here, not inside a test
	@MPLBACKEND=Agg $(PY) -c "import matplotlib.pyplot"
	@touch $@

venv: $(VENV)/.installed

# A Docker engine started by hand (installs docker.io + debootstrap when missing) and a local base image.
engine: venv
	@$(PY) -c "from builder.engine.local import ensure_engine, ensure_base_image; ensure_engine(say=print); ensure_base_image(say=print)"

# --- the jobs ---------------------------------------------------------------------------------------
# make build [TARGET=host] [CUDA_CC=none|auto|8.0,9.0] [WHEEL=path/to/tensorflow*.whl | WHEEL=pypi]
#            [SOURCE_FALLBACK=pypi|none] [MODEL=model.keras DATA=data.npz] [BUILD_FLAGS="--push REG ..."]
# 1. detect this host; 2. the TensorFlow image for TARGET, compiled from source (~14k actions, many hours on
# few cores: tfsmith prints its estimate first; needs GitHub); 3. optimize MODEL for TARGET (default: the
# example digits CNN); 4. package it into a serving image and smoke-test it with the original model's requests:
# a slim LiteRT image for a .tflite (OpenVINO for OpenVINO's IR), or FROM the step-2 TensorFlow image when the
# chosen artifact runs on TensorFlow (a SavedModel: GPU targets, string inputs, recurrent layers; a Select-TF-ops .tflite).
# GPUs: with CUDA_CC unset, TARGET=host on a host with NVIDIA GPUs builds for them (CPU-only where the driver
# is too old for TensorFlow's CUDA); CUDA_CC=none builds CPU-only. Steps 2-4 get the same CUDA_CC, so the image,
# the artifact optimize chooses for it and the serving image's base agree.
# Where the TensorFlow source cannot be fetched, `tfsmith build` stops at once (exit 4) naming --tf-source and
# --wheel; make build then says so and, unless SOURCE_FALLBACK=none, builds the runtime image from PyPI's
# stock wheel instead (labelled as a prebuilt wheel, NOT compiled for this host) so the rest still runs.
TARGET ?= host
CUDA_CC ?=
cuda_flag := $(if $(CUDA_CC),--cuda-cc $(CUDA_CC))
WHEEL ?=
SOURCE_FALLBACK ?= pypi
BASE_IMAGE ?= tfsmith/python:bookworm
BASE_PYTHON ?= 3.11
BUILD_FLAGS ?=
BUILD_OUT ?= build/host
SERVE_BASE_IMAGE ?=
MODEL ?=
DATA ?=
WHEEL_DIR := .tfsmith/wheels
define pypi_wheel
	echo "==> downloading PyPI's stock TensorFlow 2.21 wheel for Python $(BASE_PYTHON) on $$arch (the base image's)"; \
	dist=tensorflow-cpu; if [ "$$arch" = aarch64 ] || [ "$$kind" = cuda ]; then dist=tensorflow; fi; \
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version $(BASE_PYTHON) \
	  --platform manylinux_2_27_$$arch --dest $(WHEEL_DIR) "$$dist==2.21.*"; \
	wheel=$$(ls -t $(WHEEL_DIR)/$${dist//-/_}-2.21.*$$arch.whl | head -n1)
endef
# The target's CPU family decides the wheel and the base image: an ARM target built on x86 runs under QEMU
# (`tfsmith engine-up --arch arm64` installs it and bootstraps the arm64 base, once); a CUDA target (`kind`)
# needs the `tensorflow` wheel, not `tensorflow-cpu`.
define target_arch
	info=$$($(TFSMITH) target $(TARGET) $(cuda_flag) --json | \
	  $(PY) -c 'import json, sys; t = json.load(sys.stdin); print(t["arch"], "cuda" if t["cuda"] else "cpu")'); \
	arch=$${info% *}; kind=$${info#* }; \
	base="$(BASE_IMAGE)"; \
	if [ "$$arch" != "$$(uname -m)" ]; then \
	  $(TFSMITH) engine-up --arch $$arch; \
	  if [ "$$base" = tfsmith/python:bookworm ]; then base=tfsmith/python:bookworm-$${arch/aarch64/arm64}; fi; \
	fi
endef

build: engine
	@echo "==> 1/4 this host"
	@$(TFSMITH) detect
	@set -e; $(target_arch); wheel="$(WHEEL)"; source_note="compiled from source for $(TARGET)"; \
	if [ "$$wheel" = pypi ]; then $(pypi_wheel); source_note="PyPI stock wheel (WHEEL=pypi)"; fi; \
	echo; \
	if [ -z "$$wheel" ]; then \
	  echo "==> 2/4 TensorFlow from source for $(TARGET), $$kind (Python $(BASE_PYTHON), runtime base $(BASE_IMAGE))"; \
	  set +e; $(TFSMITH) build --target $(TARGET) $(cuda_flag) --base-image $$base --python $(BASE_PYTHON) $(BUILD_FLAGS); rc=$$?; set -e; \
	  if [ $$rc -eq 4 ] && [ "$(SOURCE_FALLBACK)" = pypi ]; then \
	    echo "==> the TensorFlow source cannot be fetched from here (above). Falling back to PyPI's stock wheel:"; \
	    echo "    the image runs everywhere the stock wheel does but is NOT compiled for $(TARGET)."; \
	    echo "    For a host-optimized build: make build BUILD_FLAGS='--tf-source DIR', or SOURCE_FALLBACK=none to stop here."; \
	    $(pypi_wheel); source_note="PyPI stock wheel (fallback: TensorFlow source unreachable)"; \
	  elif [ $$rc -ne 0 ]; then exit $$rc; fi; \
	fi; \
	if [ -n "$$wheel" ]; then \
	  echo "==> 2/4 the $(TARGET) runtime image ($$kind) from $$wheel"; \
	  $(TFSMITH) build --target $(TARGET) $(cuda_flag) --base-image $$base --python $(BASE_PYTHON) --wheel "$$wheel" $(BUILD_FLAGS); \
	fi; \
	mkdir -p .tfsmith; echo "$$source_note" > .tfsmith/tf-image.source
	@set -e; model="$(MODEL)"; data="$(DATA)"; \
	if [ -z "$$model" ]; then \
	  echo; echo "==> 3/4 no MODEL given: training the example model (digits CNN, scikit-learn's bundled data)"; \
	  $(TFSMITH) example --out $(BUILD_OUT)/example; \
	  model=$(BUILD_OUT)/example/digits_cnn.keras; data=$(BUILD_OUT)/example/digits.npz; \
	else echo; echo "==> 3/4 optimizing $$model"; fi; \
	rm -rf $(BUILD_OUT)/optimized; \
	$(TFSMITH) optimize "$$model" --data "$$data" --recipe auto --target $(TARGET) $(cuda_flag) --out $(BUILD_OUT)/optimized
	@echo; echo "==> 4/4 packaging the chosen artifact into a serving image (LiteRT or OpenVINO on a slim base, or FROM the step-2 TensorFlow image when it runs on TensorFlow), smoke-tested with real requests"
	@$(TFSMITH) package $(BUILD_OUT)/optimized --target $(TARGET) $(cuda_flag) $(if $(SERVE_BASE_IMAGE),--base-image $(SERVE_BASE_IMAGE)) --smoke
	@echo; echo "make build done:"; \
	echo "  TensorFlow image  $$(cat .tfsmith/tf-image.source)  (docker images tfsmith/tensorflow)"; \
	echo "  optimized model   $(BUILD_OUT)/optimized (report.md, report.json, plot)"; \
	echo "  serving image     docker images 'tfsmith/serve-*'"

# The suite runs in TEST_WORKERS processes (pytest-xdist). A unit — a test file, or a group of its tests that alone
# need one image (tests/conftest.py: GROUPS) — runs whole in one of them, so its module fixtures are made once;
# units go out longest first (FIRST: every unit of a minute or more, as a cold run timed them), to whichever worker
# is free, so the short ones are left for the end. What several units prepare alike is prepared once per run under
# a lock (tests/locks.py). At the end: the 30 slowest tests, each worker's busy time, when it ran dry and its last
# unit, and the units that took longest. TEST_WORKERS=0 runs it in this one process.
TEST_WORKERS ?= 2
test: engine
	@set +e; $(PY) -m pytest tests $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder) \
		--durations=30; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; exit 0; fi; exit $$rc

# The inner loop (about 2 minutes on 2 cores): the unit tests and the command-line end-to-end tests that need
# neither TensorFlow, a Docker engine nor a server; `make test` stays the whole suite, and what CI runs.
QUICK_E2E := tests/e2e/test_detect_cli.py tests/e2e/test_matrix_cli.py tests/e2e/test_deploy_cli.py \
	tests/e2e/test_settings_cli.py tests/e2e/test_dockerfiles.py
test-quick: venv
	@set +e; $(PY) -m pytest tests/unit $(QUICK_E2E) -m "not tf and not engine and not slow" -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; exit 0; fi; exit $$rc

unit: venv
	@$(PY) -m pytest tests/unit -q

dockerfiles: venv
	@$(TFSMITH) dockerfiles --out dockerfiles

# Every runtime side by side (2 threads): the example digits CNN (trained, real accuracy), then MobileNetV2 and
# ResNet50 (random weights, latency only) through `tfsmith optimize --recipe auto` and `tfsmith bench`: what
# optimize chose against the fastest runtime bench finds; then the server against its peers (serve_peers) and
# on the cores of this host (serve_scaling: per-request dispatch against balanced one-process servers, the
# model alone, --processes auto against the configurations it could have chosen, the server's CPU per request,
# one client and busy, beside its front alone answering a fixed body; then 38 generated models through
# optimize -> serve -> REST/gRPC/v2 compared with the originals (model_sweep, about 40 minutes on 2 cores), and 36
# through `optimize --recipe auto`, counting what became of pruning and of every optional step (each ends with a
# line saying why); the signature lattice, every dtype x rank x protocol cell (cell_sweep: LATTICE_CELLS=928, about
# 12 s a cell on 2 idle cores, so hours; LATTICE_CELLS=40 for a sample);
# on 8 CPUs or more the servers get three quarters of them and the load generator the rest); last, the real-size
# zoo through optimize under GNU time -v (real_size: BERT-base/large, ViT-B/16, EfficientNet-B0, ResNet50,
# wide-and-deep 1M and 10M rows; REAL_SIZE_MODELS=a,b for a subset, REAL_SIZE_LIMIT=9G for a memory cgroup each). bench_goals judges
# tfsmith's own speed goals (outside the package); the target fails when one is missed. Tables on the terminal; JSON, markdown, charts in build/bench/.
BENCH_OUT ?= build/bench
BENCH_THREADS ?= 2
LATTICE_CELLS ?= 928
bench: venv mlserver-venv
	@$(TFSMITH) example --out $(BENCH_OUT)/example
	@$(TFSMITH) bench $(BENCH_OUT)/example/digits_cnn.keras --data $(BENCH_OUT)/example/digits.npz \
		--threads $(BENCH_THREADS) --budget-s 45 --out $(BENCH_OUT)/example_bench
	@$(PY) -m tests.benchmarks.deploy_choice --models mobilenet_v2,resnet50 --threads $(BENCH_THREADS) \
		--budget-s 60 --out $(BENCH_OUT)/deploy_choice; deploy=$$?; \
	$(PY) -m tests.benchmarks.bench_goals $(BENCH_OUT)/example_bench \
		$(BENCH_OUT)/deploy_choice/mobilenet_v2/bench $(BENCH_OUT)/deploy_choice/resnet50/bench; goals=$$?; \
	serving=0; $(PY) -m tests.benchmarks.serve_peers --rounds 3 --out $(BENCH_OUT)/serve_peers --judge \
		$$(test -f $(MLSERVER_VENV)/.installed && echo --mlserver-python $(MLSERVER_VENV)/bin/python) || serving=1; \
	scaling=0; $(PY) -m tests.benchmarks.serve_scaling --out $(BENCH_OUT)/serve_scaling --judge || scaling=1; \
	models=0; $(PY) -m tests.benchmarks.model_sweep --count 38 --seed 1 --keep $(BENCH_OUT)/model_sweep || models=1; \
	$(PY) -m tests.benchmarks.model_sweep --count 36 --seed 1 --recipe auto --optimize-only \
		--keep $(BENCH_OUT)/model_sweep_auto || models=1; \
	lattice=0; $(PY) -m tests.modelgen.cell_sweep --seed 1 --count $(LATTICE_CELLS) || lattice=1; \
	test -x /usr/bin/time || { apt-get update -qq && apt-get install -y -qq time; } >/dev/null || echo "GNU time missing"; \
	zoo=0; $(PY) -m tests.benchmarks.real_size $(if $(REAL_SIZE_MODELS),--models $(REAL_SIZE_MODELS)) \
		$(if $(REAL_SIZE_LIMIT),--cgroup-limit $(REAL_SIZE_LIMIT)) --out $(BENCH_OUT)/real_size || zoo=1; \
	exit $$(( deploy || goals || serving || scaling || models || lattice || zoo ))

# The serving benchmark's peer: MLServer with the same LiteRT interpreter, in a venv of its own (without it,
# its floors are reported as not judged).
MLSERVER_VENV ?= $(BENCH_OUT)/mlserver-venv
mlserver-venv:
	@test -f $(MLSERVER_VENV)/.installed || { echo "==> MLServer (the serving benchmark's peer) in $(MLSERVER_VENV)" \
		&& $(PYTHON) -m venv $(MLSERVER_VENV) && $(MLSERVER_VENV)/bin/python -m pip install -q mlserver ai-edge-litert \
		&& touch $(MLSERVER_VENV)/.installed; } || echo "MLServer could not be installed: its serving floors are not judged"

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
	@$(TFSMITH) package $(DEMO_OUT)/optimized --kind litert --smoke
	@echo; echo "==> 5/5 the optimized artifacts against the runtimes you would otherwise use (2 threads)"
	@$(TFSMITH) bench $(DEMO_OUT)/optimized --data $(DEMO_OUT)/example/digits.npz --threads 2 --budget-s 20 \
		--out $(DEMO_OUT)/bench
	@echo; echo "demo done: model $(DEMO_OUT)/example, artifacts + report $(DEMO_OUT)/optimized, bench $(DEMO_OUT)/bench"

# The documentation site: the option tables regenerated from the CLI (docs/gen_reference.py), then Sphinx with
# MyST, every warning an error (-W): a broken link or anchor, or a page missing from docs/conf.py's NAV, fails.
DOCS_OUT ?= build/docs
.PHONY: docs
docs: venv
	@$(PY) docs/gen_reference.py
	@$(PY) -m sphinx -W --keep-going -E -q -b html docs $(DOCS_OUT)
	@echo "docs: $(DOCS_OUT)/index.html"

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
