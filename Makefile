# Two commands on a fresh machine: `make run` (the main job) and `make test` (the suite). Each installs what it
# needs into .venv first. CI pins torch through PIP_CONSTRAINT (.ci/run); users keep pyproject's open range.
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
	$(PY) -m pip install --quiet -e ".[dev]"
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
