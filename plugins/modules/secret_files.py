#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: secret_files
short_description: Write an app's secrets as its units load them, in one call, values never shown
version_added: 0.4.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Writes the files of O(layout) (the P(sturdy.workers.secret_layout#filter) filter's output) for the deliveries
    C(env_file) and C(credentials); C(encrypted_credentials) is the secrets role's (systemd-creds on the host).
  - C(env_file) - creates the system group O(group) when it is missing, the directory C(/etc/<app>) (C(0755)
    root) and the environment file (C(0640) root:O(group)); no secrets, no file.
  - C(credentials) - the directory C(/etc/<app>) and the root-only credential store (C(0700)), and one file per
    secret (C(0600) root), which systemd hands to the service (C(LoadCredential=)).
  - A file is replaced (by rename, with its owner and mode from the start) only when its content, owner or mode
    differs. Values never appear in the result, the diff or an error.
options:
  layout:
    description: Where the secrets go (P(sturdy.workers.secret_layout#filter)).
    type: dict
    required: true
  values:
    description: Secret name to value (V(null) is an empty value).
    type: dict
    required: true
  group:
    description: The group that may read the environment file (created as a system group when missing).
    type: str
extends_documentation_fragment:
  - sturdy.workers.systemd
attributes:
  check_mode:
    support: full
    description: Reports what would be created or written; changes nothing.
  diff_mode:
    support: none
    description: The files hold secrets; RV(written) names them.
notes:
  - Run as root.
"""

EXAMPLES = r"""
- name: Write the secrets
  sturdy.workers.secret_files:
    layout: "{{ 'shop' | sturdy.workers.secret_layout('env_file', sturdy_secrets.keys()) }}"
    values: "{{ sturdy_secrets }}"
    group: shop
  no_log: true
"""

RETURN = r"""
written:
  description: The paths created or written (in check mode, that would be).
  returned: always
  type: list
  elements: str
  sample: [/etc/shop, /etc/shop/shop.env]
"""

import grp

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sturdy.workers.plugins.module_utils.secret_delivery import (
    SecretSpecError,
    wanted_files,
    write_secret_files,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "layout": {"type": "dict", "required": True},
            "values": {"type": "dict", "required": True, "no_log": True},
            "group": {"type": "str"},
        },
        supports_check_mode=True,
    )
    p = module.params
    written = []
    group = p["group"] if p["layout"].get("delivery") == "env_file" else None
    try:
        if group:
            try:
                gid = grp.getgrnam(group).gr_gid
            except KeyError:
                written.append(f"group {group}")
                gid = None
                if not module.check_mode:
                    rc, dummy, err = module.run_command([module.get_bin_path("groupadd", required=True), "--system",
                                                         "--", group])
                    if rc != 0:
                        module.fail_json(msg=f"groupadd --system {group} failed (rc {rc}): {err.strip()}")
                    gid = grp.getgrnam(group).gr_gid
        else:
            gid = 0
        directories, files = wanted_files(p["layout"], p["values"], gid)
        written += write_secret_files(directories, files, module.check_mode)
    except (SecretSpecError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=bool(written), written=written)


if __name__ == "__main__":
    main()
