# Two commands do all set-up: `make run` (the main job) and `make test` (the suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONFIG ?= configs/quick.yaml

.PHONY: run test install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch is named in the same pip command as the rest, or pip resolves a multi-GB CUDA build.
	$(BIN)/python -m pip install --quiet "torch==2.13.0" -e ".[test]"
	# numba's kernels, compiled once here (~30 s on 2 cores) rather than in the first run or test.
	$(BIN)/python -m wdrbo_dist.cli.compile_kernels
	touch $(STAMP)

install: $(STAMP)

# The report runs even when some runs failed (it shows them); make returns the run's status.
run: $(STAMP)
	$(BIN)/wdrbo-dist run $(CONFIG); status=$$?; \
	  $(BIN)/wdrbo-dist report $(CONFIG) || exit $$?; \
	  exit $$status

test: $(STAMP)
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV)
