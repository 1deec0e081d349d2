# The real node (docs/real-node.md): images built from our Dockerfiles and pushed to the
# node's registry, and the end-to-end tier (tests/e2e: real containers on `make cluster-up NODE=real`).
.PHONY: images registry image-tag test-e2e

images: ## build the base, operator and trainer images (cached); pushes them when the real node's registry runs
	@$(TOP)/hack/images.sh build
	@if $(TOP)/hack/images.sh registry >/dev/null 2>&1; then \
	  $(TOP)/hack/images.sh push; else echo "images: built; no registry runs, so nothing pushed" >&2; fi

registry: ## print the real node's registry, host:port on 127.0.0.1 (make -s registry)
	@$(CLUSTER) registry

image-tag: ## print the tag `make images` pushed the operator and trainer under (make -s image-tag)
	@sed -n 's/^TAG=//p' $(DTJOB_CACHE)/images/pushed.env

# The set-up (cold: kubelet, CoreDNS, images of several GB) runs here, outside pytest, so it
# is not charged to the first test's timeout and its progress shows in the log; the e2e
# fixture then finds everything up. A cluster this target started is stopped afterwards
# (DTJOB_KEEP_CLUSTER=1 keeps it), like the integration fixture does.
test-e2e: ## only the end-to-end tests (real node, images, chart; builds what they need)
	@was_up=0; $(CLUSTER) status >/dev/null 2>&1 && was_up=1; rc=0; \
	{ $(TOP)/hack/realnode-up.sh e2e && $(MAKE) --no-print-directory _pytest PYTEST_MARK="e2e" PYTEST_TIER=$(or $(E2E_TIER),e2e); } \
	  || rc=$$?; \
	if [ $$was_up = 0 ] && [ "$$DTJOB_KEEP_CLUSTER" != 1 ]; then $(CLUSTER) down; fi; exit $$rc
