# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: file_sha256
short_description: The SHA-256 of a file on the controller, or an empty string when it is not a regular file
version_added: 0.4.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Reads a file on the controller (a release artifact) and returns its SHA-256 in hex, in the templating process.
    It is what a C(stat) task delegated to localhost returns as C(checksum), without its round trip.
  - A path that does not exist, or is not a regular file (a directory, a broken link), gives an empty string; a file
    that exists but cannot be read fails, naming it.
options:
  _input:
    description: Path on the controller.
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Compare the artifact with its published checksum
  ansible.builtin.assert:
    that: sturdy_artifact | sturdy.workers.file_sha256 == published.split()[0]
  vars:
    published: "{{ lookup('ansible.builtin.file', sturdy_artifact ~ '.sha256') }}"
"""

RETURN = r"""
_value:
  description: The SHA-256 in lower-case hex, or an empty string.
  type: str
"""

import hashlib
import os
import stat

from ansible.errors import AnsibleFilterError


def file_sha256(path):
    try:
        if not stat.S_ISREG(os.stat(str(path)).st_mode):
            return ""
        digest = hashlib.sha256()
        with open(str(path), "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise AnsibleFilterError(f"file_sha256: cannot read {path}: {exc}") from None
    return digest.hexdigest()


class FilterModule:
    def filters(self):
        return {"file_sha256": file_sha256}
