# sturdy.workers: every prerequisite of the tests is installed from here (see README).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

PYENV_ROOT ?= $(shell pyenv root 2>/dev/null || echo $$HOME/.pyenv)
PYTHON313 ?= $(PYENV_ROOT)/versions/3.13.0/bin/python3.13
VENV := $(CURDIR)/.venv
COLLECTION := $(CURDIR)/.build/ansible_collections/sturdy/workers
SCENARIOS ?= $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml)))

export PATH := $(VENV)/bin:$(PATH)
export CONTAINERS_CONF := $(CURDIR)/testbed/containers.conf
export ANSIBLE_INJECT_FACT_VARS := false

.PHONY: test lint sanity unit molecule host-packages venv images collection-copy clean

## test: everything CI runs (lint, sanity, unit tests, every molecule scenario on bookworm and trixie)
test: lint sanity unit molecule

## host-packages: podman, runc and debootstrap from apt (with recommends: aardvark-dns resolves names)
host-packages:
	@if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap; \
	fi

## venv: the pinned controller toolchain (requirements.txt) on Python 3.13
venv: $(VENV)/.installed
$(VENV)/.installed: requirements.txt
	test -x $(VENV)/bin/python || $(PYTHON313) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements.txt
	touch $@

## images: Debian bookworm (systemd 252) and trixie (systemd 257) test hosts, rebuilt when the recipe changes
images: host-packages
	testbed/ensure-image.sh bookworm localhost/sturdy-systemd:12
	testbed/ensure-image.sh trixie localhost/sturdy-systemd:13

## lint: yamllint, ansible-lint (production profile), defaults vs argument_specs
lint: venv
	yamllint --strict .
	ansible-lint --profile production
	python tools/check_role_vars.py

collection-copy:
	rm -rf $(COLLECTION) && mkdir -p $(COLLECTION)
	git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t $(COLLECTION)

## sanity: ansible-test sanity on a copy under ansible_collections/sturdy/workers
sanity: venv collection-copy
	cd $(COLLECTION) && ansible-test sanity --venv --python 3.13 --requirements --color no

## unit: pytest for plugins and module_utils
unit: venv collection-copy
	cd $(COLLECTION) && PYTHONPATH=$(CURDIR)/.build python -m pytest -q tests/unit

## molecule: every scenario, both platforms
molecule: venv images
	for s in $(SCENARIOS); do molecule -c .config/molecule/config.yml test -s $$s; done

clean:
	rm -rf .build
