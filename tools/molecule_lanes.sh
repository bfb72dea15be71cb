#!/usr/bin/env bash
# Run molecule scenarios in lanes side by side; the scenarios of one lane run one after another.
# Usage: tools/molecule_lanes.sh "deploy:release worker"   (':' separates lanes, ' ' scenarios)
#
# Every scenario has its own hosts, podman network and molecule state, so lanes do not meet. The collection is
# found through ANSIBLE_COLLECTIONS_PATH (a link to this checkout, made by `make molecule`), not through molecule's
# prerun, which would reinstall it under ~/.ansible while another lane is using it.
# Each lane's output goes to .build/molecule/<scenario>.log and is printed when the lane ends.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
logs=$here/.build/molecule
mkdir -p "$logs" && rm -f "$logs"/*.log

lane() {
  local s rc=0 began
  for s in $1; do
    began=$SECONDS
    molecule -c "$here/.config/molecule/config.yml" test -s "$s" >"$logs/$s.log" 2>&1 || rc=1
    echo "scenario $s: $([ $rc = 0 ] && echo passed || echo FAILED) in $((SECONDS - began)) s" >>"$logs/$s.log"
    [ $rc = 0 ] || break
  done
  return $rc
}

IFS=':' read -r -a lanes <<<"$1"
pids=()
for l in "${lanes[@]}"; do
  lane "$l" &
  pids+=($!)
  echo "lane started: $l"
done
failed=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || failed=1
  for s in ${lanes[$i]}; do
    [ -f "$logs/$s.log" ] || continue
    echo "=================== molecule scenario $s ==================="
    cat "$logs/$s.log"
  done
done
for l in "${lanes[@]}"; do for s in $l; do tail -n 1 "$logs/$s.log" 2>/dev/null; done; done
exit $failed
