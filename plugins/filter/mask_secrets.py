# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: mask_secrets
short_description: Mask the app's secret values in lines the app printed, before they are shown
version_added: 0.2.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Replaces every secret value, and the password of every secret that is a URL (alone and percent-decoded), with
    C(********) in a string, or in every string of a list or mapping.
  - Values shorter than 4 characters are left alone (they would mask ordinary words).
  - Used on a migration's output; the modules that relay journal lines mask on the host themselves.
options:
  _input:
    description: A string, or a list or mapping of strings.
    type: raw
    required: true
  secrets:
    description: Mapping of secret names to values (C(sturdy_secrets)).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Show the migration's output without the secrets it printed
  ansible.builtin.debug:
    msg: "{{ migrate.stdout_lines | sturdy.workers.mask_secrets(sturdy_secrets) }}"
"""

RETURN = r"""
_value:
  description: The input with every secret value replaced by C(********).
  type: raw
"""

from ansible.errors import AnsibleFilterError

# module_utils are imported inside the filter: see tests/unit/plugins/filter/test_filter_imports.py for why.


def mask_secrets(value, secrets):
    from ansible_collections.sturdy.workers.plugins.module_utils.secret_mask import masker

    if not isinstance(secrets, dict):
        raise AnsibleFilterError("mask_secrets: secrets must be a mapping of names to values (sturdy_secrets)")
    return masker(secrets.values())(value)


class FilterModule:
    def filters(self):
        return {"mask_secrets": mask_secrets}
