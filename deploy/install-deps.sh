#!/usr/bin/env bash
# Installs the Debian packages kmproxy needs to build, package and run (`make`, `make package`,
# `make demo`: a real Kafka cluster, so Java 17 and Maven), and builds the ZooKeeper C client it links.
# The test toolchain is deploy/install-test-deps.sh (`make test`).  Nothing here runs as a service.
# Safe to run again: it only calls apt-get when a package is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config python3   # python3: the codec generator (protocol/gen)
  librdkafka-dev libev-dev libssl-dev libjansson-dev
  zlib1g-dev libsnappy-dev liblz4-dev libzstd-dev   # compressed record batches
  libcriterion-dev               # `make` builds the test binaries with everything else
  # The ZooKeeper C client with SASL and OpenSSL (deploy/zookeeper-c): Debian's source, its jute
  # compiler (run with java), dpkg-source; the demo's ZooKeeper server runs from the same jars
  libsasl2-dev libsasl2-modules dpkg-dev libzookeeper-java default-jre-headless
  help2man                       # `make package`: kmproxy(1)
  # `make demo`: Apache Kafka 3.9.2's jars (Maven Central, tests/realcluster/fetch-kafka) need Java 17, and javac
  # builds the demo's Admin API client (tests/realcluster/java)
  openjdk-17-jdk-headless maven
)

source "$(dirname "$0")/apt-install.sh"
km_apt_install "${PACKAGES[@]}"
# Debian's ZooKeeper C client with SASL and OpenSSL (skipped when already built): see its script.
# It adds deb-src entries mirroring the machine's own Debian sources when there are none (apt-get source).
"$(dirname "$0")/zookeeper-c/build.sh"
