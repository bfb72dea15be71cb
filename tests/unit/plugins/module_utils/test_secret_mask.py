from __future__ import annotations

from ansible_collections.sturdy.workers.plugins.module_utils.secret_delivery import env_file
from ansible_collections.sturdy.workers.plugins.module_utils.secret_mask import (
    MASK, masker, parse_env_file, values_of)

SECRETS = {"BROKER_URL": "redis://:p%40ss-Word-9@broker:6379/0", "API_KEY": 'k$y"with`quotes\\', "DEBUG": "1"}


def test_the_env_file_the_secrets_role_writes_reads_back_verbatim():
    assert parse_env_file(env_file(SECRETS)) == SECRETS


def test_a_value_whole_and_a_urls_password_alone_and_decoded_are_masked():
    mask = masker(SECRETS.values())
    text = ("connecting to redis://:p%40ss-Word-9@broker:6379/0 failed\n"
            "retry with redis://:p%40ss-Word-9@other:6379/9, password p@ss-Word-9, key k$y\"with`quotes\\ DEBUG=1")
    got = mask(text)
    assert "p%40ss" not in got and "p@ss" not in got and "quotes" not in got
    assert got.startswith(f"connecting to {MASK} failed\nretry with redis://:{MASK}@other:6379/9, password {MASK}")
    # A short value would mask every "1": it is left alone.
    assert got.endswith(f"key {MASK} DEBUG=1")


def test_lists_and_mappings_are_masked_throughout_and_other_values_kept():
    mask = masker(["s3cr3t-value"])
    assert mask({"msg": "x s3cr3t-value", "journal": ["a", "s3cr3t-value b"], "rc": 1, "ok": None}) == {
        "msg": f"x {MASK}", "journal": ["a", f"{MASK} b"], "rc": 1, "ok": None}
    assert masker([])("s3cr3t-value") == "s3cr3t-value"


def test_values_are_read_from_the_units_secret_lines():
    files = {"/etc/shop/shop.env": env_file({"BROKER_URL": "redis://:pw-1234@b/0"}),
             "/etc/shop/credentials/TOKEN": "tok-5678\n"}
    decrypted = []

    def decrypt(name, path):
        decrypted.append((name, path))
        return "enc-9012"

    got = values_of(["EnvironmentFile=-/etc/shop/shop.env", "LoadCredential=TOKEN:/etc/shop/credentials/TOKEN",
                     "LoadCredentialEncrypted=KEY:/etc/shop/credentials/KEY.cred", "EnvironmentFile=/missing"],
                    files.get, decrypt)
    assert got == ["redis://:pw-1234@b/0", "tok-5678", "enc-9012"]
    assert decrypted == [("KEY", "/etc/shop/credentials/KEY.cred")]


def test_a_secret_an_app_put_into_a_url_or_json_is_masked_encoded_too():
    mask = masker(["p@ss/wo rd\"x"])
    got = mask('redis://:p%40ss%2Fwo%20rd%22x@h/0 form=p%40ss%2Fwo+rd%22x json={"pw": "p@ss/wo rd\\"x"}')
    assert got == f'redis://:{MASK}@h/0 form={MASK} json={{"pw": "{MASK}"}}'
