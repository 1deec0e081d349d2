# The cached virtual environment (see hack/venv.sh) and the Python tooling.
VENV = $(shell $(TOP)/hack/venv.sh)
PY = $(VENV)/bin/python

.PHONY: venv lint typecheck
venv: ## create the cached virtual environment (prints its path)
	@echo $(VENV)

lint: ## ruff lint + format check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: ## mypy (strict on the pure modules, see pyproject.toml)
	$(VENV)/bin/mypy
