"""Build a release artifact of the demo app (tests/apps/shop) for one build ID.

    python tests/apps/build_artifact.py --build-id 2026.11.29-1 [--variant normal] [--commit abc123] --out dist

Writes dist/shop-<build_id>.tar.gz and dist/shop-<build_id>.tar.gz.sha256. The tarball holds:

    MANIFEST.json   app, build ID, commit, variant, commands, install (what pip installs from the wheelhouse),
                    and the sha256 of every wheel
    bin/            shop-worker, shop-web, shop-migrate: run the release's own venv
    wheelhouse/     the app's wheel and every dependency (pure-Python: installs offline on 3.11 and 3.13)

The same inputs give the same bytes (sorted entries, fixed times and owners), so a build ID names one
checksum. Variants for tests:
    normal          the app
    migration-v2    a new migration (schema 2)
    missing-worker  a release without bin/shop-worker
    crash-on-start  a worker that dies at import in the app's units (it imports elsewhere)
    refund-task     the app plus a task (shopdemo.refund) the other builds do not register
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent / "shop"
VARIANTS = ("normal", "migration-v2", "missing-worker", "crash-on-start", "refund-task")
WHEEL_VERSION = "1.0"
FIXED_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
# Wheel tags and Requires-Python are checked for both host Pythons (bookworm 3.11, trixie 3.13). pip
# evaluates dependency markers against the Python running it, so marker-only dependencies are pinned in
# shop/requirements.txt.
PYTHONS = ("3.11", "3.13")


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_app_wheel(build_id: str, variant: str, dest: Path) -> Path:
    """A py3-none-any wheel of shopdemo with the build baked in, byte-for-byte reproducible."""
    files: dict[str, bytes] = {}
    for source in sorted((HERE / "shopdemo").glob("*.py")):
        files[f"shopdemo/{source.name}"] = source.read_bytes()
    files["shopdemo/_build.py"] = (
        f"BUILD_ID = {build_id!r}\n"
        f"SCHEMA_TARGET = {2 if variant == 'migration-v2' else 1}\n"
        f"CRASH_ON_START = {variant == 'crash-on-start'}\n"
        f"REFUND_TASK = {variant == 'refund-task'}\n"
    ).encode()
    requirements = [line.strip() for line in (HERE / "requirements.txt").read_text().splitlines()
                    if line.strip() and not line.startswith("#")]
    info = f"shopdemo-{WHEEL_VERSION}.dist-info"
    files[f"{info}/METADATA"] = (
        "Metadata-Version: 2.1\nName: shopdemo\n"
        f"Version: {WHEEL_VERSION}\nRequires-Python: >=3.11\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requirements)
    ).encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: sturdy-build-artifact\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{info}/top_level.txt"] = b"shopdemo\n"
    record = "".join(f"{name},{_digest(data)},{len(data)}\n" for name, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    path = dest / f"shopdemo-{WHEEL_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            entry = zipfile.ZipInfo(name, FIXED_ZIP_TIME)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(entry, data)
    return path


def download_dependencies(dest: Path, cache: Path | None) -> None:
    """Every dependency as a pure-Python wheel, for each Python the hosts run (markers differ). With a cache, the
    wheels of these requirements are downloaded once and copied from there."""
    requirements = (HERE / "requirements.txt").read_bytes()
    if cache:
        kept = cache / ("deps-" + hashlib.sha256(requirements + repr(PYTHONS).encode()).hexdigest()[:16])
        if not kept.is_dir():
            tmp = _fresh(kept)
            download_dependencies(tmp, None)
            _keep(tmp, kept)
        for wheel in kept.iterdir():
            shutil.copyfile(wheel, dest / wheel.name)
        return
    for version in PYTHONS:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
             "--only-binary=:all:", "--platform", "any", "--implementation", "py", "--abi", "none",
             "--python-version", version, "--dest", str(dest), "-r", str(HERE / "requirements.txt")],
            check=True,
        )


def _fresh(final: Path) -> Path:
    """A new directory beside `final`, to be renamed to it by _keep once complete (scenarios build side by side)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))


