# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    # The modules whose state is one lock file beside the app's releases (deploy_lock, maintenance_lock).
    DOCUMENTATION = r"""
attributes:
  diff_mode:
    support: none
    description: Not a content change.
  platform:
    support: full
    platforms: posix
    description: Any POSIX host; the lock is a file beside the app's releases.
"""
