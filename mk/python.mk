# The cached virtual environment (see hack/venv.sh) and the Python tooling.
VENV = $(shell $(TOP)/hack/venv.sh)
PY = $(VENV)/bin/python

.PHONY: venv lint typecheck
venv: ## create the cached virtual environment (prints its path)
	@echo $(VENV)

lint: ## ruff lint + format check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy's cache lives beside the venv (same mypy, same stubs), not in the checkout: CI runs
# on a clean clone, where a checkout's .mypy_cache is always empty and mypy re-analysed
# torch's stubs and ours every run (36-54 CPU-s; 2 s warm). The cache stays valid across
# checkouts: mypy compares a module's hash when its mtime differs.
typecheck: ## mypy (strict on the pure modules, see pyproject.toml)
	$(VENV)/bin/mypy --cache-dir $(VENV)/mypy-cache