def _keep(tmp: Path, final: Path) -> None:
    try:
        tmp.rename(final)
    except OSError:  # another build kept the same content first
        shutil.rmtree(tmp)


def source_key(build_id: str, variant: str, commit: str) -> str:
    """What an artifact's bytes depend on: this builder, the app's files, and the arguments."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for path in sorted(p for p in HERE.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(HERE)).encode() + b"\0" + path.read_bytes())
    digest.update(json.dumps([build_id, variant, commit, PYTHONS]).encode())
    return digest.hexdigest()[:16]


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    entry = tarfile.TarInfo(name)
    entry.size, entry.mode, entry.mtime = len(data), mode, 0
    entry.uid = entry.gid = 0
    entry.uname = entry.gname = "root"
    tar.addfile(entry, io.BytesIO(data))


def build(build_id: str, variant: str, commit: str, out: Path, cache: Path | None = None, keep: bool = True) -> Path:
    if not re.fullmatch(r"[A-Za-z0-9._+-]{1,128}", build_id):
        raise SystemExit(f"--build-id {build_id!r}: use letters, digits and . _ + - (for example 2026.11.29-1)")
    out.mkdir(parents=True, exist_ok=True)
    name = f"shop-{build_id}.tar.gz"
    if cache and keep:
        # The same inputs give the same bytes: an artifact built before (by another scenario) is that artifact.
        kept = cache / source_key(build_id, variant, commit)
        if not (kept / name).is_file():
            tmp = _fresh(kept)
            build(build_id, variant, commit, tmp, cache, keep=False)
            _keep(tmp, kept)
        for each in (name, f"{name}.sha256"):
            shutil.copyfile(kept / each, out / each)
        return out / name
    with tempfile.TemporaryDirectory() as tmp:
        wheelhouse = Path(tmp) / "wheelhouse"
        wheelhouse.mkdir()
        download_dependencies(wheelhouse, cache)
        build_app_wheel(build_id, variant, wheelhouse)
        wheels = {w.name: hashlib.sha256(w.read_bytes()).hexdigest() for w in sorted(wheelhouse.iterdir())}
        commands = {"worker": "bin/shop-worker", "web": "bin/shop-web", "migrate": "bin/shop-migrate"}
        if variant == "missing-worker":
            del commands["worker"]
        manifest = {
            "app": "shop",
            "build_id": build_id,
            "commit": commit,
            "variant": variant,
            "python_requires": ">=3.11",
            "commands": commands,
            "install": [f"shopdemo=={WHEEL_VERSION}"],
            "wheels": wheels,
        }
        artifact = out / f"shop-{build_id}.tar.gz"
        with open(artifact, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                _add(tar, "MANIFEST.json", json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n", 0o644)
                for command in sorted(commands.values()):
                    _add(tar, command, (HERE / command).read_bytes(), 0o755)
                for name in wheels:
                    _add(tar, f"wheelhouse/{name}", (wheelhouse / name).read_bytes(), 0o644)
    digest = hashlib.sha256(artifact.read_bytes()).hexdigest()
    (out / f"{artifact.name}.sha256").write_text(f"{digest}  {artifact.name}\n")
    return artifact


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--build-id", required=True)
    parser.add_argument("--variant", choices=VARIANTS, default="normal")
    parser.add_argument("--commit", default="")
    parser.add_argument("--out", type=Path, default=Path("dist"))
    parser.add_argument("--cache", type=Path, help="keep artifacts and dependency wheels here, keyed by their inputs")
    args = parser.parse_args(argv)
    artifact = build(args.build_id, args.variant, args.commit, args.out, args.cache)
    print(artifact)
    return 0


if __name__ == "__main__":
    sys.exit(main())
