# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where an app's secrets live on a host and how its units load them: one place for the secrets role,
which writes them, and the worker role, which points the units at them."""

from __future__ import annotations

import posixpath
import re

from ansible_collections.sturdy.workers.plugins.module_utils.files import own_directory, replace_file, same_file

DELIVERIES = ("env_file", "credentials", "encrypted_credentials")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Inside double quotes systemd's EnvironmentFile= parser (and sh) give these a backslash meaning.
_ESCAPE = re.compile(r'(["\\$`])')


class SecretSpecError(Exception):
    """A declaration the roles cannot turn into files; the message names the secret, never its value."""


def generation_directory(app: str, generation: int) -> str:
    """Where one generation of an app's secret values lives: written once, never changed, named by the units of the
    releases that use it (module_utils/release_configs.py)."""
    return f"/etc/{app}/secrets/{int(generation)}"


def layout(app: str, delivery: str, names: list[str], generation: int | None = None) -> dict:
    """Paths and unit directives for `names` delivered by `delivery`.

    Without `generation`, the live paths: /etc/<app>/<app>.env and /etc/<app>/credentials/, which a deploy keeps as
    links to the live release's generation (what status, diagnose and the other readers load, as the app runs now).
    With one, that generation's own files, which a release's units name."""
    if delivery not in DELIVERIES:
        raise SecretSpecError(f"sturdy_secrets_delivery={delivery!r}: choose one of {', '.join(DELIVERIES)}")
    bad = [n for n in names if not NAME.match(str(n))]
    if bad:
        raise SecretSpecError(f"sturdy_secrets names {bad} are not usable as environment variable or credential "
                              "names: use letters, digits and '_', not starting with a digit (for example BROKER_URL)")
    directory = f"/etc/{app}"
    where = directory if generation is None else generation_directory(app, generation)
    credentials = f"{where}/credentials"
    env_path = f"{where}/{app}.env"
    files = {}
    directives = []
    if delivery == "env_file":
        directives.append(f"EnvironmentFile={env_path}")
        # Without secrets there is no file to load, and an old one goes.
        unused = [credentials] + ([] if names else [env_path])
    else:
        suffix = ".cred" if delivery == "encrypted_credentials" else ""
        key = "LoadCredentialEncrypted" if suffix else "LoadCredential"
        for name in sorted(names):
            files[name] = f"{credentials}/{name}{suffix}"
            directives.append(f"{key}={name}:{files[name]}")
        unused = [env_path]
    return {
        "delivery": delivery,
        "directory": directory,
        "generation": generation,
        "generation_directory": where,
        # The live paths, links to the live release's generation once a deploy has written one.
        "live": {"env_file": f"{directory}/{app}.env", "credentials_directory": f"{directory}/credentials"},
        "env_file": env_path,
        "credentials_directory": credentials,
        "credential_files": files,
        "directives": directives if names else [],
        # Files of another delivery, or of none: cleanup removes them once the units no longer load them.
        "unused": unused,
    }


def env_file(secrets: dict) -> str:
    """The content of an EnvironmentFile= for `secrets`, every value passed through verbatim."""
    lines = []
    for name in sorted(secrets):
        value = "" if secrets[name] is None else str(secrets[name])
        if not NAME.match(str(name)):
            raise SecretSpecError(f"sturdy_secrets name {name!r} is not usable as an environment variable name")
        if any(ord(c) < 32 and c != "\t" for c in value) or "\x7f" in value:
            raise SecretSpecError(
                f"sturdy_secrets[{name}] contains a line break or control character, which an environment file "
                "cannot carry: use sturdy_secrets_delivery=credentials (or encrypted_credentials) for keys and "
                "certificates")
        quoted = _ESCAPE.sub(r"\\\1", value)
        lines.append(f'{name}="{quoted}"\n')
    header = "# Written by sturdy.workers, read by systemd (EnvironmentFile=). The next deploy replaces it.\n"
    return header + "".join(lines)


def wanted_files(where: dict, values: dict, gid: int | None) -> tuple[list[tuple[str, int]], list[tuple]]:
    """What the deliveries env_file and credentials put on a host for `values`, as laid out by layout(): the
    directories (path, mode; root's) and the files (path, content, group ID, mode; root's). `gid` is the group that
    may read the environment file (None: not there yet, as in check mode)."""
    delivery = where.get("delivery")
    directories = [(where["directory"], 0o755)]
    if where.get("generation") is not None:
        directories += [(posixpath.dirname(where["generation_directory"]), 0o755), (where["generation_directory"], 0o755)]
    files = []
    if delivery == "env_file":
        if values:
            files.append((where["env_file"], env_file(values), gid, 0o640))
    elif delivery == "credentials":
        directories.append((where["credentials_directory"], 0o700))
        for name, path in sorted(where["credential_files"].items()):
            value = values.get(name)
            files.append((path, "" if value is None else str(value), 0, 0o600))
    else:
        raise SecretSpecError(f"delivery {delivery!r}: only env_file and credentials are written this way "
                              "(encrypted_credentials are encrypted on the host by the secrets role)")
    return directories, files


def write_secret_files(directories: list[tuple[str, int]], files: list[tuple], check: bool) -> list[str]:
    """Create the directories (root's, with their modes) and write the files whose content, owner or mode differ,
    by rename with owner and mode set before a byte is written. Returns the paths changed (in check mode, that
    would be). Errors name paths, never content."""
    changed = [path for path, mode in directories if own_directory(path, mode, check)]
    for path, content, gid, mode in files:
        data = content.encode("utf-8")
        if not same_file(path, data, mode, gid):
            changed.append(path)
            if not check:
                replace_file(path, data, mode, gid)
    return changed
