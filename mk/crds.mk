# The CRD is generated from the pydantic models (api/dtjob_api) and copied into the chart,
# where templates/crds.yaml renders it (so `helm upgrade` upgrades it); the API reference
# (docs/api-reference.md) is generated from the same file. tests/unit/operator/test_crd.py
# and test_api_reference.py fail when a committed copy drifts.
CRD_FILE = crds/dtjob.io_distributedtrainingjobs.yaml
CHART_CRD_DIR = charts/dtjob-operator/files/crds
API_REFERENCE = docs/api-reference.md

.PHONY: crds

crds: ## regenerate crds/ from the API models, copy them into the chart, write the API reference
	@cd $(TOP) && $(PY) -m dtjob_api.crd $(CRD_FILE)
	@mkdir -p $(TOP)/$(CHART_CRD_DIR) && cp $(TOP)/$(CRD_FILE) $(TOP)/$(CHART_CRD_DIR)/
	@cd $(TOP) && $(PY) hack/api_reference.py $(API_REFERENCE)
	@echo "crds: wrote $(CRD_FILE), $(CHART_CRD_DIR)/$(notdir $(CRD_FILE)) and $(API_REFERENCE)"
