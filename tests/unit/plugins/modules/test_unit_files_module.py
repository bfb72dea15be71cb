from __future__ import annotations

from ansible_collections.sturdy.workers.plugins.modules import unit_files

TARGET = "[Unit]\nDescription=shop\n"


def test_one_reload_after_the_files_are_written_with_their_diff(run_module, tmp_path):
    (tmp_path / "shop.target").write_text("[Unit]\n")
    args = {"directory": str(tmp_path), "units": {"shop.target": TARGET}, "_ansible_diff": True}
    result, calls = run_module(unit_files, args, [(["/usr/bin/systemctl"], (0, "", ""))])
    assert result["changed"] and result["written"] == ["shop.target"] and result["reloaded"]
    assert [c[1:] for c in calls] == [["verify", "--recursive-errors=no", calls[0][-1]], ["daemon-reload"]]
    assert result["diff"] == [{"before_header": f"{tmp_path}/shop.target", "before": "[Unit]\n",
                               "after_header": f"{tmp_path}/shop.target", "after": TARGET}]
    # Nothing differs now: no verify, no reload.
    result, calls = run_module(unit_files, args, [])
    assert not result["changed"] and not result["reloaded"] and calls == []


def test_check_mode_writes_and_reloads_nothing(run_module, tmp_path):
    result, calls = run_module(unit_files, {"directory": str(tmp_path), "units": {"shop.target": TARGET},
                                            "_ansible_check_mode": True}, [])
    assert result["changed"] and result["written"] == ["shop.target"] and not result["reloaded"] and calls == []
    assert not (tmp_path / "shop.target").exists()
