# dtjob — every command a developer, CI or an issue uses. Targets live in mk/*.mk,
# one file per area, so this file stays an index.
SHELL := /bin/bash
.DEFAULT_GOAL := help
TOP := $(abspath .)
export DTJOB_CACHE ?= $(HOME)/.cache/dtjob
export PYTHONPATH := $(TOP)/api:$(TOP)/operator:$(TOP)/trainer_image:$(TOP)/client$(if $(PYTHONPATH),:$(PYTHONPATH))

include mk/*.mk

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'
