from __future__ import annotations

import hashlib
import os

from ansible_collections.sturdy.workers.plugins.filter.file_sha256 import file_sha256


def test_the_sha256_of_a_regular_file_as_sha256sum_gives_it(tmp_path):
    artifact = tmp_path / "shop-1.tar.gz"
    artifact.write_bytes(b"x" * (3 << 20))
    assert file_sha256(str(artifact)) == hashlib.sha256(b"x" * (3 << 20)).hexdigest()
    (tmp_path / "empty").write_bytes(b"")
    assert file_sha256(str(tmp_path / "empty")) == hashlib.sha256(b"").hexdigest()


def test_a_missing_path_or_a_directory_gives_an_empty_string(tmp_path):
    assert file_sha256(str(tmp_path / "nothing.tar.gz")) == ""
    assert file_sha256(str(tmp_path)) == ""
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    assert file_sha256(str(tmp_path / "dangling")) == ""
