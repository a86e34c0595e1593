#!/usr/bin/env bash
# Installs the Debian packages kmproxy needs to build, run and test.
# Safe to run again: it only calls apt-get when a package is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config python3
  clang libclang-rt-dev          # .ci/run's clang Release build; `make fuzz` (libFuzzer, sanitizers)
  librdkafka-dev kcat            # error names, mock cluster, real Kafka peer in tests
  zookeeper libzookeeper-java    # real servers for tests; the jute compiler for the client (deploy/zookeeper-c)
  libev-dev libssl-dev openssl libjansson-dev
  zlib1g-dev libsnappy-dev liblz4-dev libzstd-dev   # compressed record batches
  libcriterion-dev tshark curl   # curl: tests scrape /healthz, /readyz and /metrics as operators do
  haproxy                        # bench_inline: the TCP-mode proxy baseline
  default-jdk-headless           # test_zk_password checks the PasswordEncoder against the JDK's crypto
  prometheus python3-yaml        # promtool checks and unit-tests deploy/prometheus; the docs tests read the rules
  openjdk-17-jdk-headless        # ../shared/realkafka (Kafka 3.9) needs Java 17; javac builds tests/java
  libzstd-jni-java               # /usr/share/java/zstd-jni.jar: realkafka reads zstd batches with it
  libsasl2-dev libsasl2-modules dpkg-dev  # ZooKeeper C client with SASL + OpenSSL (deploy/zookeeper-c)
  libsasl2-modules-gssapi-mit krb5-kdc krb5-admin-server  # Kerberos to ZooKeeper; a KDC in test_zk_secure
  help2man systemd               # `make package`: kmproxy(1), dpkg-shlibdeps; the package test's systemd-analyze verify
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Debian's ZooKeeper C client with SASL and OpenSSL (skipped when already built): see its script.
"$(dirname "$0")/zookeeper-c/build.sh"
