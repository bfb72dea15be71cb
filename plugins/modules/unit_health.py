#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: unit_health
short_description: Read the state of systemd units and of the services grouped by a target
version_added: 0.1.0
author: sturdy.workers contributors (@sturdy-workers)
extends_documentation_fragment:
  - sturdy.workers.systemd
  - sturdy.workers.systemd.read_only
description:
  - Reads the host's systemd version, the services a target groups (its C(Wants=) and C(ConsistsOf=), that is,
    enabled instances and instances that are C(PartOf=) it), and the state of those services and of O(units),
    in three C(systemctl) calls.
  - Tells for each running unit whether it runs an older definition than the one on disk, or older secrets
    (C(Outdated)).
  - Optionally finds unit files by name pattern and tells whether each carries a marker line, so a caller can
    refuse to overwrite units it did not write.
  - Never changes anything.
options:
  units:
    description: Units to report on, besides the members of O(target).
    type: list
    elements: str
    default: []
  target:
    description: A target whose member services are reported. A target systemd does not know has no members.
    type: str
  unit_files:
    description:
      - Shell-style patterns of unit file names to look up in the system unit directories (C(/etc/systemd/system)
        first, then C(/run), C(/usr/local/lib), C(/usr/lib), C(/lib)).
    type: list
    elements: str
    default: []
  marker:
    description: A whole line whose presence in a unit file found through O(unit_files) is reported.
    type: str
  properties:
    description:
      - Properties to read for each unit, as named by C(systemctl show).
      - C(ActiveState), C(MainPID), C(ExecMainStartTimestampMonotonic), C(FragmentPath), C(DropInPaths) and
        C(EnvironmentFiles) are always read as well; they decide C(Outdated).
    type: list
    elements: str
    default: [Id, LoadState, ActiveState, SubState, UnitFileState, Result, NRestarts, MainPID, InvocationID, NeedDaemonReload]
requirements:
  - systemd
"""

EXAMPLES = r"""
- name: Read the app's instances
  sturdy.workers.unit_health:
    target: shop.target
  register: shop_units

- name: Show failed instances
  ansible.builtin.debug:
    msg: "{{ shop_units.units | dict2items | selectattr('value.ActiveState', '==', 'failed') | map(attribute='key') }}"
"""

RETURN = r"""
systemd_version:
  description: The major version of the host's systemd.
  returned: always
  type: int
  sample: 257
members:
  description: Service units the target wants or that are part of it, sorted.
  returned: always
  type: list
  elements: str
  sample: [shop-worker@1.service, shop-worker@2.service]
units:
  description:
    - For each requested unit and member, the properties as strings, plus C(Outdated), C(StartedAt) (when its
      main process started, seconds since the epoch; null when none runs), C(StartedMonotonic) (the same on the
      monotonic clock) and C(Cwd) (the working directory of its main process, resolved; null when it is not
      running).
    - C(Outdated) is true when the unit is running and its main process started before its unit file, a drop-in,
      one of its environment files or a credential file it loads (C(LoadCredential=), C(LoadCredentialEncrypted=))
      last changed; a restart picks up the new definition.
  returned: always
  type: dict
  sample:
    shop-worker@1.service:
      Id: shop-worker@1.service
      ActiveState: active
      UnitFileState: enabled
      NRestarts: "0"
      Outdated: false
      StartedAt: 1796486400.125
      StartedMonotonic: 86.125
unit_files:
  description: Unit files matching O(unit_files), the one systemd uses for each name, and whether it has O(marker).
  returned: always
  type: dict
  sample:
    shop-worker@.service:
      path: /etc/systemd/system/shop-worker@.service
      marker: true
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import (
    DEFAULT_PROPERTIES,
    SystemdQueryError,
    add_cwd,
    find_unit_files,
    query,
    systemctl_runner,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "units": {"type": "list", "elements": "str", "default": []},
            "target": {"type": "str"},
            "unit_files": {"type": "list", "elements": "str", "default": []},
            "marker": {"type": "str"},
            "properties": {"type": "list", "elements": "str", "default": list(DEFAULT_PROPERTIES)},
        },
        supports_check_mode=True,
    )
    run = systemctl_runner(module)
    try:
        result = query(run, module.params["units"], module.params["target"], module.params["properties"])
    except SystemdQueryError as exc:
        module.fail_json(msg=str(exc))
    add_cwd(result["units"])
    result["unit_files"] = find_unit_files(module.params["unit_files"], module.params["marker"])
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
