# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: artifact_missing
short_description: The commands a release artifact on the controller does not provide
version_added: 0.1.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Reads the regular files of a C(.tar.gz) release artifact without unpacking it and tells which of the given paths
    inside the release are missing or not executable, so a preflight refuses a build before any host changes.
  - Paths under C(venv/) are skipped; the virtualenv is built on the host from the wheelhouse, and the release
    module checks them right after the install, before anything switches.
  - Runs on the controller, where the artifact is.
options:
  _input:
    description: Path of the artifact on the controller.
    type: path
    required: true
  executables:
    description: Paths inside the release mapped to what declares them (the C(executables) of P(sturdy.workers.app_plan#filter)).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Every command is in the new release
  ansible.builtin.assert:
    that: __missing | length == 0
    fail_msg: "{{ __missing | join('; ') }}"
  vars:
    __missing: "{{ sturdy_artifact | sturdy.workers.artifact_missing({'bin/shop-worker': 'the worker command'}) }}"
"""

RETURN = r"""
_value:
  description: One line per problem, C(<what declares it> is missing) or C(<what declares it> is not executable).
  type: list
  elements: str
"""

import tarfile

from ansible.errors import AnsibleFilterError


def artifact_missing(path, executables):
    try:
        with tarfile.open(str(path), "r:*") as tar:
            modes = {m.name.removeprefix("./"): m.mode for m in tar.getmembers() if m.isfile()}
    except (OSError, tarfile.TarError) as exc:
        raise AnsibleFilterError(f"artifact_missing: cannot read {path}: {exc}") from None
    problems = []
    for member, what in sorted(dict(executables).items()):
        if member.startswith("venv/"):
            continue
        if member not in modes:
            problems.append(f"{what} is missing")
        elif not modes[member] & 0o111:
            problems.append(f"{what} is not executable")
    return problems


class FilterModule:
    def filters(self):
        return {"artifact_missing": artifact_missing}
