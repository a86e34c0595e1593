#!/usr/bin/env bash
# Installs the test toolchain `make test`, `make fuzz` and .ci/run use, on top of deploy/install-deps.sh
# (which it runs first).  Servers the tests start themselves on 127.0.0.1 (ZooKeeper, a Kerberos KDC,
# haproxy, Prometheus' promtool) come from Debian packages whose own services are never started:
# policy-rc.d refuses them during the install, and the units of the packages installed here are
# disabled and stopped afterwards, so nothing listens (Prometheus' :9090, haproxy, the KDC).
# Safe to run again: it only calls apt-get when a package is missing.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
"$HERE/install-deps.sh"

PACKAGES=(
  clang libclang-rt-dev          # .ci/run's clang Release build; `make fuzz` (libFuzzer, sanitizers)
  kcat zookeeper                 # a real Kafka client peer; ZooKeeper servers started by the tests
  tshark curl openssl iproute2   # tshark decodes captures; curl scrapes /healthz, /readyz, /metrics
  haproxy                        # bench_inline: the TCP-mode proxy baseline
  default-jdk-headless           # test_zk_password checks the PasswordEncoder against the JDK's crypto
  prometheus python3-yaml        # promtool checks and unit-tests deploy/prometheus; the docs tests read the rules
  libzstd-jni-java               # /usr/share/java/zstd-jni.jar: realkafka reads zstd batches with it
  libsasl2-modules-gssapi-mit krb5-kdc krb5-admin-server  # Kerberos to ZooKeeper; a KDC in test_zk_secure
  systemd lintian devscripts     # test_package: systemd-analyze verify, lintian, hardening-check
)
# The services those packages ship (disabled after a fresh install of their package)
SERVICES=(prometheus haproxy krb5-kdc krb5-admin-server zookeeper)

source "$HERE/apt-install.sh"
km_apt_install "${PACKAGES[@]}"
for svc in "${SERVICES[@]}"; do
  [[ " ${KM_APT_INSTALLED[*]} " == *" $svc "* ]] || continue  # an operator's own install stays as it is
  if [ -d /run/systemd/system ]; then
    $KM_SUDO systemctl disable --now "$svc.service" >/dev/null 2>&1 || true
  elif command -v systemctl >/dev/null; then
    $KM_SUDO systemctl disable "$svc.service" >/dev/null 2>&1 || true  # offline: the symlinks only
  fi
done
