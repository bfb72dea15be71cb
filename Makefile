# sturdy.workers: every prerequisite of the tests is installed from here (see README).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

PYENV_ROOT ?= $(shell pyenv root 2>/dev/null || echo $$HOME/.pyenv)
PYTHON313 ?= $(PYENV_ROOT)/versions/3.13.0/bin/python3.13
VENV := $(CURDIR)/.venv
# ansible-test --requirements pins its own linters; keep them out of the toolchain venv.
SANITY_VENV := $(CURDIR)/.venv-sanity
# The documentation toolchain (antsibull-docs, Sphinx) apart from the tested one, as the sanity linters are.
DOCS_VENV := $(CURDIR)/.venv-docs
COLLECTION := $(CURDIR)/.build/ansible_collections/sturdy/workers
SCENARIOS ?= $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml)))

export PATH := $(VENV)/bin:$(PATH)
export CONTAINERS_CONF := $(CURDIR)/testbed/containers.conf
export ANSIBLE_INJECT_FACT_VARS := false
# Plain logs: CI reads them as text.
export NO_COLOR := 1
export ANSIBLE_NOCOLOR := 1

.PHONY: test checks lint sanity unit docs chromium molecule molecule-collections bench bench-clean demo demo-clean host-packages venv promtool images ee collection-copy collection-install clean

## test: everything CI runs (lint, sanity, unit tests, the docs site, every molecule scenario on bookworm and trixie)
# The static checks run one after another beside the molecule lanes, on the core the lanes leave idle while their
# hosts start (two make jobs: the lanes, and one check at a time); each job's output is printed when it ends.
test: venv images promtool molecule-collections
	$(MAKE) --no-print-directory -j2 --output-sync=target molecule checks
checks:
	$(MAKE) --no-print-directory -j1 lint sanity unit docs ee

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

## promtool: promtool for the alert-rule tests, unpacked from Debian's prometheus package (nothing installed or started)
PROMTOOL_BIN := $(CURDIR)/.build/promtool/usr/bin/promtool
promtool: $(PROMTOOL_BIN)
$(PROMTOOL_BIN):
	# apt-get download fetches the .deb only; a host that never ran apt-get update has no package lists: update, retry.
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && cd "$$tmp" && \
	  { apt-get download -qq prometheus 2>/dev/null || { apt-get update -qq && apt-get download -qq prometheus; }; } && \
	  rm -rf $(CURDIR)/.build/promtool && mkdir -p $(CURDIR)/.build/promtool && dpkg-deb -x prometheus_*.deb $(CURDIR)/.build/promtool
	$@ --version

## images: Debian bookworm (systemd 252) and trixie (systemd 257) test hosts, rebuilt when the recipe changes
images: host-packages
	testbed/ensure-image.sh bookworm localhost/sturdy-systemd:12
	testbed/ensure-image.sh trixie localhost/sturdy-systemd:13

## ee: the execution environment image, as AWX runs jobs in one (ee/build.sh): Debian trixie, ansible-core and
# ansible-runner, the collection installed from the tarball `ansible-galaxy collection build` makes; rebuilt when the
# recipe or the collection's content changes. The ownapp scenario deploys through it (ansible-runner, navigator).
EE_VERSION := $(shell awk '/^version:/{print $$2}' galaxy.yml)
EE_IMAGE := localhost/sturdy-workers-ee:$(EE_VERSION)
# ansible-navigator refuses podman without /dev/mqueue (POSIX message queues), which hosts mount and this sandbox lacks.
ee: host-packages venv
	@mountpoint -q /dev/mqueue || { mkdir -p /dev/mqueue && mount -t mqueue mqueue /dev/mqueue; }
	rm -rf $(CURDIR)/.build/ee-dist
	ansible-galaxy collection build $(CURDIR) --output-path $(CURDIR)/.build/ee-dist >/dev/null
	mkdir -p $(CURDIR)/.build && flock $(CURDIR)/.build/ee.lock ee/build.sh \
	  $(CURDIR)/.build/ee-dist/sturdy-workers-$(EE_VERSION).tar.gz $(EE_IMAGE)

## lint: yamllint, ansible-lint (production profile), defaults vs argument_specs
lint: venv
	yamllint --strict .
	ansible-lint --profile production
	python tools/check_role_vars.py
	python tools/yaml_duplicates.py
	antsibull-changelog lint

## docs: the documentation site in .build/docs/html (docs/ and the reference of every module, filter, lookup and
# role from their own docs), warnings as errors, then opened in a headless chromium (tools/docs.sh)
docs: $(DOCS_VENV)/.installed chromium molecule-collections
	PATH=$(DOCS_VENV)/bin:$$PATH ANSIBLE_COLLECTIONS_PATH=$(MOLECULE_COLLECTIONS) tools/docs.sh
$(DOCS_VENV)/.installed: requirements-docs.txt
	test -x $(DOCS_VENV)/bin/python || $(PYTHON313) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/pip install -q --disable-pip-version-check -r requirements-docs.txt
	touch $@
chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

## collection-install: the collection as users install it: ansible-galaxy collection build (galaxy.yml's
# build_ignore), then install from the tarball into .build/installed (what `make demo` runs)
collection-install: venv
	rm -rf $(CURDIR)/.build/installed $(CURDIR)/.build/dist
	ansible-galaxy collection build $(CURDIR) --output-path $(CURDIR)/.build/dist
	ansible-galaxy collection install --force $(CURDIR)/.build/dist/sturdy-workers-*.tar.gz -p $(CURDIR)/.build/installed

