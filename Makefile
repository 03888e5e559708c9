# The two commands of the README, and the set-up they share.
#   make demo   create .venv if needed, then run the main job on the embedded default
#   make test   create .venv if needed, then run the test suite (real corpora from ENTITYLM_DATA)
# On a CPU machine torch is installed FIRST as the pinned CPU build, so nothing pulls CUDA wheels.
# GPU machines: see docs/getting-started.md ("Installing for a GPU"); set TORCH_SPEC/TORCH_INDEX accordingly.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
# Extra pip arguments for torch, e.g. TORCH_INDEX="--index-url https://download.pytorch.org/whl/cpu"
# on a CPU machine without the local wheel, or .../whl/cu128 for a GPU.
TORCH_INDEX ?=
ENTITYLM_DATA ?= $(abspath ../shared/data)
export ENTITYLM_DATA

PY := $(VENV)/bin/python
STAMP := $(VENV)/.entitylm-installed

.PHONY: install demo test clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "$(TORCH_SPEC)" $(TORCH_INDEX)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m inference.marginal_ppl

test: $(STAMP)
	$(PY) -m pytest

clean:
	rm -rf $(VENV) build *.egg-info
