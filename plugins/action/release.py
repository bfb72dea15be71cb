# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The release module's upload: with `src`, the artifact goes to Ansible's temporary directory on the host and the
module installs it from there, in the same task (no directory, copy and install as three tasks)."""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        src = args.pop("src", None)
        if src and args.get("artifact"):
            raise AnsibleActionFail("src and artifact are mutually exclusive: src is on the controller, artifact on "
                                    "the host")
        wrap_async = self._task.async_val
        try:
            if src:
                try:
                    local = self._find_needle("files", src)
                except AnsibleError:
                    raise AnsibleActionFail(f"src={src} is not a file on the controller (looked in files/ and beside "
                                            "the playbook). Build the artifact first (sturdy.workers.build) or point "
                                            "sturdy_artifact at it") from None
                if not self._task.check_mode:  # check mode installs nothing, so it needs no upload
                    self._make_tmp_path()
                    # The file keeps its name: RELEASE.json records it.
                    tmpdir = self._connection._shell.tmpdir
                    remote = self._connection._shell.join_path(tmpdir, os.path.basename(local))
                    self._transfer_file(local, remote)
                    self._fixup_perms2((tmpdir, remote), execute=False)
                    args.update(artifact=remote, remove_artifact=True)
            result.update(self._execute_module(module_name="sturdy.workers.release", module_args=args,
                                               task_vars=task_vars, wrap_async=wrap_async))
        finally:
            if not wrap_async:  # an async job's wrapper removes the directory once the module is done
                self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
