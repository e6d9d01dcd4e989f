# Solomon: `make run` trains on the default corpus; `make test` runs the tests. Both build .venv first.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
export DVC_NO_ANALYTICS := 1

.PHONY: setup lock run repro report smoke test lint clean-venv mlflow-server mlflow-stop

setup: $(VENV)/.installed

# Rebuilt only when the lock or the package metadata change; otherwise `make setup` is a no-op.
$(VENV)/.installed: requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# Every package pinned with its hash, no dependency resolution: nothing can pull a CUDA torch.
	$(BIN)/python -m pip install --quiet --no-deps --require-hashes -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -m pip check
	touch $@

lock: setup
	$(BIN)/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras \
		--no-emit-index-url --no-emit-find-links -o requirements.lock requirements.in

run: setup
	$(BIN)/dvc repro

repro: run

report: setup
	$(BIN)/dvc repro report

smoke: setup
	$(BIN)/solomon smoke

test: setup
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# A self-hosted MLflow server on 127.0.0.1 (SQLite, or Postgres from MLFLOW_BACKEND_STORE_URI).
MLFLOW_PORT ?= 5000
mlflow-server: setup
	$(BIN)/solomon track server --port $(MLFLOW_PORT)

mlflow-stop: setup
	$(BIN)/solomon track stop

clean-venv:
	rm -rf $(VENV)
