# The few verbs people type. `make demo` and `make test` set everything up first (idempotent and
# cached: a second run installs and downloads nothing).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMPS := .stamps
PYTEST_ARGS ?=
# `make test` runs on this many pytest worker processes (tests/conftest.py keeps a module and the
# cluster tier each on one worker); WORKERS=0 runs it in this one process. Three on two cores: the
# Kafka and Flink tests spend much of their time waiting for checkpoints and triggers, and a third
# worker fills those waits (measured quiet: 14:52 with two, 13:11 with three).
WORKERS ?= 3
XDIST := $(if $(filter 0,$(WORKERS)),,-n $(WORKERS))

.PHONY: setup system-deps python-deps jvm-deps demo test test-fast test-unit test-spark test-kafka test-cluster test-flink lint format bench clean

setup: system-deps python-deps jvm-deps

# Java 17 and Maven from Debian's packages when missing (needs root, as on CI machines).
system-deps:
	@if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then \
	  echo "installing Java 17 and Maven with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless maven; \
	fi
	@# Headless Chromium renders the dashboard in the browser tests and `report --screenshot`.
	@if ! command -v chromium >/dev/null; then \
	  echo "installing chromium with apt-get"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	fi

$(STAMPS)/python-deps: pyproject.toml
	@mkdir -p $(STAMPS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

python-deps: $(STAMPS)/python-deps

# Delta, the Kafka connector, the s3a connector, the Kafka broker and the Flink stacks the tests run
# from Maven Central into the local Maven repository.
jvm-deps: python-deps
	$(VENV)/bin/offset-audit setup-jvm

demo: setup
	$(VENV)/bin/offset-audit demo

# tests/support/cds.py: the class-data sharing archive the suite's Spark drivers start from (once).
test: setup
	$(PY) -m tests.support.cds
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

# The edit loop: the unit tier, pure Python, no JVM and no broker (needs only the Python packages).
# Only tests/unit/ is collected: the unit tier is exactly its files (tests/unit/test_suite_tiers.py).
test-fast: python-deps
	$(PY) -m pytest tests/unit -m unit $(PYTEST_ARGS)

test-unit: test-fast

test-spark: setup
	$(PY) -m tests.support.cds
	$(PY) -m pytest -m spark $(PYTEST_ARGS)

test-kafka: setup
	$(PY) -m tests.support.cds
	$(PY) -m pytest -m kafka $(PYTEST_ARGS)

# A Spark standalone master and two workers, and an S3 API server (moto), on loopback; `make test` runs it too.
test-cluster: setup
	$(PY) -m tests.support.cds
	$(PY) -m pytest -m cluster $(PYTEST_ARGS)

# Flink 1.20 and 2.2 jobs on MiniClusters reading the local broker, their checkpoints read back by
# Flink's State Processor API; `make test` runs it too.
test-flink: setup
	$(PY) -m tests.support.cds
	$(PY) -m pytest -m flink $(PYTEST_ARGS)

lint: python-deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: python-deps
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: setup
	$(PY) -m bench.stream

.PHONY: bench-confirm
bench-confirm: setup
	$(PY) -m bench.confirm --gaps 1000

# Time to detect a restart from latest with `watch --interval 30` (p50/p95 over 5 injections), its
# idle CPU over 5 minutes and its memory over the run; about 15 minutes.
.PHONY: bench-detect
bench-detect: setup
	$(PY) -m bench.detect --injections 5 --interval 30 --idle-s 300

# A month of one 2-second-trigger job: table files and the nightly's time on days 1, 7 and 30.
.PHONY: bench-longrun
bench-longrun: setup
	$(PY) -m bench.longrun --days 1,7,30 --batches-per-day 200 --repeat 3

# The wheel, for `pip install` into a job's environment or a cluster's image, and the same packages
# as one zip for `spark-submit --py-files` (Python imports from a zip). setuptools reuses build/lib,
# where a module deleted since the last build would still be shipped: it is cleared first.
DIST ?= dist
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' app/__init__.py)
.PHONY: dist
dist: python-deps
	rm -rf build/lib build/bdist.* build/py-files $(DIST)
	$(PY) -m pip wheel --no-deps -q -w $(DIST) .
	$(PY) -m pip install --no-deps --no-compile -q --target build/py-files $(DIST)/offset_audit-$(VERSION)-py3-none-any.whl
	$(PY) -m zipfile -c $(DIST)/offset_audit-$(VERSION)-py-files.zip build/py-files/app build/py-files/checks
	@ls -1 $(DIST)

clean:
	rm -rf data build dist .pytest_cache .mypy_cache .ruff_cache $(STAMPS)
