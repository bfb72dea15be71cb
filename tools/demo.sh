#!/usr/bin/env bash
# make demo: two local systemd hosts (Redis on one, the demo app on the other), build 1 deployed, then build 2
# while a stream of tasks flows; prints the deploy report. make demo-clean removes everything.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
demo=$here/.demo
net=sturdy-demo
export ANSIBLE_COLLECTIONS_PATH=$here/.build/installed
export ANSIBLE_CONFIG=$demo/ansible.cfg
# The scenario's prepare playbook builds its artifacts into $MOLECULE_EPHEMERAL_DIRECTORY/dist.
export MOLECULE_EPHEMERAL_DIRECTORY=$demo
hosts=(sturdy-demo-broker:localhost/sturdy-systemd:12 sturdy-demo-app:localhost/sturdy-systemd:13)

if [ "${1:-}" = clean ]; then
  for spec in "${hosts[@]}"; do podman rm -f "${spec%%:*}" >/dev/null 2>&1 || true; done
  podman network rm "$net" >/dev/null 2>&1 || true
  rm -rf "$demo"
  echo "demo hosts, network and $demo removed"
  exit 0
fi

mkdir -p "$demo"
podman network exists "$net" || podman network create "$net" >/dev/null
for spec in "${hosts[@]}"; do
  name=${spec%%:*} image=${spec#*:}
  if ! podman container exists "$name"; then
    echo "== starting $name ($image, systemd as PID 1)"
    podman run -d --name "$name" --hostname "${name#sturdy-demo-}" --network "$net" --network-alias "${name#sturdy-demo-}" \
      --systemd=always --cap-add SYS_ADMIN --cap-add SYS_PTRACE "$image" /sbin/init >/dev/null
  fi
  podman start "$name" >/dev/null
done
for spec in "${hosts[@]}"; do
  until podman exec "${spec%%:*}" systemctl is-system-running --quiet --wait 2>/dev/null \
        || [ "$(podman exec "${spec%%:*}" systemctl is-system-running 2>/dev/null)" = degraded ]; do sleep 1; done
done

cat > "$demo/ansible.cfg" <<CFG
[defaults]
gathering = explicit
callback_result_format = yaml
inventory = $demo/inventory.yml
[connection]
pipelining = true
CFG
cat > "$demo/inventory.yml" <<'INV'
all:
  vars:
    ansible_connection: containers.podman.podman
    ansible_python_interpreter: /usr/bin/python3
    shop_redis_password: demo-only-password
    shop_dist: "{{ lookup('ansible.builtin.env', 'MOLECULE_EPHEMERAL_DIRECTORY') }}/dist"
    sturdy_app: shop
    sturdy_artifact: "{{ lookup('ansible.builtin.env', 'MOLECULE_EPHEMERAL_DIRECTORY') }}/dist/shop-{{ sturdy_build_id }}.tar.gz"
    sturdy_deploy_report: "{{ lookup('ansible.builtin.env', 'MOLECULE_EPHEMERAL_DIRECTORY') }}/deploy-report.json"
    sturdy_deploy_broker: {host: broker, port: 6379}
    sturdy_secrets:
      BROKER_URL: "redis://:{{ shop_redis_password }}@broker:6379/0"
    sturdy_secrets_required: [BROKER_URL]
    sturdy_migrate_command: [bin/shop-migrate]
    sturdy_processes:
      - name: worker
        adapter: celery
        celery_app: shopdemo.celery
        queues: [default]
        command: [/srv/shop/current/bin/shop-worker, --concurrency, "2", --loglevel, INFO, --without-gossip,
                  --without-mingle, -Q, default]
        working_directory: /srv/shop/current
        instances: 2
        max_task_runtime: 30
        watchdog_sec: 30
      - name: web
        command: [/srv/shop/current/bin/shop-web, --port, "8000"]
        working_directory: /srv/shop/current
        readiness: {http: "http://127.0.0.1:8000/health"}
  children:
    brokers:
      hosts:
        sturdy-demo-broker:
    apps:
      hosts:
        sturdy-demo-app:
INV

echo "== building the demo artifacts, starting Redis"
ansible-playbook "$here/molecule/deploy/prepare.yml" >"$demo/prepare.log" || { tail -40 "$demo/prepare.log"; exit 1; }

deploy() {
  ansible-playbook sturdy.workers.deploy -e sturdy_deploy_hosts=apps -e "sturdy_build_id=$1" >"$demo/deploy-$1.log" \
    || { tail -60 "$demo/deploy-$1.log"; exit 1; }
}
echo "== deploying build 2026.11.29-1"
deploy 2026.11.29-1
echo "== deploying build 2026.11.29-2 while tasks flow (a task every 0.2 s for 75 s)"
podman exec sturdy-demo-app /usr/local/sbin/shop-task --stream demo-$$ 75 0.2 >"$demo/stream.json" 2>"$demo/stream.log" &
stream=$!
sleep 2
deploy 2026.11.29-2
wait "$stream" || true
sed -n '/TASK \[.*Print the deploy report\]/,/^$/p' "$demo/deploy-2026.11.29-2.log"
echo "tasks during the deploy: $(cat "$demo/stream.json")"
cat <<NOTE

The demo hosts keep running. Look around:
  podman exec -it sturdy-demo-app bash            then: systemctl status 'shop-*'   ls -l /srv/shop
  podman exec sturdy-demo-app journalctl -u shop-worker@1 -n 30
  cat $demo/deploy-report.json                 the report of the last deploy
  ANSIBLE_CONFIG=$demo/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$here/.build/installed \\
    ansible-playbook sturdy.workers.rollback -e sturdy_deploy_hosts=apps
Remove them with: make demo-clean
NOTE
