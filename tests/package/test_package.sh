#!/usr/bin/env bash
# The Debian package as an operator installs it: CPack builds it from BUILD_DIR; lintian finds no error
# or warning in it; hardening-check passes its binary; dpkg installs it into a scratch root (dpkg --root,
# maintainer scripts run chrootless with DPKG_ROOT: the running system is never touched), then: the
# files are there, postinst made the `kmproxy` system user and /etc/kmproxy readable by it only,
# systemd-analyze verify accepts the installed units (ExecStart pointed into the scratch root, the man
# page they cite found there) and every path their sandbox directives require is one the package
# creates, the installed kmproxy --version answers, an upgrade and a purge work.  Then live_root.sh
# installs, upgrades, removes and purges it with plain dpkg on this machine's root seen through
# overlays in a private mount namespace (the host is never changed) and runs the README's example.
# usage: test_package.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
for tool in cpack dpkg dpkg-deb dpkg-shlibdeps systemd-analyze useradd lintian hardening-check; do
  command -v "$tool" >/dev/null || { echo "test_package: SKIP: $tool is missing (deploy/install-test-deps.sh)"; exit 77; }
done
work=$(mktemp -d /tmp/kmproxy-package.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "test_package: FAIL: $*" >&2; exit 1; }
host_user_before=$(grep -c '^kmproxy:' /etc/passwd || true)
src=$(cd "$(dirname "$0")/../.." && pwd)

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

# 1a. lintian: no error, no warning (information tags are listed, not failed on)
lintian --fail-on error,warning --info "$deb" >"$work/lintian.log" 2>&1 || { cat "$work/lintian.log"; fail "lintian"; }
# 1b. the hardening flags (cmake/hardening.cmake) in the packaged binary.  Control-flow protection
#     (-fcf-protection, CET) is not required: the statically linked ZooKeeper client lacks it.
dpkg-deb -x "$deb" "$work/extracted"
hardening-check --nocfprotection "$work/extracted/usr/bin/kmproxy" >"$work/hardening.log" 2>&1 ||
  { cat "$work/hardening.log"; fail "hardening-check"; }
# 1c. the licence: Apache-2.0 in the tree and, in Debian's format, in the package; the changelog names
#     this version
cmp -s "$src/LICENSE" /usr/share/common-licenses/Apache-2.0 || fail "LICENSE is not the Apache License 2.0"
copyright=$work/extracted/usr/share/doc/kmproxy/copyright
head -1 "$copyright" | grep -qx 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' ||
  fail "/usr/share/doc/kmproxy/copyright is not in Debian's copyright format"
grep -qx 'License: Apache-2.0' "$copyright" || fail "the copyright file names no Apache-2.0 licence"
zcat "$work/extracted/usr/share/doc/kmproxy/changelog.gz" | head -1 | grep -q "^kmproxy ($version) " ||
  fail "changelog.gz does not start with version $version"
# the README tells an operator the licence, where the deployment story is, what each deps script installs,
# and keeps the two developer commands (its example configuration runs in live_root.sh)
for want in 'Apache License 2.0' '(docs/runbook.md)' 'deploy/install-deps.sh' 'deploy/install-test-deps.sh' \
            'make demo' 'make test' 'apt install ./build/kmproxy_' 'Apache Kafka 3.9'; do
  grep -qF -- "$want" "$src/README.md" || fail "README.md does not mention '$want'"
done

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
         etc/kmproxy/kmproxy.properties.example usr/share/man/man1/kmproxy.1.gz usr/share/doc/kmproxy/README.md \
         usr/share/kmproxy/prometheus/kmproxy-rules.yml usr/share/kmproxy/grafana/kmproxy-dashboard.json \
         var/log/kmproxy; do
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
# the page names installed files, not places in the source tree, and every one it names is installed
grep -nE '(^|[^/a-z])(deploy|docs)/' "$work/kmproxy.1" && fail "the man page points into the source tree (above)"
for f in $(grep -oE '/(etc|usr/share)/[A-Za-z0-9_./-]*[A-Za-z0-9]' "$work/kmproxy.1" | grep -v '/etc/kmproxy/kmproxy.properties$' | sort -u); do
  [ -e "$root$f" ] || fail "the man page names $f, which the package does not install"
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

