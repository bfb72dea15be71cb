#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: unit_files
short_description: Write an app's systemd unit files in one call, verified, and reload systemd once
version_added: 0.4.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Writes each unit of O(units) into O(directory) whose file is missing or has other content, root-owned C(0644),
    by rename (systemd never reads half a file). Files not named in O(units) are left alone.
  - Every changed unit is first checked with C(systemd-analyze verify --recursive-errors=no) under its own name; one
    that fails stops the task before any file is written, with what systemd-analyze said.
  - Then, when a file changed and O(daemon_reload) is on, C(systemctl daemon-reload) runs once.
  - One round trip for what the C(template) module takes one per file plus a reload; the content is rendered on the
    controller (the C(template) lookup).
options:
  directory:
    description: The unit directory, C(/etc/systemd/system).
    type: path
    default: /etc/systemd/system
  units:
    description:
      - Unit file name (C(shop-worker@.service), C(shop.target)) to its whole content.
      - Unit files must not hold secrets (C(systemctl cat) shows them to every user); the content is shown in the diff.
    type: dict
    required: true
  validate:
    description: Check each changed unit with C(systemd-analyze verify) before anything is written.
    type: bool
    default: true
  daemon_reload:
    description: Run C(systemctl daemon-reload) once when a file was written.
    type: bool
    default: true
extends_documentation_fragment:
  - sturdy.workers.systemd
attributes:
  check_mode:
    support: full
    description: Reports the files that would be written, with their diff; writes, verifies and reloads nothing.
  diff_mode:
    support: full
    description: The old and new content of each file written.
notes:
  - Run as root.
"""

EXAMPLES = r"""
- name: Write the template unit and the target
  sturdy.workers.unit_files:
    units:
      shop-worker@.service: "{{ lookup('ansible.builtin.template', 'process@.service.j2') }}"
      shop.target: "{{ lookup('ansible.builtin.template', 'app.target.j2') }}"
  register: written
"""

RETURN = r"""
written:
  description: The unit files written (in check mode, that would be), by name.
  returned: always
  type: list
  elements: str
  sample: [shop-worker@.service]
reloaded:
  description: Whether systemd was reloaded.
  returned: always
  type: bool
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import ENV
from ansible_collections.sturdy.workers.plugins.module_utils.unit_files import UnitFileError, differing, write


def main():
    module = AnsibleModule(
        argument_spec={
            "directory": {"type": "path", "default": "/etc/systemd/system"},
            "units": {"type": "dict", "required": True},
            "validate": {"type": "bool", "default": True},
            "daemon_reload": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    units = {str(name): str(content) for name, content in p["units"].items()}

    def run(argv):
        tool = module.get_bin_path(argv[0], required=True)
        return module.run_command([tool, *argv[1:]], environ_update=ENV)

    try:
        before = differing(p["directory"], units)
        written = write(p["directory"], units, run, module.check_mode, p["validate"], before)
    except (UnitFileError, OSError) as exc:
        module.fail_json(msg=str(exc))
    reloaded = bool(written) and p["daemon_reload"] and not module.check_mode
    if reloaded:
        rc, dummy, err = run(["systemctl", "daemon-reload"])
        if rc != 0:
            module.fail_json(msg=f"systemctl daemon-reload failed (rc {rc}): {err.strip()}; the unit files "
                                 f"{', '.join(written)} are written", written=written)
    result = {"changed": bool(written), "written": written, "reloaded": reloaded}
    if module._diff and written:
        result["diff"] = [{"before_header": os.path.join(p["directory"], name), "before": before[name],
                           "after_header": os.path.join(p["directory"], name), "after": units[name]}
                          for name in written]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
