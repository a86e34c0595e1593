#!/usr/bin/env bash
# deploy/install-deps.sh (`make`, `make package`, `make demo`) installs the build and runtime
# dependencies only; the test toolchain is deploy/install-test-deps.sh's (`make test`, `make fuzz`,
# .ci/run), which also disables the services its packages ship; both keep apt from starting services.
# usage: test_deps_split.sh SOURCE_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
fail() { echo "test_deps_split: FAIL: $*" >&2; exit 1; }
packages() { # SCRIPT -> the names in its PACKAGES=( ... ) list, one a line
  sed -n '/^PACKAGES=(/,/^)/p' "$1" | sed 's/#.*//; s/PACKAGES=(//; s/)//' | tr -s ' \t' '\n' | sed '/^$/d'
}
build=$(packages "$src/deploy/install-deps.sh")
tests=$(packages "$src/deploy/install-test-deps.sh")
[ -n "$build" ] && [ -n "$tests" ] || fail "no PACKAGES list read"
for p in $build; do
  case $p in
  clang | libclang-rt-dev | kcat | zookeeper | tshark | haproxy | prometheus | default-jdk-headless | \
    krb5-kdc | krb5-admin-server | lintian | devscripts | systemd)
    fail "install-deps.sh (make, make package, make demo) installs the test tool $p" ;;
  esac
done
for p in clang libclang-rt-dev zookeeper tshark haproxy prometheus krb5-kdc lintian devscripts; do
  grep -qx "$p" <<<"$tests" || fail "install-test-deps.sh does not install $p"
done
# `make demo` runs a real Kafka cluster: Java 17 and Maven come with the build deps (the tests get them from there)
for p in openjdk-17-jdk-headless maven; do
  grep -qx "$p" <<<"$build" || fail "install-deps.sh (make demo) does not install $p"
done
grep -q '"$HERE/install-deps.sh"' "$src/deploy/install-test-deps.sh" || fail "install-test-deps.sh does not run install-deps.sh first"
grep -q 'exit 101' "$src/deploy/apt-install.sh" || fail "apt-install.sh does not keep services from starting (policy-rc.d)"
for svc in prometheus haproxy krb5-kdc; do
  grep -q "^SERVICES=(.*\b$svc\b" "$src/deploy/install-test-deps.sh" || fail "install-test-deps.sh does not disable $svc"
done
grep -rq 'sources.list' "$src/deploy/install-deps.sh" "$src/deploy/install-test-deps.sh" "$src/deploy/apt-install.sh" &&
  fail "an install script adds an apt source (only zookeeper-c/build.sh adds deb-src, for the client's source)"
# the Makefile: build, package and demo reach deps only; test, fuzz and CI reach test-deps
# (make's output captured first: grep -q quitting early would fail the pipe under pipefail)
plan=$(make -C "$src" -n package demo 2>/dev/null)
grep -q install-test-deps <<<"$plan" && fail "make package/demo run install-test-deps.sh"
grep -q 'deploy/install-deps.sh' <<<"$plan" || fail "make package does not run install-deps.sh"
for target in test fuzz; do
  plan=$(make -C "$src" -n "$target" 2>/dev/null)
  grep -q 'deploy/install-test-deps.sh' <<<"$plan" || fail "make $target does not run install-test-deps.sh"
done
grep -q '^make test' "$src/.ci/run" || fail ".ci/run does not run make test"
echo "test_deps_split: build deps and test toolchain apart, services kept from starting"