collection-copy:
	rm -rf $(COLLECTION) && mkdir -p $(COLLECTION)
	git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t $(COLLECTION)
	# ansible-test lists a collection's files with git; the copy sits in an ignored folder, so give it its own.
	cd $(COLLECTION) && git init -q && git add -A

$(SANITY_VENV)/.installed: requirements.txt
	test -x $(SANITY_VENV)/bin/python || $(PYTHON313) -m venv $(SANITY_VENV)
	$(SANITY_VENV)/bin/pip install -q --disable-pip-version-check $$(grep '^ansible-core==' requirements.txt)
	mkdir -p $$HOME/.ansible/test/cache
	pipv=$$($(SANITY_VENV)/bin/python -c 'from ansible_test._internal.python_requirements import *; import re, inspect, ansible_test._internal.python_requirements as m; print(re.search(r"pip=.([0-9.]+).", inspect.getsource(m)).group(1))'); \
	  cp tools/ansible-test-get-pip.py $$HOME/.ansible/test/cache/get_pip_$${pipv//./_}.py
	touch $@

## sanity: ansible-test sanity on a copy under ansible_collections/sturdy/workers
sanity: $(SANITY_VENV)/.installed collection-copy
	cd $(COLLECTION) && PATH=$(SANITY_VENV)/bin:$$PATH ansible-test sanity --python 3.13 --requirements --color no
	# ansible-doc renders every module, filter, lookup and role (one run per plugin type: each run loads the collection)
	export ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/.build; \
	  ansible-doc $$(for m in plugins/modules/*.py; do echo sturdy.workers.$$(basename $$m .py); done) >/dev/null && \
	  ansible-doc -t filter $$(for f in plugins/filter/*.py; do echo sturdy.workers.$$(basename $$f .py); done) >/dev/null && \
	  ansible-doc -t lookup $$(for f in plugins/lookup/*.py; do echo sturdy.workers.$$(basename $$f .py); done) >/dev/null && \
	  ansible-doc -t role $$(for r in roles/*/; do echo sturdy.workers.$$(basename $$r); done) >/dev/null
	# The execution environment: ansible-builder accepts the definition and finds the collection's requirements.
	ansible-builder create -f execution-environment.yml -c .build/ee >/dev/null
	# (to a file first: grep -q stops reading at its match, and a pipe's writer would die of SIGPIPE)
	ansible-builder introspect --sanitize .build > .build/ee-introspect.txt && cat .build/ee-introspect.txt >&2
	grep -q '^- .packaging>=22  # from collection sturdy.workers' .build/ee-introspect.txt

## unit: pytest for plugins and module_utils
unit: venv promtool collection-copy
	cd $(COLLECTION) && PYTHONPATH=$(CURDIR)/.build python -m pytest -q tests/unit

## molecule: every scenario, both platforms, in lanes side by side (SCENARIOS="x y" runs only those)
# The hosts mostly wait (restarts, stop timeouts, smoke jobs, task streams), so three lanes run on two cores; each lane
# takes the next scenario of one queue, longest first (tools/molecule_lanes.sh). Every scenario has its own hosts and
# network. A scenario named twice runs twice: how the suite is measured with more scenarios than it has.
MOLECULE_SCENARIOS ?= faults deploy config ownapp release rq rabbitmq worker
MOLECULE_LANES ?= 3
# Molecule finds the collection through this link to the checkout (its prerun is off: see .config/molecule).
MOLECULE_COLLECTIONS := $(CURDIR)/.build/molecule-collections
molecule-collections:
	mkdir -p $(MOLECULE_COLLECTIONS)/ansible_collections/sturdy
	ln -sfn $(CURDIR) $(MOLECULE_COLLECTIONS)/ansible_collections/sturdy/workers

molecule: venv images promtool molecule-collections
	@for s in $(SCENARIOS); do case " $(MOLECULE_SCENARIOS) " in *" $$s "*) ;; \
	  *) echo "molecule/$$s is not in the queue: add it to MOLECULE_SCENARIOS in the Makefile"; exit 1;; esac; done
	ANSIBLE_COLLECTIONS_PATH=$(MOLECULE_COLLECTIONS) tools/molecule_lanes.sh $(MOLECULE_LANES) \
	  "$(if $(filter command line,$(origin SCENARIOS)),$(SCENARIOS),$(MOLECULE_SCENARIOS))"

## bench: the deploy against a hand-run floor, 1-8 hosts, no-op, backlog, Mitogen; ratios from one run and a chart
bench: venv images molecule-collections $(VENV)/.bench-installed
	ANSIBLE_COLLECTIONS_PATH=$(MOLECULE_COLLECTIONS) python tools/bench.py
$(VENV)/.bench-installed: requirements-bench.txt $(VENV)/.installed
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements-bench.txt
	touch $@

## bench-clean: remove the bench hosts and their network (the numbers stay in .bench/)
bench-clean:
	python tools/bench.py clean

## demo: local broker + app hosts, demo build 1 then build 2 while tasks flow; prints the deploy report
demo: venv images collection-install
	tools/demo.sh

## demo-clean: remove the demo hosts, their network and .demo/
demo-clean:
	tools/demo.sh clean

clean:
	rm -rf .build
