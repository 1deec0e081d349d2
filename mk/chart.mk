# The chart's README carries a values table generated from values.yaml's `# --` comments and
# values.schema.json; tests/unit/operator/test_chart.py fails when it is stale.
.PHONY: chart-docs

chart-docs: ## regenerate the values table of charts/dtjob-operator/README.md
	@cd $(TOP) && $(PY) hack/chart_values_table.py
	@echo "chart-docs: wrote charts/dtjob-operator/README.md"
