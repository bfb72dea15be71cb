# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Mask the app's secret values in the app's own lines before they are relayed (journal tails, tracebacks, a smoke
client's or migration's output): an app that prints its broker URL must not put the password into Ansible's output.

The modules that relay such lines read the values on the host from the units' own secret lines (EnvironmentFile=,
LoadCredential=, LoadCredentialEncrypted=), so no value travels back to the controller to be masked there.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable
from urllib.parse import quote, quote_plus, unquote, urlsplit

from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import default_read

MASK = "********"
# Shorter values would mask ordinary words and digits: a secret that short is not one.
MIN_LENGTH = 4
_ENV_LINE = re.compile(r'^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$')
_UNESCAPE = re.compile(r'\\(.)')


def parse_env_file(text: str) -> dict[str, str]:
    """NAME="value" lines as secret_delivery.env_file() writes them (systemd's EnvironmentFile= syntax)."""
    found = {}
    for line in text.splitlines():
        match = _ENV_LINE.match(line)
        if not match or line.lstrip().startswith("#"):
            continue
        value = match.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = _UNESCAPE.sub(r"\1", value[1:-1]) if value[0] == '"' else value[1:-1]
        found[match.group(1)] = value
    return found


def values_of(directives: list[str], read: Callable[[str], str | None],
              decrypt: Callable[[str, str], str | None] | None = None) -> list[str]:
    """Every secret value the units' secret lines load, read as root on the host."""
    values = []
    for line in directives:
        key, dummy, arg = line.partition("=")
        if key == "EnvironmentFile":
            values += parse_env_file(read(arg.lstrip("-")) or "").values()
        elif key in ("LoadCredential", "LoadCredentialEncrypted"):
            name, dummy, path = arg.partition(":")
            value = read(path) if key == "LoadCredential" else (decrypt(name, path) if decrypt else None)
            if value:
                values.append(value.rstrip("\n"))
    return values


def secrets_to_mask(values) -> list[str]:
    """The values, each URL's password on its own (an app may print a URL it built from it) and its decoded form,
    and each of those as a URL or a JSON string carries it (percent-encoded, escaped); longest first, so a value
    containing another is masked whole."""
    plain = set()
    for value in values:
        value = "" if value is None else str(value)
        for line in [value, *value.splitlines()]:
            plain.add(line.strip())
        try:
            password = urlsplit(value.strip()).password
        except ValueError:
            password = None
        if password:
            plain.update({password, unquote(password)})
    found = set(plain)
    for value in plain:
        found.update({quote(value, safe=""), quote_plus(value), json.dumps(value)[1:-1]})
    return sorted((v for v in found if len(v) >= MIN_LENGTH), key=len, reverse=True)


def masker(values) -> Callable[[Any], Any]:
    """A function masking every secret in a string, or in every string of a list/dict result."""
    secrets = secrets_to_mask(values)
    pattern = re.compile("|".join(re.escape(s) for s in secrets)) if secrets else None

    def mask(obj):
        if pattern is None:
            return obj
        if isinstance(obj, str):
            return pattern.sub(MASK, obj)
        if isinstance(obj, list):
            return [mask(o) for o in obj]
        if isinstance(obj, tuple):
            return tuple(mask(o) for o in obj)
        if isinstance(obj, dict):
            return {k: mask(v) for k, v in obj.items()}
        return obj

    return mask


def host_masker(directives: list[str], run: Callable[[list[str]], tuple[int, str, str]]) -> Callable[[Any], Any]:
    """masker() for the values the units' secret lines load on this host (read as root; encrypted credentials
    decrypted with systemd-creds)."""
    def decrypt(name: str, path: str) -> str | None:
        rc, out, dummy = run(["systemd-creds", "decrypt", f"--name={name}", path, "-"])
        return out if rc == 0 else None

    return masker(values_of(directives, default_read, decrypt))
