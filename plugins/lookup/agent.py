# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: agent
short_description: The files of this collection's worker agent package
version_added: 0.4.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - The worker agent package, file name to source, as the P(sturdy.workers.release#module) module writes it into a
    release's venv (C(site-packages/sturdy_agent/)) - the modules of C(roles/release/files/sturdy_agent/) and the
    collection's shared names (C(plugins/module_utils/names.py)) as its C(names.py).
  - P(sturdy.workers.app_plan#filter)'s C(agent_digest) is the digest of the same files.
options: {}
"""

EXAMPLES = r"""
- name: Install build 42 with the agent
  sturdy.workers.release:
    root: /srv/shop
    build_id: "42"
    src: shop-42.tar.gz
    agent: "{{ lookup('sturdy.workers.agent') }}"
"""

RETURN = r"""
_raw:
  description: One dictionary, file name to source.
  type: list
  elements: dict
"""

import os

from ansible.plugins.lookup import LookupBase

from ansible_collections.sturdy.workers.plugins.module_utils.releases import agent_package

# plugins/lookup/ is two levels below the collection's root.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        return [agent_package(ROOT)]
