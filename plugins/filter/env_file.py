# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: env_file
short_description: Render secrets as a systemd environment file, every value passed through verbatim
version_added: 0.1.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - One C(NAME="value") line per secret, sorted by name. Inside the double quotes C(\), C("), C($) and the backquote
    are escaped, so systemd (and C(sh)) hand the value to the process exactly as given, with no expansion.
  - A value with a line break or another control character cannot be carried by an environment file and is refused;
    use credentials for keys and certificates.
  - Error messages name the secret, never its value.
options:
  _input:
    description: Mapping of secret names to values (C(sturdy_secrets)).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Write the app's environment file
  ansible.builtin.copy:
    content: "{{ sturdy_secrets | sturdy.workers.env_file }}"
    dest: /etc/shop/shop.env
    mode: "0640"
  no_log: true
"""

RETURN = r"""
_value:
  description: The file's content.
  type: str
"""

from ansible.errors import AnsibleFilterError

# module_utils are imported inside the filter: see tests/unit/plugins/filter/test_filter_imports.py for why.


def env_file(secrets):
    from ansible_collections.sturdy.workers.plugins.module_utils.secret_delivery import SecretSpecError, env_file as render

    if not isinstance(secrets, dict):
        raise AnsibleFilterError("env_file: sturdy_secrets must be a mapping of names to values")
    try:
        return render(secrets)
    except SecretSpecError as exc:
        raise AnsibleFilterError(f"env_file: {exc}") from None


class FilterModule:
    def filters(self):
        return {"env_file": env_file}
