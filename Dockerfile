# The serving image of one verified run. Build it from a checkout whose workspace holds that run's model and
# tokenizer (`dvc checkout`, or the run just made):
#   make image RUN=<run-id>        (.ci/build-image: verifies the run, gathers the context, passes the build args)
# The build fails unless the copied run directory, weights, model config and tokenizer verify against the
# run's manifest and the manifest is the one named by MANIFEST_SHA256. The image serves that run over HTTP on
# port 8000 (`solomon serve`: docs/serving.md). It holds no pipeline, so no dvc.lock: its verify and serve declare
# that with --no-dvc-lock, and the files are hashed where they are (docs/audit.md).
# BASE_IMAGE: the public image pinned by digest; `make image BASE_IMAGE=local` builds on the Debian bookworm
# minbase + Debian python3.11 equivalent that `make base-image` makes where the public registry is unreachable.
ARG BASE_IMAGE=python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    OMP_NUM_THREADS=1 \
    PATH=/opt/venv/bin:$PATH

WORKDIR /app

# The serving lock only (requirements-serve.lock: what verify, serve and registry resolution need, at
# requirements.lock's versions; no DVC, training, report or test tools), every package pinned with its SHA256 and
# installed without resolution or network, from the wheelhouse the build context holds (`pip download
# --require-hashes` of that lock; torch is the CPU build it pins), into a venv: the public base's Python and
# Debian's python3.11 (whose system site is not pip's to change) alike.
# Then, in the same layer, what serving never loads goes (tests/test_image_podman.py serves and traces the image
# without it, and holds it under 1 GB): torch's C++ headers, C++ test binaries and tools (include/, test/, bin/
# but the shm manager `import torch` needs), its compiler (_inductor/), and sympy, networkx and mpmath, which
# torch imports only to compile or reason about symbolic shapes; huggingface-hub and hf-xet, which tokenizers
# needs only to download from the Hub.
COPY requirements-serve.lock ./
RUN --mount=type=bind,source=wheels,target=/wheels \
    python3 -m venv /opt/venv \
    && pip install --no-deps --require-hashes --no-index --find-links /wheels --no-build-isolation \
        -r requirements-serve.lock \
    && pip uninstall --yes --quiet sympy networkx mpmath huggingface-hub hf-xet \
    && rm -rf /opt/venv/lib/python3.11/site-packages/torch/include /opt/venv/lib/python3.11/site-packages/torch/test \
        /opt/venv/lib/python3.11/site-packages/torch/_inductor \
    && find /opt/venv/lib/python3.11/site-packages/torch/bin -mindepth 1 ! -name torch_shm_manager -exec rm -rf {} +

COPY pyproject.toml README.md ./
COPY solomon ./solomon
# pip and setuptools were needed only to install: a serving image installs nothing more.
RUN pip install --no-deps --no-build-isolation . \
    && pip uninstall --yes --quiet pip setuptools \
    && useradd --create-home --uid 10001 --shell /usr/sbin/nologin solomon

ARG RUN_ID
ARG MANIFEST_SHA256
COPY reports/training/${RUN_ID}/ ./reports/training/${RUN_ID}/
COPY models/model.safetensors models/config.json ./models/
COPY data/tokenizer.json ./data/
RUN solomon verify "reports/training/${RUN_ID}" --root /app --no-dvc-lock --expect-digest "${MANIFEST_SHA256}" \
        --artifact models/model.safetensors --artifact models/config.json --artifact data/tokenizer.json

LABEL org.opencontainers.image.title="solomon" \
      org.opencontainers.image.description="Small decoder-only language model of Solomon run ${RUN_ID}" \
      org.opencontainers.image.version="${RUN_ID}" \
      dev.solomon.run-id="${RUN_ID}" \
      dev.solomon.manifest-sha256="${MANIFEST_SHA256}"

# `solomon serve` verifies the files again, against the digest the image was built for, before it loads them;
# SOLOMON_IMAGE_DIGEST (set by the deployment: an image cannot know its own digest) is reported by /v1/provenance.
ENV SOLOMON_RUN=/app/reports/training/${RUN_ID} \
    SOLOMON_EXPECT_DIGEST=${MANIFEST_SHA256}
USER 10001
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2)"]
ENTRYPOINT ["solomon", "serve", "--root", "/app", "--no-dvc-lock"]
CMD ["--host", "0.0.0.0", "--port", "8000"]
