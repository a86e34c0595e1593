#!/usr/bin/env bash
# kmproxy --version's commit comes from cmake/build_info.cmake: from git in a checkout, from
# .git-commit in a `git archive` tarball (export-subst fills it in), else "unknown"; never a guess.
# usage: test_build_info.sh SOURCE_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
work=$(mktemp -d /tmp/kmproxy-build-info.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "test_build_info: FAIL: $*" >&2; exit 1; }
commit_of() { # SOURCE_DIR -> the KM_GIT_COMMIT it generates
  rm -f "$work/h"
  cmake -DSOURCE_DIR="$1" -DVERSION=9.9.9 -DOUT="$work/h" -P "$src/cmake/build_info.cmake"
  grep -q '^#define KM_VERSION "9.9.9"$' "$work/h" || fail "no KM_VERSION in $(cat "$work/h")"
  sed -n 's/^#define KM_GIT_COMMIT "\(.*\)"$/\1/p' "$work/h"
}
grep -qx '.git-commit export-subst' "$src/.gitattributes" || fail ".gitattributes does not let git archive stamp .git-commit"

# a tarball made by git archive: .git-commit holds the commit, and there is no .git
mkdir "$work/tarball"
sha=0123456789abcdef0123456789abcdef01234567
echo "$sha" >"$work/tarball/.git-commit"
[ "$(commit_of "$work/tarball")" = "$sha" ] || fail "a git-archive tarball's commit is not used"
# a copy without .git whose .git-commit was never stamped
printf '$Format:%%H$\n' >"$work/tarball/.git-commit"
[ "$(commit_of "$work/tarball")" = unknown ] || fail "an unstamped tree does not say unknown"
# a checkout: git's HEAD (a fresh clone is clean; untracked files do not make it dirty)
if command -v git >/dev/null; then
  git -C "$work" init -q clone && cd "$work/clone"
  echo x >f && git add f && git -c user.name=t -c user.email=t@t commit -qm t
  head=$(git rev-parse HEAD)
  touch untracked
  [ "$(commit_of "$work/clone")" = "$head" ] || fail "a clean checkout does not give HEAD ($head)"
  echo y >f
  [ "$(commit_of "$work/clone")" = "$head-dirty" ] || fail "a changed checkout is not marked -dirty"
fi
echo "test_build_info: checkout, git-archive tarball and unstamped tree all named right"
