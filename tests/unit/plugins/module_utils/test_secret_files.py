from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.secret_delivery import (
    SecretSpecError,
    layout,
    wanted_files,
    write_secret_files,
)


def rooted(tmp_path, where):
    """The layout with /etc moved under tmp_path."""
    def move(v):
        if isinstance(v, str) and v.startswith("/etc/"):
            return str(tmp_path) + v
        if isinstance(v, dict):
            return {k: move(x) for k, x in v.items()}
        return v
    return {k: move(v) for k, v in where.items()}


def mode_of(path):
    st = os.stat(path)
    return st.st_uid, st.st_gid, oct(stat.S_IMODE(st.st_mode))


def test_env_file_delivery_writes_the_directory_and_the_group_readable_file_once(tmp_path):
    (tmp_path / "etc").mkdir()
    where = rooted(tmp_path, layout("shop", "env_file", ["BROKER_URL"]))
    dirs, files = wanted_files(where, {"BROKER_URL": "redis://:pw@broker/0"}, 4242)
    assert write_secret_files(dirs, files, check=False) == [where["directory"], where["env_file"]]
    assert mode_of(where["env_file"]) == (0, 4242, "0o640") and mode_of(where["directory"]) == (0, 0, "0o755")
    assert 'BROKER_URL="redis://:pw@broker/0"' in open(where["env_file"], encoding="utf-8").read()
    assert write_secret_files(dirs, files, check=False) == []
    # A mode changed by hand is put back, with the content.
    os.chmod(where["env_file"], 0o644)
    assert write_secret_files(dirs, files, check=False) == [where["env_file"]]
    assert mode_of(where["env_file"]) == (0, 4242, "0o640")


def test_credentials_delivery_writes_one_root_only_file_per_secret_and_check_mode_writes_nothing(tmp_path):
    (tmp_path / "etc").mkdir()
    where = rooted(tmp_path, layout("shop", "credentials", ["BROKER_URL", "TLS_KEY"]))
    dirs, files = wanted_files(where, {"BROKER_URL": "redis://x", "TLS_KEY": "-----BEGIN-----\nabc\n"}, None)
    planned = write_secret_files(dirs, files, check=True)
    assert planned == [where["directory"], where["credentials_directory"], *sorted(where["credential_files"].values())]
    assert not os.path.exists(where["directory"])
    assert write_secret_files(dirs, files, check=False) == planned
    key = where["credential_files"]["TLS_KEY"]
    assert open(key, encoding="utf-8").read() == "-----BEGIN-----\nabc\n" and mode_of(key) == (0, 0, "0o600")
    assert mode_of(where["credentials_directory"]) == (0, 0, "0o700")
    assert not [n for n in os.listdir(where["credentials_directory"]) if n.endswith(".sturdy-tmp")]


def test_no_secrets_no_environment_file_and_encrypted_credentials_are_not_written_here(tmp_path):
    where = rooted(tmp_path, layout("shop", "env_file", []))
    assert wanted_files(where, {}, 0)[1] == []
    with pytest.raises(SecretSpecError, match="encrypted_credentials are encrypted on the host"):
        wanted_files(layout("shop", "encrypted_credentials", ["A"]), {"A": "x"}, 0)


def test_a_value_an_environment_file_cannot_carry_fails_naming_the_secret_not_the_value(tmp_path):
    with pytest.raises(SecretSpecError) as err:
        wanted_files(layout("shop", "env_file", ["TLS_KEY"]), {"TLS_KEY": "line1\nsecret-line2"}, 0)
    assert "sturdy_secrets[TLS_KEY]" in str(err.value) and "secret-line2" not in str(err.value)
