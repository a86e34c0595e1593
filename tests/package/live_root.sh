#!/usr/bin/env bash
# The package installed, upgraded, removed and purged by plain `dpkg` on this machine's own root, with
# its maintainer scripts running as on an operator's host (adduser, getent, deb-systemd-invoke), and
# the README's example configuration run as written, by the installed binary as the kmproxy user.
# Run by test_package.sh inside `unshare --mount --net`: /etc, /usr and /var are overlays whose writes
# land in WORK (the host's files and dpkg database never change), /run is a fresh tmpfs holding
# /run/systemd/system so that the scripts take their systemd branch, and systemctl/deb-systemd-invoke
# are stand-ins that log what they were asked (no systemd runs here) and report kmproxy.service active.
# The network namespace has only its own loopback: the example's fixed port 9779 is private to it.
# Then the Containerfile's command line and HEALTHCHECK (CONTAINER_CMD: test_package.sh's parse of it,
# first line the ENTRYPOINT and CMD, second the health check) on the image's configuration, the example.
# usage: live_root.sh WORK DEB UPGRADE_DEB README CONTAINER_CMD
set -euo pipefail
work=$1 deb=$2 upgrade=$3 readme=$4 container=$5
fail() { echo "test_package (live root): FAIL: $*" >&2; exit 1; }
serve_until_healthy() { # LABEL HEALTH_COMMAND_LINE COMMAND...: COMMAND runs as the kmproxy user (as the units and
  # the container run it) until HEALTH_COMMAND_LINE passes, then must exit 0 on SIGTERM
  local label=$1 health=$2 pid
  shift 2
  setpriv --reuid=kmproxy --regid=kmproxy --init-groups "$@" 2>"$work/$label.err" &
  pid=$!
  for _ in $(seq 1 100); do
    $health >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { wait "$pid" || true; cat "$work/$label.err"; fail "$label: '$*' exited"; }
    sleep 0.2
  done
  $health >/dev/null || { kill "$pid"; cat "$work/$label.err"; fail "$label: '$health' fails with '$*' running"; }
  kill -TERM "$pid"
  wait "$pid" || fail "$label: '$*' exited $? on SIGTERM"
}

for d in etc usr var; do
  mkdir -p "$work/ov/$d/upper" "$work/ov/$d/work"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$work/ov/$d/upper,workdir=$work/ov/$d/work" "/$d"
done
mount -t tmpfs tmpfs /run
mkdir -p /run/systemd/system /run/lock
ip link set lo up

# the stand-ins, first on PATH (dpkg passes PATH on to the maintainer scripts)
calls=$work/systemd-calls
mkdir -p "$work/bin"
cat >"$work/bin/systemctl" <<EOF
#!/bin/sh
echo "systemctl \$*" >>"$calls"
case "\$1" in list-units) echo "kmproxy.service loaded active running kmproxy" ;; esac
EOF
cat >"$work/bin/deb-systemd-invoke" <<EOF
#!/bin/sh
echo "deb-systemd-invoke \$*" >>"$calls"
EOF
chmod +x "$work/bin/systemctl" "$work/bin/deb-systemd-invoke"
export PATH="$work/bin:$PATH"
: >"$calls"

# 1. install: real dependencies, the real adduser
getent passwd kmproxy >/dev/null && fail "the host already has a kmproxy user: cannot tell what postinst did"
DEBIAN_FRONTEND=noninteractive dpkg -i "$deb" >"$work/live-install.log" 2>&1 || { cat "$work/live-install.log"; fail "dpkg -i"; }
getent passwd kmproxy | grep -q ':/var/lib/kmproxy:/usr/sbin/nologin$' || fail "postinst made no kmproxy system user: $(getent passwd kmproxy)"
[ "$(stat -c '%U:%G %a' /var/log/kmproxy)" = "kmproxy:kmproxy 750" ] || fail "/var/log/kmproxy is $(stat -c '%U:%G %a' /var/log/kmproxy)"
[ "$(stat -c '%U:%G %a' /etc/kmproxy)" = "root:kmproxy 750" ] || fail "/etc/kmproxy is $(stat -c '%U:%G %a' /etc/kmproxy)"
grep -q 'deb-systemd-invoke' "$calls" && fail "a first install started something: $(cat "$calls")"

# 2. the README's example configuration, as written, run as the unit runs it
awk '/^```properties$/ { f = 1; next } /^```$/ { f = 0 } f' "$readme" >/etc/kmproxy/kmproxy.properties
grep -q '^log.file=/var/log/kmproxy/kmproxy.log$' /etc/kmproxy/kmproxy.properties || fail "README's example changed: adapt this test"
listen=$(sed -n 's/^metrics.listen=.*:\([0-9]*\)$/\1/p' /etc/kmproxy/kmproxy.properties)
serve_until_healthy readme "curl -sf -m 2 http://127.0.0.1:$listen/healthz" /usr/bin/kmproxy run --config /etc/kmproxy/kmproxy.properties
grep -q 'following the KRaft quorum' /var/log/kmproxy/kmproxy.log || fail "log.file /var/log/kmproxy/kmproxy.log got no log"

# 2b. the container's command on the container's configuration (the example, as the Containerfile copies
#     it), as the kmproxy user; its HEALTHCHECK, run as written, must pass
cp /etc/kmproxy/kmproxy.properties.example /etc/kmproxy/kmproxy.properties
read -r -a cmd < <(sed -n 1p "$container")
health=$(sed -n 2p "$container")
serve_until_healthy container "$health" "${cmd[@]}"

# 3. upgrade: prerm stops the running unit, postinst starts it again (deb-systemd-invoke: if enabled)
: >"$calls"
dpkg -i "$upgrade" >"$work/live-upgrade.log" 2>&1 || { cat "$work/live-upgrade.log"; fail "dpkg -i (upgrade)"; }
grep -qx 'deb-systemd-invoke stop kmproxy.service' "$calls" || fail "the upgrade did not stop kmproxy.service: $(cat "$calls")"
grep -qx 'deb-systemd-invoke start kmproxy.service' "$calls" || fail "the upgrade did not start kmproxy.service again: $(cat "$calls")"
[ ! -e /run/kmproxy.upgrade-units ] || fail "postinst left /run/kmproxy.upgrade-units"

# 4. remove stops it and starts nothing; purge removes the logs; the user stays
: >"$calls"
dpkg -r kmproxy >"$work/live-remove.log" 2>&1 || { cat "$work/live-remove.log"; fail "dpkg -r"; }
grep -qx 'deb-systemd-invoke stop kmproxy.service' "$calls" || fail "dpkg -r did not stop kmproxy.service: $(cat "$calls")"
grep -q 'deb-systemd-invoke start' "$calls" && fail "dpkg -r started something: $(cat "$calls")"
[ ! -e /usr/bin/kmproxy ] || fail "/usr/bin/kmproxy is still there after dpkg -r"
dpkg -P kmproxy >"$work/live-purge.log" 2>&1 || { cat "$work/live-purge.log"; fail "dpkg -P"; }
[ ! -e /var/log/kmproxy ] || fail "the purge left /var/log/kmproxy"
getent passwd kmproxy >/dev/null || fail "the purge removed the kmproxy user"
echo "test_package (live root): install, README example, upgrade, remove and purge as on a host"
