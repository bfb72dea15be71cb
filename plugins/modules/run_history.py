#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: run_history
short_description: The last deploys, rollbacks and restarts of an app on a host
version_added: 0.6.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Reads the app's history on this host, C(history.jsonl) beside its releases (under O(root)). Every deploy,
    rollback and restart that took the deploy lock appends one line when it ends (M(sturdy.workers.deploy_state),
    M(sturdy.workers.deploy_lock)) - when it started and ended, who ran it (the controller's user@host, and AWX's
    C(awx_user_name) and C(awx_job_id) when set), its kind, the release it went from and to, its result and the
    report's one-line summary. The file is only ever appended to; a line cut short by a crash is skipped.
  - P(sturdy.workers.history_lines#filter) merges the entries of several hosts into one line per run.
  - It changes nothing.
options:
  root:
    description: The app's root (P(sturdy.workers.app_plan#filter) C(root)), C(/srv/<app>) by default.
    type: path
    required: true
  last:
    description: How many of the newest entries to return.
    type: int
    default: 20
attributes:
  check_mode:
    support: full
    description: Reads only.
seealso:
  - plugin: sturdy.workers.history_lines
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Read the last ten runs on this host
  sturdy.workers.run_history:
    root: /srv/shop
    last: 10
  register: history
"""

RETURN = r"""
entries:
  description:
    - The newest O(last) entries, oldest first, each with C(run) (the run ID, the same on every host of the run),
      C(kind) (C(deploy), C(rollback), C(restart)), C(host), C(who), C(awx_user), C(awx_job), C(started),
      C(finished) (seconds since the epoch), C(from), C(to) (releases), C(result) (C(success), C(failed),
      C(rolled_back)) and C(summary). Fields a run did not have are left out.
  returned: always
  type: list
  elements: dict
path:
  description: The history file read.
  returned: always
  type: str
  sample: /srv/shop/history.jsonl
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sturdy.workers.plugins.module_utils.app_plan import root_paths
from ansible_collections.sturdy.workers.plugins.module_utils.history import read


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "last": {"type": "int", "default": 20},
        },
        supports_check_mode=True,
    )
    if module.params["last"] < 1:
        module.fail_json(msg=f"last={module.params['last']}: the number of runs to show must be 1 or more.")
    path = root_paths(module.params["root"])["history"]
    module.exit_json(changed=False, path=path, entries=read(path, module.params["last"]))


if __name__ == "__main__":
    main()
