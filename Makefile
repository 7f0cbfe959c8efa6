# The two commands a new user needs: `make demo` and `make test`. Both create the virtual
# environment (.venv) and install the pinned dependencies on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
SYSTEM_STAMP := $(VENV)/.system-stamp
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export DO_NOT_TRACK ?= 1

.PHONY: install demo test bench bench-big freeze clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test,s3,bench]"
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

test: $(STAMP) $(SYSTEM_STAMP)
	$(BIN)/python -m pytest tests -q --durations=15

bench: $(STAMP)
	$(BIN)/python -m bench pca

bench-big: $(STAMP)
	$(BIN)/python -m bench pca --big

freeze: $(STAMP)
	$(BIN)/python -m pip freeze --all --exclude-editable | grep -v '^dimred\|^pip==' > constraints.txt

clean:
	rm -rf $(VENV) .dimred-demo .pytest_cache
