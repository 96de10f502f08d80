# Offload Lab. `make lab` opens the notebooks, `make test` runs every test (notebooks included).
# Both create .venv on first use (and refresh it when pyproject.toml or the lock file change) from the main lock:
# Python >= 3.12, found by scripts/find_python.sh (PYTHON=/path/to/python3.12 chooses one).
# `make test-chip` is the chip lock's smoke leg (Python 3.11, jax 0.10.2, libtpu 0.0.42.1: the lent TPU's stack).

VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Packages go in with uv (from PyPI, into each venv): the same pinned set as pip would install, in a tenth of the
# time (no bytecode compilation, parallel downloads); CI installs both locks on every run.
UV_VERSION := 0.13.9
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

.PHONY: setup chip-setup test-chip chip-lock lab test test-package test-notebooks test-browser rederive notebooks benchmarks site lock clean

# a .venv of another Python (an older checkout's 3.11) is rebuilt
$(STAMP): pyproject.toml $(LOCK)
	$(BIN)/python -c 'import sys; sys.exit(sys.version_info[:2] < (3, 12))' 2>/dev/null || { \
	  rm -rf $(VENV) && python=$$(scripts/find_python.sh 3.12) && $$python -m venv $(VENV); }
	test -x $(BIN)/uv || $(BIN)/python -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"
	$(BIN)/uv pip install --quiet --python $(BIN)/python -c $(LOCK) -e ".[dev]"
	touch $(STAMP)

# The chip lock: what the lent TPU v5e runs (its own index serves nothing newer). For regenerating chip-matched
# results (benchmarks/bench_measured.py, bench_tpu_simulation.py refuse any other jaxlib/libtpu), not a second suite.
CHIP_VENV  ?= .venv-chip
CHIP_LOCK  := requirements/chip-lock.txt
CHIP_STAMP := $(CHIP_VENV)/.installed
$(CHIP_STAMP): pyproject.toml $(CHIP_LOCK)
	test -x $(CHIP_VENV)/bin/python || { python=$$(scripts/find_python.sh 3.11 3.12) && $$python -m venv $(CHIP_VENV); }
	test -x $(CHIP_VENV)/bin/uv || $(CHIP_VENV)/bin/python -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"
	$(CHIP_VENV)/bin/uv pip install --quiet --python $(CHIP_VENV)/bin/python -c $(CHIP_LOCK) -e ".[tpu]" pytest
	touch $(CHIP_STAMP)

chip-setup: $(CHIP_STAMP)

## The chip lock's smoke leg (CI, <= 180 s with the install): the package imports, tests/test_tpu.py passes, and
## three stored chip steps recompile to their stored bytes (tests/test_chip_lock.py), and the chip's re-derivation
## sample (benchmarks/rederive.py --only tpu_simulation).
test-chip: $(CHIP_STAMP)
	$(CHIP_VENV)/bin/python -c "import companion, jaxlib, libtpu; print('chip lock: companion imports on jaxlib', jaxlib.__version__)"
	$(CHIP_VENV)/bin/python -m pytest -q tests/test_tpu.py tests/test_chip_lock.py
	$(CHIP_VENV)/bin/python benchmarks/rederive.py --only tpu_simulation

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

## The widgets of notebooks 01-05 and 07 in headless Chromium (Debian's chromium + chromium-driver; .ci/run installs them).
test-browser: $(STAMP)
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  echo "make test-browser needs Chromium and its driver: apt-get install chromium chromium-driver"; exit 1; }
	$(BIN)/uv pip install --quiet --python $(BIN)/python -c $(LOCK) -e ".[dev,browser]"
	$(BIN)/python -m pytest -q -n $(JOBS) browser_tests -p no:cacheprovider  # a JupyterLab and a Chromium per worker

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
## Every benchmark of the main lock (the lent chip's two, bench_measured and bench_tpu_simulation, run on the chip
## lock: benchmarks/README.md says how).
CHIP_BENCHMARKS := benchmarks/bench_measured.py benchmarks/bench_tpu_simulation.py benchmarks/bench_decision_shapes.py benchmarks/bench_decisions.py
benchmarks: $(STAMP)
	for script in $(filter-out $(CHIP_BENCHMARKS),$(wildcard benchmarks/bench_*.py)); do $(BIN)/python $$script || exit 1; done

## Re-pin: resolve the newest versions pyproject.toml allows on Python >= 3.12, then record them in the lock file.
lock:
	rm -rf .venv-lock && python=$$(scripts/find_python.sh 3.12) && $$python -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet -e ".[dev,browser]"
	.venv-lock/bin/python -m pip freeze --exclude-editable | grep -v '^offload-lab' > $(LOCK)
	rm -rf .venv-lock

## Re-pin the chip lock: Python 3.11 and the lent TPU's jax, jaxlib and libtpu (its own index serves no newer).
chip-lock:
	rm -rf .venv-lock && python=$$(scripts/find_python.sh 3.11 3.12) && $$python -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet -e ".[tpu]" pytest "jax==0.10.2" "jaxlib==0.10.2" "libtpu==0.0.42.1"
	.venv-lock/bin/python -m pip freeze --exclude-editable | grep -v '^offload-lab' > $(CHIP_LOCK)
	rm -rf .venv-lock

clean:
	rm -rf $(VENV) $(CHIP_VENV) .pytest_cache _site jupyter_execute
