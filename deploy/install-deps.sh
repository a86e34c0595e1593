#!/usr/bin/env bash
# Installs the Debian packages kmproxy needs to build, run and test.
# Safe to run again: it only calls apt-get when a package is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config python3
  librdkafka-dev kcat            # error names, mock cluster, real Kafka peer in tests
  libzookeeper-st-dev zookeeper  # single-threaded ZK client (driven from libev); real servers for tests
  libev-dev libssl-dev openssl libjansson-dev
  zlib1g-dev libsnappy-dev liblz4-dev libzstd-dev   # compressed record batches
  libcriterion-dev tshark curl   # curl: tests scrape /healthz, /readyz and /metrics as operators do
  haproxy                        # bench_inline: the TCP-mode proxy baseline
  default-jdk-headless           # test_zk_password checks the PasswordEncoder against the JDK's crypto
  help2man dpkg-dev systemd      # `make package`: kmproxy(1), dpkg-shlibdeps; the package test's systemd-analyze verify
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
