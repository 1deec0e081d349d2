# The GPU kit (docs/gpu.md): one prepared, rehearsed run of every GPU check for a short
# GPU window. `make gpu-kit` here; `bash hack/gpu-check.sh` there (carry .gpu-kit);
# `make gpu-rehearsal` runs that same script here on CPU with the GPU image's Python and
# torch (part of `make test`).
.PHONY: gpu-kit gpu-rehearsal

gpu-kit: ## the wheels the GPU machine lacks, into .gpu-kit/ (carry it there)
	@$(TOP)/hack/gpu-kit.sh

gpu-rehearsal: ## hack/gpu-check.sh on CPU with the GPU image's Python 3.12 and torch 2.11
	@$(TOP)/hack/gpu-rehearsal.sh
