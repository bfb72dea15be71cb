#!/usr/bin/env bash
# Run molecule scenarios in lanes side by side, each lane taking the next scenario of one queue when it is free.
# Usage: tools/molecule_lanes.sh LANES "SCENARIO..."   (e.g. 3 "faults deploy ownapp release rq rabbitmq worker")
#
# The queue is taken in the order given: name the longest scenarios first, so that the short ones fill the lanes'
# ends. A scenario named twice runs twice, never in two lanes at once (its hosts are the same); its second log is
# <scenario>.2.log: how the suite's time is measured with more scenarios than it has. A lane whose scenario fails
# takes no other; the other lanes go on with the queue.
#
# Every scenario has its own hosts, podman network and molecule state, so lanes do not meet. The collection is
# found through ANSIBLE_COLLECTIONS_PATH (a link to this checkout, made by `make molecule`), not through molecule's
# prerun, which would reinstall it under ~/.ansible while another lane is using it.
# Each scenario's output goes to .build/molecule/<scenario>.log and is printed when every lane has ended, in the order
# the scenarios ended.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
logs=$here/.build/molecule
mkdir -p "$logs" && rm -rf "$logs"/*.log "$logs"/.queue "$logs"/.running "$logs"/.ended
mkdir "$logs/.running"
printf '%s\n' $2 >"$logs/.queue"
: >"$logs/.ended"

log_of() { local n=1; while [ -e "$logs/$1$([ $n = 1 ] || echo ".$n").log" ]; do n=$((n + 1)); done
  echo "$logs/$1$([ $n = 1 ] || echo ".$n").log"; }

# The next scenario of the queue that no lane is running, taken off the queue and marked running, with its log file
# made; nothing when the queue is empty; "wait" when all that is left runs in another lane.
take() {
  (
    flock 9
    local s
    [ -s "$logs/.queue" ] || exit 0
    s=$(grep -vxF -f <(ls "$logs/.running"; echo /) "$logs/.queue" | head -n 1)
    [ -n "$s" ] || { echo wait; exit 0; }
    sed -i "0,/^$s\$/{/^$s\$/d}" "$logs/.queue"
    touch "$logs/.running/$s"
    log=$(log_of "$s") && : >"$log" && echo "$s $log"
  ) 9>"$logs/.lock"
}

lane() {
  local next s log began rc
  while next=$(take) && [ -n "$next" ]; do
    [ "$next" = wait ] && { sleep 10; continue; }
    read -r s log <<<"$next"
    began=$SECONDS
    molecule -c "$here/.config/molecule/config.yml" test -s "$s" >"$log" 2>&1
    rc=$?
    echo "scenario $s: $([ $rc = 0 ] && echo passed || echo FAILED) in $((SECONDS - began)) s (lane $1)" >>"$log"
    ( flock 9; rm -f "$logs/.running/$s"; echo "$log" >>"$logs/.ended" ) 9>"$logs/.lock"
    [ $rc = 0 ] || return 1
  done
}

pids=()
for n in $(seq 1 "$1"); do
  lane "$n" &
  pids+=($!)
done
echo "$1 lanes started on: $(echo $2)"
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
while read -r log; do
  echo "=================== molecule scenario $(basename "$log" .log) ==================="
  cat "$log"
done <"$logs/.ended"
if [ -s "$logs/.queue" ]; then echo "not run (a lane failed): $(echo $(cat "$logs/.queue"))"; failed=1; fi
while read -r log; do tail -n 1 "$log"; done <"$logs/.ended"
exit $failed
