from __future__ import annotations

import subprocess

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.secret_delivery import SecretSpecError, env_file, layout

TRICKY = "pa$s \"w\\or'd #x ${HOME} `id` \t end"


def test_env_file_values_survive_sh_verbatim(tmp_path):
    # systemd's EnvironmentFile= parser gives \ " $ ` the same meaning inside double quotes as sh does
    # (checked on systemd 252 and 257 in the molecule scenario); sh is the part that can run here.
    path = tmp_path / "app.env"
    path.write_text(env_file({"TOKEN": TRICKY, "PORT": 8000, "EMPTY": None}))
    out = subprocess.run(["sh", "-c", f'. "{path}"; printf %s "$TOKEN"'], capture_output=True, text=True, check=True)
    assert out.stdout == TRICKY
    assert 'PORT="8000"\n' in path.read_text() and 'EMPTY=""\n' in path.read_text()


@pytest.mark.parametrize("value", ["line1\nline2", "bell\x07"])
def test_env_file_refuses_control_characters_without_showing_the_value(value):
    with pytest.raises(SecretSpecError) as err:
        env_file({"TLS_KEY": value})
    assert "TLS_KEY" in str(err.value) and "credentials" in str(err.value) and value not in str(err.value)


def test_layout_env_file():
    got = layout("shop", "env_file", ["B", "A"])
    assert got["env_file"] == "/etc/shop/shop.env"
    assert got["directives"] == ["EnvironmentFile=/etc/shop/shop.env"]
    assert got["unused"] == ["/etc/shop/credentials"]
    empty = layout("shop", "env_file", [])
    assert empty["directives"] == [] and empty["unused"] == ["/etc/shop/credentials", "/etc/shop/shop.env"]


@pytest.mark.parametrize("delivery, key, suffix", [("credentials", "LoadCredential", ""),
                                                   ("encrypted_credentials", "LoadCredentialEncrypted", ".cred")])
def test_layout_credentials(delivery, key, suffix):
    got = layout("shop", delivery, ["BROKER_URL", "API_KEY"])
    # The environment file of the other delivery is what cleanup removes.
    assert got["unused"] == ["/etc/shop/shop.env"]
    assert got["credential_files"] == {"API_KEY": f"/etc/shop/credentials/API_KEY{suffix}",
                                       "BROKER_URL": f"/etc/shop/credentials/BROKER_URL{suffix}"}
    assert got["directives"] == [f"{key}=API_KEY:/etc/shop/credentials/API_KEY{suffix}",
                                 f"{key}=BROKER_URL:/etc/shop/credentials/BROKER_URL{suffix}"]


@pytest.mark.parametrize("delivery, names, message", [("vault", ["A"], "choose one of"),
                                                      ("env_file", ["9LIVES"], "not usable"),
                                                      ("credentials", ["A:B"], "not usable")])
def test_layout_refuses_what_systemd_cannot_load(delivery, names, message):
    with pytest.raises(SecretSpecError, match=message):
        layout("shop", delivery, names)
