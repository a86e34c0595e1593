#!/usr/bin/env bash
# The Debian package as an operator installs it: CPack builds it from BUILD_DIR, dpkg installs it into
# a scratch root (dpkg --root, maintainer scripts run chrootless with DPKG_ROOT: the running system is
# never touched), then: the files are there, postinst made the `kmproxy` system user and /etc/kmproxy
# readable by it only, systemd-analyze verify accepts the installed units (ExecStart pointed into the
# scratch root, the man page they cite found there), the installed kmproxy --version answers, and a
# purge removes what it installed.
# usage: test_package.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
for tool in cpack dpkg dpkg-deb dpkg-shlibdeps systemd-analyze useradd; do
  command -v "$tool" >/dev/null || { echo "test_package: SKIP: $tool is missing (deploy/install-deps.sh)"; exit 77; }
done
work=$(mktemp -d /tmp/kmproxy-package.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "test_package: FAIL: $*" >&2; exit 1; }
host_user_before=$(grep -c '^kmproxy:' /etc/passwd || true)

# 1. the package
(cd "$build" && cpack -B "$work/out") >"$work/cpack.log" 2>&1 || { cat "$work/cpack.log"; fail "cpack"; }
debs=("$work"/out/kmproxy_*.deb)
[ -f "${debs[0]}" ] || fail "cpack made no kmproxy_*.deb in $work/out"
deb=${debs[0]}
version=$(dpkg-deb -f "$deb" Version)
depends=$(dpkg-deb -f "$deb" Depends)
# The ZooKeeper client is linked in statically (deploy/zookeeper-c); Cyrus SASL's mechanisms are plugins.
for dep in passwd libsasl2-2 libsasl2-modules librdkafka1 libssl3; do
  [[ "$depends" == *"$dep"* ]] || fail "Depends lacks $dep: $depends"
done
[[ "$depends" != *libzookeeper* ]] || fail "Depends names Debian's ZooKeeper client, which lacks SASL and TLS: $depends"
[[ "$(dpkg-deb -f "$deb" Recommends)" == *libsasl2-modules-gssapi-mit* ]] || fail "Recommends lacks the Kerberos plugin"

# 2. a scratch root with an empty dpkg database and the account files useradd --prefix edits
root=$work/root
mkdir -p "$root"/var/lib/dpkg/{info,updates} "$root"/var/log "$root"/etc
touch "$root"/var/lib/dpkg/status
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root"/etc/passwd
printf 'root:x:0:\n' >"$root"/etc/group
printf 'root:*:19000:0:99999:7:::\n' >"$root"/etc/shadow
printf 'root:*::\n' >"$root"/etc/gshadow
# --force-depends: the scratch database knows no libraries (the host has them: the binary runs below)
dpkg --root="$root" --force-script-chrootless --force-depends -i "$deb" >"$work/dpkg.log" 2>&1 ||
  { cat "$work/dpkg.log"; fail "dpkg -i"; }
dpkg --root="$root" -s kmproxy | grep -qx 'Status: install ok installed' || fail "dpkg does not list kmproxy installed"

# 3. the files
for f in usr/bin/kmproxy usr/lib/systemd/system/kmproxy.service usr/lib/systemd/system/kmproxy@.service \
         etc/kmproxy/kmproxy.properties.example usr/share/man/man1/kmproxy.1.gz usr/share/doc/kmproxy/README.md; do
  [ -e "$root/$f" ] || fail "/$f is not installed"
done
[ -x "$root/usr/bin/kmproxy" ] || fail "/usr/bin/kmproxy is not executable"
grep -qx '/etc/kmproxy/kmproxy.properties.example' "$root/var/lib/dpkg/info/kmproxy.conffiles" ||
  fail "the example configuration is not a conffile"
zcat "$root/usr/share/man/man1/kmproxy.1.gz" >"$work/kmproxy.1"
grep -q '^\.TH KMPROXY "1"' "$work/kmproxy.1" || fail "kmproxy.1.gz is not a section-1 man page"
for cmd in run zk metadata proxy; do
  grep -q "^\.SS \"kmproxy $cmd\"" "$work/kmproxy.1" || fail "the man page lacks 'kmproxy $cmd --help'"
done

