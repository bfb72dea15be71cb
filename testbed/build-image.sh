#!/usr/bin/env bash
# Build a Debian image that boots real systemd as PID 1, for the molecule test hosts.
# Usage: testbed/build-image.sh <suite> <tag>     e.g. testbed/build-image.sh bookworm localhost/sturdy-systemd:12
# The image carries the hash of this recipe as a label; `make images` rebuilds only when it changes.
set -euo pipefail
suite=$1
tag=$2
here=$(cd "$(dirname "$0")" && pwd)
recipe=$(sha256sum "$here/build-image.sh" | cut -c1-16)
root=${ROOTFS_DIR:-$here/.rootfs}/$suite
mirror=${DEBIAN_MIRROR:-$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}
mirror=${mirror:-http://deb.debian.org/debian}

if [ ! -e "$root/.sturdy-recipe-$recipe" ]; then
  rm -rf "$root"
  mkdir -p "$(dirname "$root")"
  # python3 for Ansible, python3-apt for the apt module, sudo for become, iproute2 for `ss` (testinfra
  # sockets), procps for ps, ca-certificates for HTTPS, dbus for systemctl on a booted system, openssh-server
  # for the tests that reach the hosts as a user's inventory does (keys are added at test time).
  debootstrap --variant=minbase \
    --include=systemd,systemd-sysv,dbus,python3,python3-apt,sudo,iproute2,procps,ca-certificates,openssh-server \
    "$suite" "$root" "$mirror"
  cat > "$root/etc/apt/sources.list" <<SRC
deb $mirror $suite main
deb $mirror $suite-updates main
deb ${mirror%/debian}/debian-security $suite-security main
SRC
  # The services the scenarios run beside the app (brokers, Prometheus, node_exporter), installed here once instead
  # of by every scenario's prepare (an apt-get update and the downloads per host and run), and disabled: a
  # scenario's prepare enables and starts what its hosts need. Brokers run on bookworm hosts only.
  case $suite in
    bookworm) services="redis-server rabbitmq-server prometheus prometheus-node-exporter" ;;
    *) services="prometheus-node-exporter" ;;
  esac
  mount -t proc proc "$root/proc"
  trap 'umount "$root/proc" 2>/dev/null || true' EXIT
  chroot "$root" apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y -qq --no-install-recommends $services >/dev/null
  for unit in $services; do chroot "$root" systemctl disable --quiet "$unit"; done
  umount "$root/proc"
  trap - EXIT
  chroot "$root" apt-get clean
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/log/*.log "$root"/var/cache/debconf/*-old
  # debootstrap bakes a fixed machine-id; an empty one gives each container its own.
  : > "$root/etc/machine-id"
  rm -f "$root/var/lib/dbus/machine-id"
  # The sandbox reaches HTTPS through a TLS-intercepting proxy: trust the host's extra CAs.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null
  fi
  # On a real host systemd makes / a shared mount; in a container it leaves that to the container manager,
  # and podman's mounts are private. Then what systemd mounts for a service in a helper namespace (the
  # LoadCredential= directory) never reaches the service: it starts with an empty $CREDENTIALS_DIRECTORY.
  # Do what systemd does on a host, first thing at boot.
  mkdir -p "$root/etc/systemd/system/sysinit.target.wants"
  cat > "$root/etc/systemd/system/sturdy-testbed-shared-root.service" <<'UNIT'
[Unit]
Description=Make / a shared mount, as systemd does on a real host
DefaultDependencies=no
Before=sysinit.target local-fs.target

[Service]
Type=oneshot
ExecStart=/bin/mount --make-rshared /
UNIT
  ln -sf ../sturdy-testbed-shared-root.service "$root/etc/systemd/system/sysinit.target.wants/"
  touch "$root/.sturdy-recipe-$recipe"
fi

tar -C "$root" --exclude="./.sturdy-recipe-*" -c . | podman import \
  --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' --change 'ENV container=podman' \
  --change "LABEL sturdy.recipe=$recipe" - "$tag" >/dev/null
echo "built $tag ($suite, recipe $recipe)"
