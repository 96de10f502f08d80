# Offload Lab. `make lab` opens the notebooks, `make test` runs every test (notebooks included).
# Both create .venv on first use (and refresh it when pyproject.toml or the lock file change).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LOCK   := requirements/lock.txt
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)  # jupyter refuses root otherwise (containers)
JOBS   ?= 2  # pytest-xdist workers: the suite is one core's work per compile, CI has two (each file stays on one)
XDIST  := -n $(JOBS) --dist loadfile
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg --nbval-cell-timeout 600

# Test runs share their compiles: the lab's compile reports (companion.report_cache: keyed by the program, flags,
# target, jaxlib and the companion source, so never stale) and JAX's own cache of the CPU executables the
# numerics tests run (keyed by the program, options and jaxlib); the package tests, nbval's kernels, the
# subprocesses of test_distributed and the browser test's kernels all read them.
REPORT_CACHE ?= $(abspath $(VENV))/report-cache
JAX_CACHE    ?= $(abspath $(VENV))/jax-cache
test test-package test-notebooks test-browser: export OFFLOAD_LAB_REPORT_CACHE ?= $(REPORT_CACHE)
test test-package test-notebooks test-browser: export JAX_COMPILATION_CACHE_DIR ?= $(JAX_CACHE)

.PHONY: setup lab test test-package test-notebooks test-browser rederive notebooks benchmarks site lock clean

$(STAMP): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c $(LOCK) -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

## Open JupyterLab on notebooks/ (127.0.0.1 only, token auth on: open the printed URL).
lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks --ServerApp.ip=127.0.0.1 $(ROOT_FLAG)

## Every test: the package's pytest suite and nbval over the committed notebook outputs.
test: $(STAMP)
	$(BIN)/python -m pytest -q --durations=25 $(XDIST) tests notebooks $(NBVAL)

test-package: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) tests

test-notebooks: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) notebooks $(NBVAL)

## The widgets of notebooks 01-06 in headless Chromium (Debian's chromium + chromium-driver; .ci/run installs them).
test-browser: $(STAMP)
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  echo "make test-browser needs Chromium and its driver: apt-get install chromium chromium-driver"; exit 1; }
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c $(LOCK) -e ".[dev,browser]"
	$(BIN)/python -m pytest -q browser_tests -p no:cacheprovider

## Stored rows recomputed and compared field for field (a sample; CI runs it): benchmarks/rederive.py.
rederive: $(STAMP)
	$(BIN)/python benchmarks/rederive.py

## Re-execute every notebook in place (run after changing companion/ or a notebook).
notebooks: $(STAMP)
	$(BIN)/python scripts/execute_notebooks.py notebooks/*.ipynb

## The series as a static website in _site/ (the notebooks' stored outputs, not re-executed; the API from docstrings;
## MyST-NB keeps the outputs it extracts in jupyter_execute/ beside it).
site: $(STAMP)
	$(BIN)/sphinx-build -q -b html -c docs . _site
	@echo "open _site/index.html"

## Speed, memory and accuracy targets; each script writes benchmarks/results/<name>.json.
benchmarks: $(STAMP)
	for script in benchmarks/bench_*.py; do $(BIN)/python $$script || exit 1; done

## Re-pin: resolve the newest versions pyproject.toml allows, then record them in the lock file.
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet -e ".[dev]"
	.venv-lock/bin/python -m pip freeze --exclude-editable | grep -v '^offload-lab' > $(LOCK)
	rm -rf .venv-lock

clean:
	rm -rf $(VENV) .pytest_cache _site jupyter_execute
