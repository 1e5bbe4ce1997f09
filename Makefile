# Two commands on a fresh machine: `make run` (the main job) and `make test` (the suite). Each installs what it
# needs into .venv first. CI pins torch through PIP_CONSTRAINT (.ci/run); users keep pyproject's open range.
# Without an NVIDIA GPU (Linux), torch comes from PyTorch's CPU wheel index first (tools/install_torch.py).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SUBMISSION ?= torch_reference
SHAPES ?= auto
MODE ?= benchmark
PYTEST_ARGS ?=

.PHONY: install run test list clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) tools/install_torch.py
	$(PY) -m pip install --quiet -e ".[dev]"
	$(PY) tools/install_torch.py --report
	touch $@

install: $(VENV)/.installed

run: install
	$(PY) -m harness run --submission $(SUBMISSION) --shapes $(SHAPES) --mode $(MODE)

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

list: install
	$(PY) -m harness list

clean:
	rm -rf $(VENV) .pytest_cache
