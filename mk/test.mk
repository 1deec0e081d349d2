# `make test`: everything CI runs (.ci/run). Lint and mypy first (cheap, fail fast), then
# the cluster's binaries, then lanes side by side (hack/test-lanes.sh): the GPU rehearsal
# (mk/gpu.mk: the GPU machine's script on CPU under its torch); the unit tests, which
# compute; the integration tests on two control planes of their own (fake GPU nodes); and
# the end-to-end tier (real node, images, chart) on the default cluster with the real node.
# When the first other lane ends, a second unit process shares the unit test files.
# DTJOB_E2E=0 leaves the e2e tier out (a quick local loop). The binaries are built before
# the lanes, so a cold build is neither raced by two lanes nor charged to a test's timeout.
TEST_BINARIES = etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubectl helm \
  prometheus promtool kueue $(if $(filter 0,$(DTJOB_E2E)),,$(REALNODE_BINARIES))
# The real node's (hack/realnode.py BINARIES), built with the others when the e2e tier runs:
# one Go module for everything that links Kubernetes' libraries, the registry beside it
# (hack/build-binaries.sh).
REALNODE_BINARIES = kubelet kube-proxy coredns registry
PYTEST_ARGS ?=
PYTEST_PATHS ?= tests
# Where the timing of a `make test` goes: phases.tsv (hack/timed.sh) and one junit XML per
# pytest tier; `make test-durations` (and .ci/run, after every run) turns them into
# bench/results/test_durations.json and a summary.
export TEST_REPORTS ?= $(TOP)/.test-reports
TIMED = $(TOP)/hack/timed.sh
# The inner loop: the unit tests that start no process (tests/conftest.py marks the others
# `procs`: the multi-process trainer tests are most of the unit lane's 21 min) and the API
# validation tests, which need the control plane (the fixture starts it).
QUICK_PATHS = tests/unit $(wildcard tests/integration/test_api_*.py)

.PHONY: test test-quick test-integration test-gpu test-durations _pytest

test: ## lint and mypy, then side by side: GPU rehearsal, unit tests, integration tests, e2e tier (DTJOB_E2E=0 skips e2e)
	@rm -f $(TEST_REPORTS)/*.xml $(TEST_REPORTS)/phases.tsv
	@$(TIMED) lint $(MAKE) --no-print-directory lint
	@$(TIMED) typecheck $(MAKE) --no-print-directory typecheck
	@$(TIMED) binaries $(TOP)/hack/build-binaries.sh $(TEST_BINARIES) >/dev/null
	@$(TIMED) lanes $(TOP)/hack/test-lanes.sh

test-quick: ## the inner loop: lint, mypy, the unit tests that start no process, the API-validation tests
	@rm -f $(TEST_REPORTS)/*.xml $(TEST_REPORTS)/phases.tsv
	@$(TIMED) lint $(MAKE) --no-print-directory lint
	@$(TIMED) typecheck $(MAKE) --no-print-directory typecheck
	@$(TIMED) quick $(MAKE) --no-print-directory _pytest PYTEST_MARK="not e2e and not gpu and not procs" \
	  PYTEST_TIER=quick PYTEST_PATHS="$(QUICK_PATHS)"
	@python3 $(TOP)/hack/test_durations.py --out $(TEST_REPORTS)/test_durations.json

test-durations: ## bench/results/test_durations.json and a summary from the last make test
	@python3 $(TOP)/hack/test_durations.py

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
	@rc=0; $(PY) -m pytest $(PYTEST_PATHS) -m "$(PYTEST_MARK)" --durations=30 \
	  $(if $(PYTEST_TIER),--junitxml=$(TEST_REPORTS)/$(PYTEST_TIER).xml -o junit_family=xunit1) $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest found no tests to run" >&2; fi; exit $$rc
