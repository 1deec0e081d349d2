# The CRD is generated from the pydantic models (api/dtjob_api) and copied into
# the chart; tests/unit/operator/test_crd.py fails when the committed files drift.
CRD_FILE = crds/dtjob.io_distributedtrainingjobs.yaml
CHART_CRD_DIR = charts/dtjob-operator/crds

.PHONY: crds

crds: ## regenerate crds/ from the API models and copy them into the chart
	@cd $(TOP) && $(PY) -m dtjob_api.crd $(CRD_FILE)
	@mkdir -p $(TOP)/$(CHART_CRD_DIR) && cp $(TOP)/$(CRD_FILE) $(TOP)/$(CHART_CRD_DIR)/
	@echo "crds: wrote $(CRD_FILE) and $(CHART_CRD_DIR)/$(notdir $(CRD_FILE))"
