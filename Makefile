# longformer-fs: set-up, tests and (later) training recipes.
#
#   make install   create .venv/ with pinned dependencies (a no-op when up to date)
#   make test      install if needed, then run the test suite
#   make info      print versions and the attention backends available here
#
# Variables:
#   PYTHON=python3        interpreter used to create the venv
#   TORCH=auto            `auto` keeps a torch that $(PYTHON) can already import (for example
#                         a CUDA build on a GPU machine) and otherwise installs $(TORCH_PIN);
#                         any other value is a pip requirement to install instead,
#                         e.g. TORCH="torch==2.13.0 --index-url <your CUDA index>"
#   PYTEST_ARGS=...       extra arguments for pytest, e.g. PYTEST_ARGS="-k chunks -x"

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
TORCH ?= auto
TORCH_PIN := torch==2.13.0
FAIRSEQ_PIN := fairseq-fixed==0.12.3.1
PYTEST_ARGS ?=

PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
STAMP := $(VENV)/.installed
INSTALL_INPUTS := Makefile setup.py pyproject.toml requirements.txt requirements-test.txt constraints.txt \
	$(shell find cuda_ext -name '*.cpp' -o -name '*.cu' -o -name '*.h')

ifeq ($(TORCH),auto)
SYSTEM_TORCH := $(shell $(PYTHON) -c "import torch; print(torch.__version__)" 2>/dev/null)
ifneq ($(SYSTEM_TORCH),)
VENV_FLAGS := --system-site-packages
TORCH_REQ :=
else
VENV_FLAGS :=
TORCH_REQ := $(TORCH_PIN)
endif
else
VENV_FLAGS :=
TORCH_REQ := $(TORCH)
endif

.PHONY: help install test info clean-venv

help:
	@sed -n '2,16p' Makefile | sed 's/^# \{0,1\}//'

install: $(STAMP)

# The stamp records a finished install; it is rebuilt only when an input above changes,
# so a second `make install` returns in well under a second.
$(STAMP): $(INSTALL_INPUTS)
	@echo ">> creating $(VENV) $(if $(VENV_FLAGS),(keeping torch $(SYSTEM_TORCH) from $(PYTHON)),)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(PIP) install -q --upgrade "pip>=23" "setuptools>=64" wheel
	$(if $(TORCH_REQ),$(PIP) install -q $(TORCH_REQ),@echo ">> using torch $(SYSTEM_TORCH)")
	@# fairseq-fixed's metadata requires torchaudio, which would replace our torch, so it
	@# goes in with --no-deps after its real dependencies. It compiles Cython and C++
	@# against torch, hence --no-build-isolation (about 3 minutes on 2 cores, once).
	$(PIP) install -q -c constraints.txt -r requirements.txt -r requirements-test.txt
	$(PIP) install -q --no-deps --no-build-isolation $(FAIRSEQ_PIN)
	@# Editable install; this also compiles the cuda_ext kernels (about a minute).
	$(PIP) install -q --no-deps --no-build-isolation -e .
	@touch $@
	@echo ">> installed; run 'make test' or '$(VENV)/bin/longformer-fs info'"

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

info: $(STAMP)
	$(VENV)/bin/longformer-fs info

clean-venv:
	rm -rf $(VENV)
