# The real node (docs/real-node.md): images built from our Dockerfiles without a registry,
# and the end-to-end tier (tests/e2e: real containers on `make cluster-up NODE=real`).
.PHONY: images test-e2e

images: ## build the base, operator and trainer images (cached); imports them when the real node runs
	@$(TOP)/hack/images.sh build
	@sock=$$(dirname $$($(CLUSTER) kubeconfig))/realnode/containerd.sock; \
	if [ -S "$$sock" ]; then CONTAINERD_SOCK=$$sock $(TOP)/hack/images.sh import; fi

test-e2e: ## only the end-to-end tests (real node, images, chart; builds what they need)
	@$(MAKE) --no-print-directory _pytest PYTEST_MARK="e2e"
