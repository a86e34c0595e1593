# Sourced by install-deps.sh and install-test-deps.sh: km_apt_install PACKAGE... installs the missing
# ones (via sudo when not root) without starting any service they ship (a policy-rc.d that refuses,
# for the duration, unless the machine already has one), and no recommended packages.
# KM_APT_INSTALLED: what it installed.
KM_SUDO=""
[ "$(id -u)" -eq 0 ] || KM_SUDO="sudo"
KM_APT_INSTALLED=()

km_apt_install() {
  local p missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "install-deps: installing ${missing[*]}"
  local policy=/usr/sbin/policy-rc.d ours=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# kmproxy install-deps: no service starts while it installs\nexit 101\n' |
      $KM_SUDO tee "$policy" >/dev/null
    $KM_SUDO chmod 755 "$policy"
    ours=1
  fi
  local rc=0
  $KM_SUDO apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $KM_SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" || rc=$?
  [ -z "$ours" ] || $KM_SUDO rm -f "$policy"
  [ "$rc" -eq 0 ] || return "$rc"
  KM_APT_INSTALLED=("${missing[@]}")
}
