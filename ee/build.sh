#!/usr/bin/env bash
# Build the execution environment image with podman, from Debian packages and PyPI only (the registries that hold
# the usual EE bases, quay.io and registry.redhat.io, cannot be reached here; with them, use
# execution-environment.yml and ansible-builder instead).
# Usage: ee/build.sh <collection tarball> <tag>    e.g. ee/build.sh .build/dist/sturdy-workers-0.4.0.tar.gz \
#          localhost/sturdy-workers-ee:0.4.0
# The image carries the hash of this recipe and of the tarball as a label; an image with the same label is kept.
set -euo pipefail
tarball=$1
tag=$2
here=$(cd "$(dirname "$0")" && pwd)
# The collection by its files' content (the tarball itself differs at each build: gzip and tar stamp times).
recipe=$( (cat "$here/build.sh" "$here/Containerfile" "$here/requirements.txt"; tar -xzOf "$tarball") | sha256sum | cut -c1-16)
if [ "$(podman image inspect --format '{{ index .Labels "sturdy.recipe" }}' "$tag" 2>/dev/null)" = "$recipe" ]; then
  echo "$tag is up to date (recipe $recipe)"
  exit 0
fi
base=localhost/sturdy-ee-base:13
root=${ROOTFS_DIR:-$here/../testbed/.rootfs}/ee-trixie
base_recipe=$(sha256sum "$here/build.sh" | cut -c1-16)
mirror=${DEBIAN_MIRROR:-$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}
mirror=${mirror:-http://deb.debian.org/debian}
if [ "$(podman image inspect --format '{{ index .Labels "sturdy.recipe" }}' "$base" 2>/dev/null)" != "$base_recipe" ]; then
  rm -rf "$root"
  mkdir -p "$(dirname "$root")"
  # python3 and its venv for Ansible, openssh-client to reach the hosts, dumb-init as PID 1 (as in ansible-builder's
  # images), ca-certificates for HTTPS.
  debootstrap --variant=minbase --include=python3,python3-venv,openssh-client,dumb-init,ca-certificates \
    trixie "$root" "$mirror"
  chroot "$root" apt-get clean
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/log/*.log "$root"/var/cache/debconf/*-old
  # The sandbox reaches HTTPS through a TLS-intercepting proxy: trust the host's extra CAs (for pip, below).
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null
  fi
  tar -C "$root" -c . | podman import --change 'CMD ["/bin/bash"]' --change "LABEL sturdy.recipe=$base_recipe" \
    - "$base" >/dev/null
  rm -rf "$root"
fi
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "$here/Containerfile" "$here/requirements.txt" "$context/"
cp "$tarball" "$context/sturdy-workers.tar.gz"
podman build --quiet --network host --build-arg "BASE=$base" --label "sturdy.recipe=$recipe" -t "$tag" "$context" \
  >/dev/null
echo "built $tag (recipe $recipe)"