# 5a. the units' sandbox: systemd refuses to start a unit (226/NAMESPACE) when a path in these
#     directives is missing, unless it is prefixed "-".  Every required one must be one the package
#     creates (the directories systemd makes itself, StateDirectory= and LogsDirectory=, are not listed).
for unit in kmproxy.service kmproxy@.service; do
  while IFS= read -r path; do
    path=${path#+}
    [[ $path == -* ]] && continue
    path=${path%%:*}  # Bind*Paths=SRC:DST
    [ -e "$root$path" ] || fail "$unit requires $path, which the package does not create (prefix it with -)"
  done < <(sed -nE 's/^(ReadOnlyPaths|ReadWritePaths|InaccessiblePaths|ExecPaths|NoExecPaths|BindPaths|BindReadOnlyPaths)=//p' \
             "$root/usr/lib/systemd/system/$unit" | tr ' ' '\n' | sed '/^$/d')
done
grep -qx 'ReadOnlyPaths=-/var/lib/kafka' "$root/usr/lib/systemd/system/kmproxy.service" ||
  fail "kmproxy.service does not give read access to /var/lib/kafka (metadata.source=dir)"

# 6. the installed binary
"$root/usr/bin/kmproxy" --version >"$work/version" || fail "kmproxy --version exited $?"
head -1 "$work/version" | grep -qx "kmproxy $version" || fail "--version does not say $version: $(head -1 "$work/version")"
grep -qE '^commit ([0-9a-f]{40}(-dirty)?|unknown)$' "$work/version" || fail "--version names no commit"
grep -q 'LeaderAndIsr v0-7' "$work/version" || fail "--version names no Kafka versions"
# a log.file in a directory that does not exist: exit 2 (bad configuration) saying which directory
rc=0
"$root/usr/bin/kmproxy" run --set controller.quorum.bootstrap.servers=controller1:9093 \
  --set zookeeper.connect=127.0.0.1:1/kafka --set metrics.listen=127.0.0.1:0 \
  --set log.file="$work/no-such-dir/kmproxy.log" 2>"$work/logfile.err" || rc=$?
[ "$rc" = 2 ] && grep -q "the directory $work/no-such-dir does not exist" "$work/logfile.err" ||
  fail "a log.file in a missing directory: exit $rc, $(cat "$work/logfile.err")"

# 7. deploy/Containerfile installs this package (no container engine runs here): what it names must be
#    what the package installs and what the units run
cf=$(dirname "$0")/../../deploy/Containerfile
entry=$(sed -n 's/^ENTRYPOINT \["\([^"]*\)".*/\1/p' "$cf")
[ -n "$entry" ] && [ -x "$root$entry" ] || fail "Containerfile's ENTRYPOINT '$entry' is not the package's binary"
example=$(grep -oE 'cp /etc/kmproxy/[^ ]+' "$cf" | cut -d' ' -f2)
[ -n "$example" ] && [ -f "$root$example" ] || fail "Containerfile copies '$example', which the package lacks"
# (live_root.sh runs its CMD and HEALTHCHECK against the installed package)
grep -qx 'User=kmproxy' "$root/usr/lib/systemd/system/kmproxy.service" || fail "kmproxy.service does not run as kmproxy"
python3 - "$cf" "$work/container.cmd" <<'PY' || fail "deploy/Containerfile (above)"
import json, re, sys
text = open(sys.argv[1]).read()
lines = re.sub(r"\\\n", " ", text).splitlines()   # continuation lines joined
instr = [l.strip() for l in lines if l.strip() and not l.strip().startswith("#")]
known = {"FROM", "WORKDIR", "COPY", "RUN", "USER", "EXPOSE", "HEALTHCHECK", "ENTRYPOINT", "CMD", "ENV", "ARG", "LABEL"}
def fail(msg): sys.exit("Containerfile: " + msg)
for l in instr:
    if l.split()[0] not in known: fail("unknown instruction: " + l)
first = {}
for l in instr: first.setdefault(l.split()[0], []).append(l.split(None, 1)[1])
stages = [i for i, l in enumerate(instr) if l.startswith("FROM ")]
if len(stages) != 2: fail("want a build stage and a runtime stage")
build = " ".join(instr[stages[0]:stages[1]])
if "deploy/install-deps.sh" not in build or "install-test-deps" in build: fail("the build stage must install the build dependencies only")
user = first["USER"][-1]
m = re.fullmatch(r"(\d+):(\d+)", user)
if not m: fail("USER is not numeric uid:gid: " + user)
if "useradd --system --uid %s --gid kmproxy" % m[1] not in text or "groupadd --system --gid %s kmproxy" % m[2] not in text:
    fail("USER %s is not the kmproxy user and group the image creates" % user)
if text.index("useradd --system --uid") > text.index("apt-get install"): fail("kmproxy's uid must be fixed before the package's postinst")
port = first["EXPOSE"][-1]
cmd = json.loads(first["CMD"][-1])
if cmd[:3] != ["run", "--config", "/etc/kmproxy/kmproxy.properties"]: fail("CMD does not run the units' configuration")
if "metrics.listen=0.0.0.0:%s" % port not in cmd: fail("CMD does not bind metrics.listen to 0.0.0.0:%s (EXPOSE)" % port)
hc = first["HEALTHCHECK"][-1]
hc_cmd = json.loads(hc[hc.index("CMD ") + 4:])
if "http://127.0.0.1:%s/healthz" % port not in hc_cmd: fail("HEALTHCHECK does not ask /healthz on the exposed port")
with open(sys.argv[2], "w") as out:  # for live_root.sh: the command line and the health check, one a line
    out.write(" ".join(json.loads(first["ENTRYPOINT"][-1]) + cmd) + "\n" + " ".join(hc_cmd) + "\n")
PY
grep -q 'COPY --from=build /src/build/kmproxy_\*.deb' "$cf" && [[ $(basename "$deb") == kmproxy_*.deb ]] ||
  fail "Containerfile does not copy the package cpack makes ($(basename "$deb"))"

# 8. an upgrade: the same package as a newer version (prerm upgrade, postinst configure OLD)
mkdir "$work/next"
dpkg-deb -R "$deb" "$work/next/tree"
sed -i "s/^Version: .*/Version: $version+next1/" "$work/next/tree/DEBIAN/control"
dpkg-deb --root-owner-group -b "$work/next/tree" "$work/next/kmproxy_next.deb" >/dev/null
dpkg --root="$root" --force-script-chrootless --force-depends -i "$work/next/kmproxy_next.deb" >"$work/upgrade.log" 2>&1 ||
  { cat "$work/upgrade.log"; fail "dpkg -i (upgrade to $version+next1)"; }
dpkg --root="$root" -s kmproxy | grep -qx "Version: $version+next1" || fail "the upgrade did not install $version+next1"
[ "$(grep -c '^kmproxy:' "$root/etc/passwd")" = 1 ] || fail "the upgrade added a second kmproxy user"

# 9. purge: the files go, the conffile and the logs too; the user stays (Debian's practice for system users)
dpkg --root="$root" --force-script-chrootless -P kmproxy >"$work/purge.log" 2>&1 || { cat "$work/purge.log"; fail "dpkg -P"; }
for f in usr/bin/kmproxy usr/lib/systemd/system/kmproxy.service etc/kmproxy/kmproxy.properties.example var/log/kmproxy; do
  [ ! -e "$root/$f" ] || fail "/$f is still there after the purge"
done
[ "$(grep -c '^kmproxy:' /etc/passwd || true)" = "$host_user_before" ] || fail "the host's /etc/passwd changed"
echo "test_package: $(basename "$deb") passes lintian and hardening-check, installs, verifies, upgrades and purges"

# 10. the same on this machine's own root, through overlays in a private mount and network namespace
if unshare --mount --net --propagation private true 2>/dev/null; then
  unshare --mount --net --propagation private \
    bash "$(dirname "$0")/live_root.sh" "$work/live" "$deb" "$work/next/kmproxy_next.deb" "$src/README.md" "$work/container.cmd" ||
    fail "the live-root install (above)"
  [ "$(grep -c '^kmproxy:' /etc/passwd || true)" = "$host_user_before" ] || fail "the live-root test changed the host's /etc/passwd"
else
  echo "test_package: no mount namespace here (unshare needs CAP_SYS_ADMIN): the live-root install was not tried"
fi
