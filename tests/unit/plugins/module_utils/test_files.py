from __future__ import annotations

import os

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.files import NotADirectory, own_directory


def test_a_link_to_a_directory_is_followed_and_the_directory_corrected(tmp_path):
    data = tmp_path / "data-shop"
    data.mkdir(mode=0o700)
    os.symlink(data, tmp_path / "shop")
    assert own_directory(str(tmp_path / "shop"), 0o755, check=False)
    assert oct(os.stat(data).st_mode & 0o777) == "0o755" and os.path.islink(tmp_path / "shop")
    assert not own_directory(str(tmp_path / "shop"), 0o755, check=False)


def test_a_file_where_the_directory_goes_is_refused_and_check_mode_creates_nothing(tmp_path):
    (tmp_path / "shop").write_text("x")
    with pytest.raises(NotADirectory, match="exists and is not a directory"):
        own_directory(str(tmp_path / "shop"), 0o755, check=False)
    assert own_directory(str(tmp_path / "new"), 0o755, check=True) and not (tmp_path / "new").exists()


def test_missing_parents_are_made_root_owned_0755_only_when_asked(tmp_path):
    old = os.umask(0o077)  # a strict umask does not make the parents unreadable to the app's accounts
    try:
        with pytest.raises(FileNotFoundError):
            own_directory(str(tmp_path / "apps" / "srv" / "shop"), 0o700, check=False)
        assert own_directory(str(tmp_path / "apps" / "srv" / "shop"), 0o700, check=False, parents=True)
    finally:
        os.umask(old)
    made = (tmp_path / "apps", tmp_path / "apps" / "srv", tmp_path / "apps" / "srv" / "shop")
    modes = [oct(os.stat(d).st_mode & 0o777) for d in made]
    assert modes == ["0o755", "0o755", "0o700"]
    assert {os.stat(tmp_path / "apps").st_uid, os.stat(tmp_path / "apps" / "srv").st_gid} == {0}
