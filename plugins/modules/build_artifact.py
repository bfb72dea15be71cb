#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: build_artifact
short_description: Build the release artifact of a Python project, for the hosts' Pythons and platform
version_added: 0.4.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Runs on the controller (C(delegate_to=localhost)). Builds the project's wheel with its own build backend
    (C(pip wheel)), downloads every dependency as a wheel for each Python in O(python_versions) on O(platforms) (binary
    wheels where no pure one exists), and writes C(<dest>/<app>-<build_id>.tar.gz) with its C(.sha256) beside it, the
    artifact the C(sturdy.workers.release) role installs offline. The format (version 1) is specified in docs/apps.md, "The artifact".
  - The dependencies are walked with each TARGET's markers and wheel tags, not the controller's, so the wheelhouse holds
    exactly what each host installs. A requirement no wheel satisfies for a target fails the build, naming it, the
    Python and the platform; the deploy never meets it.
  - Reproducible. Entries are sorted, owned by root, and dated 1980-01-01, the app's wheel is normalized the same way,
    and C(SOURCE_DATE_EPOCH) is set for the build backend. The same project, dependencies and options give the same
    bytes. Pin the dependencies (O(constraints)) so that the same inputs stay the same.
  - A build ID names one artifact. An existing artifact with the same bytes is left as it is (C(changed=false)). One with
    other bytes fails the build and stays as it is.
  - Uses the pip of the Python that runs the module (C(python -m pip)) with the controller's pip configuration (index,
    certificates); O(index_url), O(find_links) and O(no_index) add to it.
options:
  project:
    description: The project directory (C(pyproject.toml), C(setup.cfg) or C(setup.py)) pip builds the app's wheel from.
    type: path
    required: true
  app:
    description: The app's name as C(sturdy_app) gives it; the artifact is C(<app>-<build_id>.tar.gz).
    type: str
    required: true
  build_id:
    description: The build ID (C(sturdy_build_id)) the artifact is for; it is written into C(MANIFEST.json).
    type: str
    required: true
  dest:
    description: Directory the artifact and its C(.sha256) are written to (created if missing).
    type: path
    required: true
  python_versions:
    description: Every Python (major.minor) the hosts run; each gets the wheels it installs.
    type: list
    elements: str
    default: ['3.11', '3.13']
  platforms:
    description:
      - The hosts' platform as wheel tags; C(manylinux_2_36_x86_64) means glibc 2.36 or newer (Debian 12 and 13) and
        takes manylinux wheels of any older glibc too.
      - Name the oldest glibc among the hosts, e.g. C(manylinux_2_28_x86_64) for RHEL 8 (glibc 2.28),
        C(manylinux_2_31_x86_64) for Ubuntu 20.04, C(manylinux_2_36_aarch64) for Debian 12 on ARM.
    type: list
    elements: str
    default: [manylinux_2_36_x86_64]
  constraints:
    description: The project's lock or requirements file (C(name==version) lines), passed to pip as constraints so that
      the same inputs resolve the same versions. It pins versions; what is installed is the app and its dependencies.
    type: path
  commit:
    description: The source commit, recorded in C(MANIFEST.json) (and by the release role in C(RELEASE.json)).
    type: str
    default: ''
  index_url:
    description: The package index to use instead of pip's configured one.
    type: str
  find_links:
    description: Directories (or URLs) of wheels to use besides the index, e.g. wheels built in-house.
    type: list
    elements: str
    default: []
  no_index:
    description: Use O(find_links) only (an air-gapped build).
    type: bool
    default: false
notes:
  - Supports check mode (nothing is built; C(changed) says whether the artifact is missing).
seealso:
  - module: sturdy.workers.release
requirements:
  - pip for the Python that runs the module, and the build backend the project names (from the index or O(find_links))
"""

EXAMPLES = r"""
- name: Build the artifact of build 2026.12.03-1 from the checkout
  sturdy.workers.build_artifact:
    project: "{{ playbook_dir }}/../myapp"
    app: myapp
    build_id: "2026.12.03-1"
    commit: "{{ lookup('ansible.builtin.pipe', 'git -C ' ~ playbook_dir ~ '/../myapp rev-parse HEAD') }}"
    constraints: "{{ playbook_dir }}/../myapp/requirements.lock"
    dest: "{{ playbook_dir }}/dist"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
path:
  description: The artifact, C(<dest>/<app>-<build_id>.tar.gz); its checksum is in C(<path>.sha256).
  returned: always
  type: str
sha256:
  description: The artifact's sha256 (null in check mode).
  returned: always
  type: str
manifest:
  description: The artifact's C(MANIFEST.json) (null in check mode).
  returned: always
  type: dict
"""

import os
import sys

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sturdy.workers.plugins.module_utils.artifact_build import PACKAGING_ERROR, BuildError
from ansible_collections.sturdy.workers.plugins.module_utils.artifact_build import build, write


def main():
    module = AnsibleModule(
        argument_spec={
            "project": {"type": "path", "required": True},
            "app": {"type": "str", "required": True},
            "build_id": {"type": "str", "required": True},
            "dest": {"type": "path", "required": True},
            "python_versions": {"type": "list", "elements": "str", "default": ["3.11", "3.13"]},
            "platforms": {"type": "list", "elements": "str", "default": ["manylinux_2_36_x86_64"]},
            "constraints": {"type": "path"},
            "commit": {"type": "str", "default": ""},
            "index_url": {"type": "str"},
            "find_links": {"type": "list", "elements": "str", "default": []},
            "no_index": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    if PACKAGING_ERROR:
        module.fail_json(msg=f"build_artifact runs on the controller, where ansible-core brings Python's packaging "
                             f"library; this Python lacks it ({PACKAGING_ERROR}). Run it with delegate_to: localhost")
    path = os.path.join(p["dest"], f"{p['app']}-{p['build_id']}.tar.gz")
    if module.check_mode:
        module.exit_json(changed=not os.path.exists(path), path=path, sha256=None, manifest=None)
    rc, dummy, err = module.run_command([sys.executable, "-m", "pip", "--version"])
    if rc != 0:
        module.fail_json(msg=f"{sys.executable} has no pip ({err.strip()}): build_artifact runs pip on the controller. "
                             "Install pip there (python3 -m ensurepip), or run the module with a Python that has it")
    options = ["--index-url", p["index_url"]] if p["index_url"] else []
    for link in p["find_links"]:
        options += ["--find-links", link]
    if p["no_index"]:
        options.append("--no-index")

    def run(argv, env):
        return module.run_command(argv, environ_update=env)

    try:
        built = build(p["project"], p["app"], p["build_id"], p["python_versions"], p["platforms"], run,
                      [sys.executable, "-m", "pip"], commit=p["commit"], constraints=p["constraints"] or "",
                      pip_options=options)
        done = write(p["dest"], p["app"], p["build_id"], built["files"])
    except BuildError as exc:
        module.fail_json(msg=f"Build {p['build_id']} of {p['app']}: {exc}")
    module.exit_json(changed=done["changed"], path=done["path"], sha256=done["sha256"], manifest=built["manifest"])


if __name__ == "__main__":
    main()
