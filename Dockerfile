# The operator image. The base is any Debian bookworm image with Python 3.11; by default the
# one `make images` builds locally (no registry needed), e.g. python:3.11-slim-bookworm elsewhere.
ARG BASE_IMAGE=dtjob/python-base:3.11-bookworm
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Dependencies first, pinned, in their own layer so code changes rebuild in seconds.
COPY requirements/operator.txt /tmp/requirements.txt
RUN python3 -m pip install --no-compile -r /tmp/requirements.txt && rm /tmp/requirements.txt
# Bytecode made once here, not at every start of the operator (trainer_image/Dockerfile).
RUN python3 -m compileall -q -j 0 $(python3 -c 'import site; print(*site.getsitepackages())')

COPY api/ /src/api/
COPY operator/ /src/operator/
RUN python3 -m pip install --no-deps /src/api /src/operator && rm -rf /src

RUN groupadd --gid 1000 dtjob && useradd --uid 1000 --gid 1000 --no-create-home dtjob
USER 1000:1000

EXPOSE 8000 8080
ENV DTJOB_LIVENESS_ENDPOINT=http://0.0.0.0:8080/healthz
# Two malloc arenas, not glibc's 8 per core: the operator's threads (reconcile workers,
# informers, the per-pod call pool) each fragmenting an arena of their own cost resident
# memory with thousands of cached pods (bench/api_load.py runs the operator this way too).
ENV MALLOC_ARENA_MAX=2
ENTRYPOINT ["dtjob-operator"]
