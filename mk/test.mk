# `make test`: everything CI runs (.ci/run). Lint and mypy first (cheap, fail fast), then the
# GPU rehearsal (mk/gpu.mk: the GPU machine's script on CPU under its torch), then the
# unit and integration tests in one pytest run, then the end-to-end tier (real node, images,
# chart) in a second one: it brings the cluster up with the real node, which the first run's
# fake-node cluster does not have. DTJOB_E2E=0 leaves the tier out (a quick local loop).
# Integration tests start the local cluster through their fixture; its binaries are built
# here first, so a cold build is not charged to one test's timeout.
TEST_BINARIES = etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubectl helm \
  prometheus promtool
PYTEST_ARGS ?=

.PHONY: test test-integration test-gpu _pytest

test: ## lint and mypy, unit + integration tests, then the e2e tier (DTJOB_E2E=0 skips it)
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory typecheck
	@$(MAKE) --no-print-directory gpu-rehearsal
	@$(MAKE) --no-print-directory _pytest PYTEST_MARK="not e2e and not gpu"
	@if [ "$$DTJOB_E2E" != 0 ]; then $(MAKE) --no-print-directory test-e2e; \
	else echo "make test: e2e tier left out (DTJOB_E2E=0); make test-e2e runs it alone"; fi

test-integration: ## only the tests against the control plane
	@$(MAKE) --no-print-directory _pytest PYTEST_MARK="integration"

# The GPU tier (tests/gpu): every strategy on CUDA, one rank per GPU under NCCL, the
# parameter-server modes sharing one GPU over gloo. Needs no cluster; without CUDA every
# CUDA test is skipped and says why (-rs prints the reasons). This target uses the project
# venv, for a GPU box that can build it; the lent GPU machine cannot (no registry, no
# pydantic) and runs `bash hack/gpu-check.sh` instead (docs/gpu.md).
test-gpu: ## every strategy on CUDA (tests/gpu; skipped, with reasons, without CUDA)
	$(PY) -m pytest tests/gpu -m gpu -rs $(PYTEST_ARGS)

_pytest:
	@[ -n "$$DTJOB_KUBECONFIG" ] || $(TOP)/hack/build-binaries.sh $(TEST_BINARIES) >/dev/null
	@# Exit 5 means pytest collected nothing at all: a broken test tree, never a pass.
	@rc=0; $(PY) -m pytest tests -m "$(PYTEST_MARK)" $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest found no tests to run" >&2; fi; exit $$rc
