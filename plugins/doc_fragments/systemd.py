# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    # The platform of the modules that talk to systemd (systemctl, journalctl, systemd-run).
    DOCUMENTATION = r"""
attributes:
  platform:
    support: full
    platforms: posix
    description: Needs systemd as the service manager (C(systemctl), C(journalctl), C(systemd-run)).
"""

    # Modules that only read (unit_health, app_status, unit_diagnosis): sturdy.workers.systemd.read_only.
    READ_ONLY = r"""
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Changes nothing, so there is nothing to show.
"""
