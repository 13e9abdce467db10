# stratalog: `make run` and `make test` set everything up on a fresh machine, idempotently.
# Every tool comes from .venv, which this file creates; nothing is installed globally.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp-installed
DATA_DIR ?= ./data

.PHONY: run test unit lint install proto bench clean help

help:
	@echo "make run     set up .venv and start the server (data in $(DATA_DIR), 127.0.0.1:50051)"
	@echo "make test    set up .venv and run every test (lint, unit, integration)"
	@echo "make lint    ruff and the import-linter contracts"
	@echo "make bench   run the benchmarks and print their figures"

$(PY):
	$(PYTHON) -m venv $(VENV)

# Reinstall when the project's metadata changes; pip is idempotent, the stamp only saves time.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

install: $(STAMP)

run: install
	$(VENV)/bin/stratalog serve --log-dirs $(DATA_DIR)

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

test: install lint
	$(VENV)/bin/pytest

# Regenerates the committed gRPC/protobuf modules from the .proto; tests/unit/test_proto.py fails
# when they drift apart, so run this after every edit of broker.proto and commit the result.
proto: install
	$(PY) -m grpc_tools.protoc -Iproto --python_out=proto --pyi_out=proto --grpc_python_out=proto \
		proto/stratalog/v1/broker.proto

bench: install
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache

# Builds the image and tests it against a live container: engine, base image, wheels, image,
# integration checks, SIGTERM, restart on the same volume (deploy/docker-test.sh, docs/docker.md).
.PHONY: docker-test
docker-test: install
	deploy/docker-test.sh
