from __future__ import annotations

import os

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.unit_files import UnitFileError, differing, write

TEMPLATE = "[Unit]\nDescription=shop worker %i\n\n[Service]\nExecStart=/srv/shop/current/venv/bin/celery worker\n"
TARGET = "[Unit]\nDescription=shop\n"


class Analyze:
    """systemd-analyze as the host answers it: refuses content with `refuse` in it."""

    def __init__(self, refuse="BadDirective"):
        self.refuse, self.calls = refuse, []

    def __call__(self, argv):
        self.calls.append(argv)
        path = argv[-1]
        with open(path, encoding="utf-8") as fh:
            content = fh.read()
        if self.refuse in content:
            return 1, "", f"{path}:3: Unknown key name '{self.refuse}' in section 'Service', ignoring.\n"
        return 0, "", ""


def test_only_missing_or_different_files_are_written_root_owned_0644(tmp_path):
    (tmp_path / "shop.target").write_text(TARGET)
    (tmp_path / "shop-worker@.service").write_text("old\n")
    analyze = Analyze()
    written = write(str(tmp_path), {"shop-worker@.service": TEMPLATE, "shop.target": TARGET,
                                    "shop-web@.service": TEMPLATE}, analyze, check=False)
    assert written == ["shop-web@.service", "shop-worker@.service"]
    assert (tmp_path / "shop-worker@.service").read_text() == TEMPLATE
    assert oct(os.stat(tmp_path / "shop-web@.service").st_mode & 0o777) == "0o644"
    # Verified under their unit names, the unchanged target not at all.
    assert [os.path.basename(argv[-1]) for argv in analyze.calls] == written
    assert write(str(tmp_path), {"shop-worker@.service": TEMPLATE}, analyze, check=False) == []


def test_a_unit_systemd_analyze_refuses_stops_every_write_and_names_it(tmp_path):
    (tmp_path / "shop.target").write_text("old\n")
    with pytest.raises(UnitFileError) as err:
        write(str(tmp_path), {"shop.target": TARGET, "shop-worker@.service": TEMPLATE + "BadDirective=1\n"},
              Analyze(), check=False)
    assert "systemd-analyze verify refused shop-worker@.service; nothing was written" in str(err.value)
    # What systemd-analyze said names the unit, not the scratch file.
    assert "shop-worker@.service:3: Unknown key name 'BadDirective'" in str(err.value)
    assert (tmp_path / "shop.target").read_text() == "old\n"
    assert not (tmp_path / "shop-worker@.service").exists()


def test_check_mode_names_what_would_be_written_and_writes_nothing(tmp_path):
    analyze = Analyze()
    assert write(str(tmp_path), {"shop.target": TARGET}, analyze, check=True) == ["shop.target"]
    assert not (tmp_path / "shop.target").exists() and not analyze.calls


def test_a_name_that_is_not_a_unit_file_is_refused_before_anything(tmp_path):
    with pytest.raises(UnitFileError, match="'../passwd' is not a unit file name"):
        differing(str(tmp_path), {"../passwd": "x"})


def test_a_unit_whose_mode_was_changed_by_hand_is_written_again(tmp_path):
    (tmp_path / "shop.target").write_text(TARGET)
    os.chmod(tmp_path / "shop.target", 0o666)
    assert write(str(tmp_path), {"shop.target": TARGET}, Analyze(), check=False) == ["shop.target"]
    assert oct(os.stat(tmp_path / "shop.target").st_mode & 0o777) == "0o644"
