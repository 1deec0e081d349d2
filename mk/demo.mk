# `make demo`: everything a first-time user needs, then example jobs training on the real node.
# DEMO_JOBS picks the examples (default: data-parallel and pipeline-1f1b from examples/cpu/).
DEMO_JOBS ?=

.PHONY: demo

demo: ## set up cluster + real node + images + chart, run CPU example jobs, show them train
	@$(TOP)/hack/realnode-demo.sh $(DEMO_JOBS)
