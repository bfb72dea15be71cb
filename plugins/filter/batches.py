# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: batches
short_description: The host batches of a rollout, canary first by default
version_added: 0.4.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Turns C(sturdy_deploy_serial) into the value of a play's C(serial). Unset, it is C([1, "100%"]), a canary and
    then the rest. One host is switched, restarted and proven by its smoke jobs, then every other host at once (each
    host still restarts its own instances one at a time). A failure on the canary stops the run before any other host
    is switched or restarted.
  - Takes what Ansible's C(serial) takes (a count, a percentage, or a list of them, whose last entry repeats), also
    written as text on the command line (C(-e 'sturdy_deploy_serial=[1, "25%"]')), and refuses anything else naming
    the variable and the fix, so a typo fails in preflight instead of inside Ansible's batching.
options:
  _input:
    description: The value of C(sturdy_deploy_serial); V(null) or empty for the default.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Switch and restart, host batch by host batch
  hosts: apps
  # The collection's playbooks use query('sturdy.workers.deploy_batches'), which also reads a group_vars value.
  serial: "{{ sturdy_deploy_serial | default('') | sturdy.workers.batches }}"
  tasks: []
"""

RETURN = r"""
_value:
  description: A list of batch sizes (positive counts or percentages C("N%") from 1 to 100).
  type: list
  elements: raw
"""

import json
import re

from ansible.errors import AnsibleFilterError

DEFAULT = [1, "100%"]
PERCENT = re.compile(r"^\s*(\d+)\s*%\s*$")


def _entry(value, raw):
    # Read as text: 2 and "2" alike, while True ("True"), None and 2.5 are refused.
    text = str(value).strip()
    if text.isdigit() and int(text) >= 1:
        return int(text)
    match = PERCENT.match(text)
    if match and 0 < int(match.group(1)) <= 100:
        return f"{match.group(1)}%"
    raise AnsibleFilterError(
        f"sturdy_deploy_serial={raw!r}: {value!r} is not a batch size. Give a count of hosts (2), a percentage "
        '("25%"), or a list of them whose last entry repeats ([1, "25%"]: one canary host, then a quarter of the '
        "hosts per batch; \"100%\" for every host at once); leave it unset for a canary and then the rest at once")


def batches(value):
    raw = value
    if value is None or value == "":
        return list(DEFAULT)
    if isinstance(value, str) and value.strip().startswith("["):
        text = value.strip()
        if not text.endswith("]"):
            # -e 'sturdy_deploy_serial=[1, 25%]' is split at the space by Ansible's key=value parsing.
            raise AnsibleFilterError(
                f"sturdy_deploy_serial={raw!r} is cut short: a list on the command line needs no spaces "
                "(-e 'sturdy_deploy_serial=[1,25%]') or JSON (-e '{\"sturdy_deploy_serial\": [1, \"25%\"]}')")
        try:
            value = json.loads(text)
        except ValueError:
            # The shell ate the quotes: [1,25%] reaches here as text.
            value = [part.strip().strip("\"'") for part in text[1:-1].split(",") if part.strip()]
    if not isinstance(value, (list, tuple)):
        value = [value]
    if not value:
        return list(DEFAULT)
    return [_entry(v, raw) for v in value]


class FilterModule:
    def filters(self):
        return {"batches": batches}