# 4. postinst: the system user, /etc/kmproxy root:kmproxy 0750
user=$(grep '^kmproxy:' "$root/etc/passwd") || fail "postinst made no kmproxy user"
IFS=: read -r _ _ uid gid _ home shell <<<"$user"
[ "$uid" -lt 1000 ] || fail "kmproxy is not a system user (uid $uid)"
[ "$shell" = /usr/sbin/nologin ] && [ "$home" = /var/lib/kmproxy ] || fail "kmproxy user: $user"
grep -q "^kmproxy:x:$gid:" "$root/etc/group" || fail "no kmproxy group with gid $gid"
[ "$(stat -c '%a %u %g' "$root/etc/kmproxy")" = "750 0 $gid" ] ||
  fail "/etc/kmproxy is $(stat -c '%a %u %g' "$root/etc/kmproxy"), want 750 root:kmproxy"

# 5. the units, as installed, with ExecStart pointing at the scratch root's binary
mkdir "$work/units"
sed "s#/usr/bin/kmproxy#$root/usr/bin/kmproxy#" "$root/usr/lib/systemd/system/kmproxy.service" \
  >"$work/units/kmproxy.service"
sed "s#/usr/bin/kmproxy#$root/usr/bin/kmproxy#" "$root/usr/lib/systemd/system/kmproxy@.service" \
  >"$work/units/kmproxy@test.service"
grep -q "^ExecStart=$root/usr/bin/kmproxy run --config /etc/kmproxy/kmproxy.properties$" "$work/units/kmproxy.service" ||
  fail "kmproxy.service does not run /usr/bin/kmproxy"
for unit in kmproxy.service kmproxy@test.service; do
  (cd "$work/units" && MANPATH="$root/usr/share/man" systemd-analyze verify "$work/units/$unit") \
    >"$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "systemd-analyze verify $unit"; }
  [ ! -s "$work/verify.log" ] || { cat "$work/verify.log"; fail "systemd-analyze verify $unit complained"; }
done

# 6. the installed binary
"$root/usr/bin/kmproxy" --version >"$work/version" || fail "kmproxy --version exited $?"
head -1 "$work/version" | grep -qx "kmproxy $version" || fail "--version does not say $version: $(head -1 "$work/version")"
grep -qE '^commit ([0-9a-f]{40}(-dirty)?|unknown)$' "$work/version" || fail "--version names no commit"
grep -q 'LeaderAndIsr v0-7' "$work/version" || fail "--version names no Kafka versions"

# 7. deploy/Containerfile installs this package (no container engine runs here): what it names must be
#    what the package installs and what the units run
cf=$(dirname "$0")/../../deploy/Containerfile
entry=$(sed -n 's/^ENTRYPOINT \["\([^"]*\)".*/\1/p' "$cf")
[ -n "$entry" ] && [ -x "$root$entry" ] || fail "Containerfile's ENTRYPOINT '$entry' is not the package's binary"
example=$(grep -oE 'cp /etc/kmproxy/[^ ]+' "$cf" | cut -d' ' -f2)
[ -n "$example" ] && [ -f "$root$example" ] || fail "Containerfile copies '$example', which the package lacks"
grep -q '^CMD \["run", "--config", "/etc/kmproxy/kmproxy.properties"\]$' "$cf" ||
  fail "Containerfile's CMD does not run the units' configuration"
grep -qx 'USER kmproxy' "$cf" && grep -qx 'User=kmproxy' "$root/usr/lib/systemd/system/kmproxy.service" ||
  fail "Containerfile and kmproxy.service do not both run as kmproxy"
grep -q 'COPY --from=build /src/build/kmproxy_\*.deb' "$cf" && [[ $(basename "$deb") == kmproxy_*.deb ]] ||
  fail "Containerfile does not copy the package cpack makes ($(basename "$deb"))"

# 8. purge: the files go, the conffile too; the user stays (Debian's practice for system users)
dpkg --root="$root" --force-script-chrootless -P kmproxy >"$work/purge.log" 2>&1 || { cat "$work/purge.log"; fail "dpkg -P"; }
for f in usr/bin/kmproxy usr/lib/systemd/system/kmproxy.service etc/kmproxy/kmproxy.properties.example; do
  [ ! -e "$root/$f" ] || fail "/$f is still there after the purge"
done
[ "$(grep -c '^kmproxy:' /etc/passwd || true)" = "$host_user_before" ] || fail "the host's /etc/passwd changed"
echo "test_package: $(basename "$deb") installs, verifies and purges"
