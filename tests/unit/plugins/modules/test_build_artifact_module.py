"""The build_artifact module: check mode, and its failures naming the build (the builder is tested in module_utils)."""

from __future__ import annotations

import sys

from ansible_collections.sturdy.workers.plugins.modules import build_artifact


def test_the_module_in_check_mode_builds_nothing_and_a_failure_names_the_build(run_module, tmp_path):
    args = {"project": str(tmp_path / "nowhere"), "app": "ledger", "build_id": "b1", "dest": str(tmp_path / "dist")}
    result, calls = run_module(build_artifact, {**args, "_ansible_check_mode": True})
    assert (result["changed"], result["path"], calls) == (True, str(tmp_path / "dist" / "ledger-b1.tar.gz"), [])
    assert not (tmp_path / "dist").exists()
    result, calls = run_module(build_artifact, args, responses=[((sys.executable, "-m", "pip", "--version"),
                                                                 (0, "pip 24", ""))])
    assert result["failed"] and result["msg"].startswith(f"Build b1 of ledger: project={tmp_path / 'nowhere'} has no "
                                                         "pyproject.toml"), result
    result, dummy = run_module(build_artifact, args, responses=[((sys.executable, "-m", "pip", "--version"),
                                                                 (1, "", "No module named pip"))])
    assert result["failed"] and "has no pip (No module named pip)" in result["msg"], result
