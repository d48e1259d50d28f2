# adaptive_runtime — every target sets up what it needs itself, on a fresh machine too:
#   make demo    run the demo workload and print what the runtime learned
#   make test    run the test suite (fails when no test was collected)
#   make bench   run every benchmarks/*.py (not the _helpers)
#   make lint    ruff over the sources, tests, benchmarks and examples; the import layers
#                (.importlinter), mypy over the lower layers (pyproject.toml) and the size
#                limits of modules, functions and classes (tools/check_sizes.py)
#
# Set-up: a virtualenv in .venv (python3 -m venv), torch pinned *first* to the exact CPU build
# that lies on local disk (a looser requirement would pull a multi-GB CUDA build), then the
# package, editable, with its torch, jax and test extras, in the same pip command as its SDK side
# (sdk/, the sibling distribution the otlp extra requires). A stamp named after the hash of both
# pyproject.toml files and the torch pin makes reruns instant and reinstalls when one changes.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PIP_QUIET ?= -q
TORCH_VERSION := 2.13.0
EXTRAS := torch,jax,otlp,examples,report,lightning,transformers,test
# Debian packages the tests need (a real Prometheus, with promtool; docker-compose v1 to
# validate docker-compose.yml: no Docker engine is needed for `config`); installed once, as root.
APT_PACKAGES := prometheus docker-compose

INSTALL_HASH := $(shell cat pyproject.toml sdk/pyproject.toml | sha256sum | cut -c1-12)-torch$(TORCH_VERSION)
STAMP := $(VENV)/.installed-$(INSTALL_HASH)

PYTEST_ARGS ?=
DEMO_ARGS ?=
LINT_PATHS := adaptive_runtime sdk tests benchmarks tools $(wildcard examples)
BENCHMARKS := $(filter-out benchmarks/_%,$(wildcard benchmarks/*.py))

.PHONY: help venv deps-apt demo test reliability bench lint clean distclean gpu-check gpu-wheels

help:
	@echo "make demo   run the demo workload (sets everything up on first use)"
	@echo "make test   run the test suite"
	@echo "make reliability  run the reliability tests, rewrite RELIABILITY.md's table"
	@echo "make bench  run the benchmarks"
	@echo "make lint   ruff, the import layers (lint-imports), mypy on the lower layers, sizes"
	@echo "make venv   only create .venv and install the package"
	@echo "make gpu-check   on a machine with a CUDA GPU: the GPU paths in one table (docs/gpu.md)"
	@echo "make gpu-wheels  fetch the wheels gpu-check carries to a GPU machine with no network"

venv: $(STAMP)

deps-apt:
ifneq ($(strip $(APT_PACKAGES)),)
	@dpkg -s $(APT_PACKAGES) >/dev/null 2>&1 || { \
		echo "==> installing Debian packages: $(APT_PACKAGES)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends $(APT_PACKAGES) >/dev/null; }
else
	@true
endif

# No file prerequisite: the stamp's name already carries the hash of pyproject.toml.
$(STAMP):
	@echo "==> setting up $(VENV) (torch==$(TORCH_VERSION), .[$(EXTRAS)])"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install $(PIP_QUIET) --upgrade pip
	$(PIP) install $(PIP_QUIET) torch==$(TORCH_VERSION)
	$(PIP) install $(PIP_QUIET) -e ./sdk -e '.[$(EXTRAS)]'
	@rm -f $(VENV)/.installed-*
	@touch $@

demo: $(STAMP)
	$(PY) -m adaptive_runtime demo $(DEMO_ARGS)

# pytest exits 5 when it collected no test: that is a failure here, never a green run.
test: deps-apt $(STAMP)
	@rc=0; $(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo 'make test: no tests collected (pytest exit 5) - failing' >&2; exit 1; fi; \
	exit $$rc

# The reliability tests alone; rewrites RELIABILITY.md's measured table from this run.
reliability: deps-apt $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests/reliability --write-reliability

bench: $(STAMP)
	@if [ -z "$(BENCHMARKS)" ]; then echo 'make bench: no benchmarks/*.py found' >&2; exit 1; fi
	@for f in $(notdir $(BENCHMARKS)); do \
		echo "==> benchmarks/$$f"; \
		(cd benchmarks && $(abspath $(PY)) "$$f") || exit $$?; \
	done

lint: $(STAMP)
	$(PY) -m ruff check $(LINT_PATHS)
	$(VENV)/bin/lint-imports
	$(PY) -m mypy
	$(PY) tools/check_sizes.py adaptive_runtime sdk/adaptive_runtime_sdk

clean:
	rm -rf .pytest_cache .ruff_cache .hypothesis build dist *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)

# A machine with a CUDA GPU and no network (torch, JAX, numba in its own python3): no venv is
# built there. The package comes from the working tree; what its python3 lacks (OpenTelemetry)
# from the pure-Python wheels `make gpu-wheels` put in $(GPU_WHEELS) (ignored by git; carry it).
# Without a CUDA device it says so and exits 0.
GPU_WHEELS := .whl
GPU_SITE := /tmp/adaptive-runtime-gpu-site
gpu-check:
	@if compgen -G '$(GPU_WHEELS)/*.whl' >/dev/null; then \
		$(PYTHON) -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
			--upgrade --target $(GPU_SITE) $(GPU_WHEELS)/*.whl; fi
	PYTHONPATH=$(GPU_SITE):$(CURDIR):$(CURDIR)/sdk $(PYTHON) benchmarks/gpu_check.py

# The versions this venv runs, as wheels: OpenTelemetry and its protobufs (pure Python), and
# protobuf itself, built for the GPU machine's CPython 3.12 on x86-64 (the one there may be
# older than OpenTelemetry's generated code wants).
gpu-wheels: $(STAMP)
	@mkdir -p $(GPU_WHEELS)
	$(PIP) freeze | grep -E '^(opentelemetry-|googleapis-common-protos==)' \
		| $(PIP) download $(PIP_QUIET) --no-deps --only-binary=:all: -d $(GPU_WHEELS) -r /dev/stdin
	$(PIP) freeze | grep -E '^protobuf==' | $(PIP) download $(PIP_QUIET) --no-deps \
		--only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux2014_x86_64 -d $(GPU_WHEELS) -r /dev/stdin
