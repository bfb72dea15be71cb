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

# A scenario named twice in one lane runs twice (its second log is <scenario>.2.log): how the suite's time is
# measured with more scenarios than it has.
log_of() { local n=1; while [ -e "$logs/$1$([ $n = 1 ] || echo ".$n").log" ]; do n=$((n + 1)); done
  echo "$logs/$1$([ $n = 1 ] || echo ".$n").log"; }

lane() {
  local s rc=0 began log
  for s in $1; do
    began=$SECONDS
    log=$(log_of "$s")
    molecule -c "$here/.config/molecule/config.yml" test -s "$s" >"$log" 2>&1 || rc=1
    echo "scenario $s: $([ $rc = 0 ] && echo passed || echo FAILED) in $((SECONDS - began)) s" >>"$log"
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
  for s in $(printf '%s\n' ${lanes[$i]} | sort -u); do
    for log in "$logs/$s.log" "$logs/$s".[0-9]*.log; do
      [ -f "$log" ] || continue
      echo "=================== molecule scenario $s ($(basename "$log")) ==================="
      cat "$log"
    done
  done
done
for log in "$logs"/*.log; do tail -n 1 "$log"; done
exit $failed
