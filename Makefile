# The two commands a new user needs: `make demo` and `make test`. Both create the virtual
# environment (.venv) and install the pinned dependencies on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
SYSTEM_STAMP := $(VENV)/.system-stamp
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export DO_NOT_TRACK ?= 1

.PHONY: install demo test lint format docs bench bench-big freeze clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test,s3,bench]"
	$(BIN)/python -m dimred_dask.warmup  # numba's kernels compiled once, into its disk cache
	@touch $(STAMP)

# Debian's chromium, for the test that screenshots a run in the Prefect UI.
$(SYSTEM_STAMP): $(STAMP)
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium (UI screenshot test) ..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "make test needs chromium: sudo apt-get install chromium" >&2; exit 1; fi; }
	@touch $@

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/dimred-dask demo

# The suite runs in TEST_WORKERS processes (pytest-xdist, whole files to a process): each has
# its own LocalCluster, Prefect API and S3 server, and most tests wait on those more than they
# compute. TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2

test: $(STAMP) $(SYSTEM_STAMP) lint docs
	$(BIN)/python -m pytest tests -q --durations=15 -n $(TEST_WORKERS) --dist loadfile

# ruff's rules and its formatter as configured in pyproject.toml ([tool.ruff]); part of
# `make test` (`make format` rewrites the files the check would refuse)
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .

API_MODULES := dimred_dask dimred_dask.methods dimred_dask.graphs dimred_dask.linalg \
	dimred_dask.pairwise dimred_dask.io dimred_dask.metrics dimred_dask.errors \
	dimred_dask.datasets dimred_dask.cluster dimred_dask.warmup
# the API reference (HTML, from the numpydoc docstrings) in build/api; a warning fails it
docs: $(STAMP)
	rm -rf build/api
	$(BIN)/python -W error -m pdoc --docformat numpy --no-show-source -o build/api $(API_MODULES)
	@echo "API reference: build/api/dimred_dask.html"

bench: $(STAMP)
	$(BIN)/python -m bench pca

bench-big: $(STAMP)
	$(BIN)/python -m bench pca --big

freeze: $(STAMP)
	$(BIN)/python -m pip freeze --all --exclude-editable | grep -v '^dimred\|^pip==' > constraints.txt

clean:
	rm -rf $(VENV) .dimred-demo .pytest_cache build/api
