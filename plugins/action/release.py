# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The release module's upload: with `src`, the artifact goes to Ansible's temporary directory on the host and the
module installs it from there, in the same task (no directory, copy and install as three tasks)."""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        src = args.pop("src", None)
        if src and args.get("artifact"):
            raise AnsibleActionFail("src and artifact are mutually exclusive: src is on the controller, artifact on "
                                    "the host")
        try:
            if src and not self._task.check_mode:
                # Check mode installs nothing, so it needs no upload.
                try:
                    local = self._find_needle("files", src)
                except AnsibleError as exc:
                    raise AnsibleActionFail(f"src={src}: {exc}. Build the artifact first (sturdy.workers.build) "
                                            "or point sturdy_artifact at it") from exc
                self._make_tmp_path()
                # The file keeps its name: RELEASE.json records it.
                remote = self._connection._shell.join_path(self._connection._shell.tmpdir, os.path.basename(local))
                self._transfer_file(local, remote)
                self._fixup_perms2((self._connection._shell.tmpdir, remote))
                args.update(artifact=remote, remove_artifact=True)
            result.update(self._execute_module(module_name="sturdy.workers.release", module_args=args,
                                               task_vars=task_vars))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
