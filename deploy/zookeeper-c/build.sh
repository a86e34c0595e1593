#!/usr/bin/env bash
# Builds Debian's own ZooKeeper C client (source package `zookeeper`, the same 3.8 as libzookeeper-st)
# with Cyrus SASL and OpenSSL switched on, plus kmproxy-secure.patch, into $PREFIX (default
# /opt/kmproxy-zkclient), where CMakeLists.txt finds it. Debian's binary package is built without
# both, so zookeeper_init_sasl/zookeeper_init_ssl are missing from it.
# Skipped when $PREFIX holds a build of this exact source version and patch (the stamp file).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PREFIX=${PREFIX:-/opt/kmproxy-zkclient}
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

version=$(dpkg-query -W -f='${Version}' libzookeeper-java)
stamp="$version $(sha256sum "$HERE/kmproxy-secure.patch" "$0" | sha256sum | cut -c1-16)"
if [ -f "$PREFIX/stamp" ] && [ "$(cat "$PREFIX/stamp")" = "$stamp" ]; then
  exit 0
fi

# apt-get source needs deb-src entries: derive them from the machine's own Debian entries.
if ! apt-cache showsrc zookeeper >/dev/null 2>&1 || [ -z "$(apt-cache showsrc zookeeper 2>/dev/null)" ]; then
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources |
      $SUDO tee /etc/apt/sources.list.d/kmproxy-deb-src.sources >/dev/null
  else
    grep -h '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' |
      $SUDO tee /etc/apt/sources.list.d/kmproxy-deb-src.list >/dev/null
  fi
  $SUDO apt-get update -qq
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
apt-get source -qq --download-only "zookeeper=$version" 2>/dev/null
dpkg-source -x zookeeper_*.dsc src >/dev/null 2>&1  # with Debian's patches
cd src
patch -s -p1 < "$HERE/kmproxy-secure.patch"
c=zookeeper-client/zookeeper-client-c
# The jute-generated sources come from the Java build; Debian's own jute compiler makes them.
mkdir -p $c/generated
(cd $c/generated && java -cp /usr/share/java/zookeeper-jute.jar org.apache.jute.compiler.generated.Rcc \
   -l c ../../../zookeeper-jute/src/main/resources/zookeeper.jute >/dev/null)
cmake -S $c -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
  -DWANT_SYNCAPI=OFF -DWANT_CPPUNIT=OFF -DWITH_OPENSSL=ON -DWITH_CYRUS_SASL=ON >build.log 2>&1 ||
  { cat build.log; exit 1; }
grep -q 'will build with SASL support' build.log && grep -q 'will build with SSL support' build.log ||
  { cat build.log; echo "zookeeper-c: SASL or OpenSSL not found" >&2; exit 1; }
cmake --build build -j2 --target zookeeper hashtable >>build.log 2>&1 || { cat build.log; exit 1; }

$SUDO rm -rf "$PREFIX"
$SUDO install -d "$PREFIX/include/zookeeper" "$PREFIX/lib"
$SUDO install -m 644 $c/include/*.h $c/generated/zookeeper.jute.h "$PREFIX/include/zookeeper/"
$SUDO install -m 644 build/libzookeeper.a build/libhashtable.a "$PREFIX/lib/"
echo "$stamp" | $SUDO tee "$PREFIX/stamp" >/dev/null
echo "zookeeper-c: built Debian's ZooKeeper $version C client with SASL and OpenSSL into $PREFIX"
