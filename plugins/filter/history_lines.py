# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: history_lines
short_description: The fleet's deploys, rollbacks and restarts merged, newest first, one line each
version_added: 0.6.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Takes each host's history entries (M(sturdy.workers.run_history) RV(sturdy.workers.run_history#module:entries))
    and merges the entries of one run (the same run ID on every host it touched) into one line - when it ended, its
    kind, the releases it went from and to, its result, how long it took, who ran it (and the AWX job and user), on
    how many hosts, and the report's summary. A run found on some of the hosts read only says on which, and which
    did not record it (a host added since, one the run did not reach, or one whose record was lost).
  - Where hosts differ (releases, results), each value is given with its hosts.
options:
  _input:
    description: Host name to its list of entries.
    type: dict
    required: true
  last:
    description: How many runs to return, the newest.
    type: int
    default: 20
  hosts:
    description: The hosts that were read (default, those in the input). A host that could not be read is left out.
    type: list
    elements: str
  unread:
    description: The hosts that could not be read; a last line names them (their runs are missing).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Print the fleet's last runs
  ansible.builtin.debug:
    msg: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, ['history', 'entries'])))
             | sturdy.workers.history_lines(last=10) }}"
"""

RETURN = r"""
_value:
  description:
    - One line per run, newest first; without any, one line saying that none is recorded. A last line names the
      O(unread) hosts.
  type: list
  elements: str
"""

# module_utils are imported inside the filter: see tests/unit/plugins/filter/test_filter_imports.py for why.


def history_lines(entries_by_host, last=20, hosts=None, unread=None):
    from ansible_collections.sturdy.workers.plugins.module_utils.history import describe, merge

    entries_by_host = dict(entries_by_host or {})
    lines = [describe(run) for run in merge(entries_by_host, hosts)[:int(last)]]
    if not lines:
        lines = [f"No deploy, rollback or restart is recorded on {', '.join(sorted(hosts or entries_by_host))} (the "
                 "history starts with the first run of a collection version that writes it)."]
    if unread:
        lines.append(f"NOT READ: {', '.join(unread)} (unreachable or failed): their runs are missing above.")
    return lines


class FilterModule:
    def filters(self):
        return {"history_lines": history_lines}
