# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    # Filters that pick hosts of a play by each host's app plan (queue_host, queue_readers).
    DOCUMENTATION = r"""
options:
  _input:
    description: The hosts, in order (for example C(ansible_play_hosts)).
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
  plan:
    description: The name of the host fact holding each host's app plan (P(sturdy.workers.app_plan#filter)).
    type: str
    required: true
"""
