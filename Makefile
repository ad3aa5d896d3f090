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

bench: venv
	@$(TFSMITH) bench --help >/dev/null

demo: engine
	@$(TFSMITH) detect

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
