#!/usr/bin/env bash
# Build the test-host image for a Debian suite unless one built from the current recipe exists.
# Usage: testbed/ensure-image.sh <suite> <tag>
set -euo pipefail
suite=$1
tag=$2
here=$(cd "$(dirname "$0")" && pwd)
want=$(sha256sum "$here/build-image.sh" | cut -c1-16)
have=$(podman image inspect --format '{{ index .Config.Labels "sturdy.recipe" }}' "$tag" 2>/dev/null || true)
if [ "$have" = "$want" ]; then
  echo "$tag is current (recipe $want)"
  exit 0
fi
exec "$here/build-image.sh" "$suite" "$tag"
