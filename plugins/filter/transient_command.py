# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: transient_command
short_description: Run a command the way the app's units run, through systemd-run
version_added: 0.1.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Wraps an argv in C(systemd-run --pipe --wait --collect) with the app's user and group, a working directory and
    unit lines such as the C(EnvironmentFile=)/C(LoadCredential=) lines of P(sturdy.workers.secret_layout#filter), so a
    one-off command (a migration) gets the same identity and secrets as the units, and no secret passes through
    Ansible. Output comes back on stdout and stderr, the exit status is the command's.
options:
  _input:
    description: The command, an argv list.
    type: list
    elements: str
    required: true
  user:
    description: User to run as.
    type: str
    required: true
  group:
    description: Group to run as.
    type: str
    required: true
  workdir:
    description: Working directory.
    type: str
    required: true
  properties:
    description: Unit lines (C(Key=value)) for the transient unit.
    type: list
    elements: str
    default: []
  environment:
    description: Environment variables (not secrets; they are visible in the process list of systemd-run).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Migrate as the app would
  ansible.builtin.command:
    argv: >-
      {{ ['/srv/shop/releases/7/bin/shop-migrate']
         | sturdy.workers.transient_command('shop', 'shop', '/srv/shop/releases/7') }}
"""

RETURN = r"""
_value:
  description: The systemd-run argv.
  type: list
  elements: str
"""

# module_utils are imported inside the filter: see tests/unit/plugins/filter/test_filter_imports.py for why.


def transient_command(argv, user, group, workdir, properties=None, environment=None):
    from ansible_collections.sturdy.workers.plugins.module_utils.adapters import transient_argv

    return transient_argv(str(user), str(group), str(workdir), list(properties or []), dict(environment or {}),
                          [str(a) for a in argv])


class FilterModule:
    def filters(self):
        return {"transient_command": transient_command}
