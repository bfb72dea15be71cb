# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: secret_layout
short_description: Where an app's secrets live on the host and the unit directives that load them
version_added: 0.1.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Computed in one place for the C(sturdy.workers.secrets) role, which writes the files, and the C(sturdy.workers.worker)
    role, which points every process type's unit at them.
  - "C(env_file): C(/etc/<app>/<app>.env), loaded with C(EnvironmentFile=)."
  - "C(credentials): C(/etc/<app>/credentials/<NAME>), loaded with C(LoadCredential=NAME:...); the process reads
    C($CREDENTIALS_DIRECTORY/NAME)."
  - "C(encrypted_credentials): C(/etc/<app>/credentials/<NAME>.cred), encrypted by C(systemd-creds) on the host and
    loaded with C(LoadCredentialEncrypted=NAME:...)."
options:
  _input:
    description: The application name (C(sturdy_app)).
    type: str
    required: true
  delivery:
    description: C(env_file), C(credentials) or C(encrypted_credentials).
    type: str
    required: true
  names:
    description: The secret names (the keys of C(sturdy_secrets)); no directives when empty.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Where the secrets go
  ansible.builtin.set_fact:
    secret_files: "{{ 'shop' | sturdy.workers.secret_layout('credentials', sturdy_secrets.keys() | list) }}"
"""

RETURN = r"""
_value:
  description:
    - C(delivery), C(directory) (C(/etc/<app>)), C(env_file) (path or none), C(credentials_directory),
      C(credential_files) (name to path) and C(directives) (unit lines, in order).
  type: dict
"""

from ansible.errors import AnsibleFilterError

# module_utils are imported inside the filter: see tests/unit/plugins/filter/test_filter_imports.py for why.


def secret_layout(app, delivery, names):
    from ansible_collections.sturdy.workers.plugins.module_utils.secret_delivery import SecretSpecError, layout

    try:
        return layout(str(app), str(delivery), [str(n) for n in names])
    except SecretSpecError as exc:
        raise AnsibleFilterError(f"secret_layout: {exc}") from None


class FilterModule:
    def filters(self):
        return {"secret_layout": secret_layout}
