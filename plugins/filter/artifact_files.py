# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: artifact_files
short_description: The regular files in a release artifact on the controller, with their modes
version_added: 0.2.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Lists the regular files of a C(.tar.gz) release artifact without unpacking it, so a preflight can check that
    every command a process type declares exists and is executable in the new release before any host changes.
  - Runs on the controller, where the artifact is.
options:
  _input:
    description: Path of the artifact on the controller.
    type: path
    required: true
"""

EXAMPLES = r"""
- name: The worker command is in the new release
  ansible.builtin.assert:
    that: "'bin/shop-worker' in (sturdy_artifact | sturdy.workers.artifact_files)"
"""

RETURN = r"""
_value:
  description: Member path (without a leading C(./)) to its permission bits as an integer.
  type: dict
"""

import tarfile

from ansible.errors import AnsibleFilterError


def artifact_files(path):
    try:
        with tarfile.open(str(path), "r:*") as tar:
            return {m.name.removeprefix("./"): m.mode & 0o7777 for m in tar.getmembers() if m.isfile()}
    except (OSError, tarfile.TarError) as exc:
        raise AnsibleFilterError(f"artifact_files: cannot read {path}: {exc}") from None


class FilterModule:
    def filters(self):
        return {"artifact_files": artifact_files}
