#!/usr/bin/env bash
# Runs a command inside the chroot of scripts/setup-bazel.sh, e.g. its Bazel 7:
#   scripts/bazel-chroot.sh --bind "$PWD" --bind /opt/venv --cwd "$PWD/bazel/examples" -- bazel build //...
# Each --bind DIR appears at the same path inside (read-write), so a workspace, the loom it runs and
# the Python behind that loom have the same paths inside and out. /proc and /dev are mounted too.
# The mounts live in a private mount namespace: they vanish with the last process that uses them
# (a Bazel server started here keeps its own until it exits). The command gets a clean environment:
# PATH=/usr/bin:/bin, HOME=/root, LANG=C.UTF-8 and each --env NAME=VALUE.
#   LOOM_BAZEL_CHROOT  the chroot (default /var/lib/loom/bazel-sid)
set -euo pipefail

root=${LOOM_BAZEL_CHROOT:-/var/lib/loom/bazel-sid}
if [ "${1:-}" != --in-namespace ]; then
  if [ ! -f "$root/.loom-recipe" ]; then
    echo "bazel-chroot: no chroot at $root (run scripts/setup-bazel.sh)" >&2
    exit 1
  fi
  exec unshare -m --propagation private "$0" --in-namespace "$@"
fi
shift

binds=() envs=() cwd=/
while [ $# -gt 0 ]; do
  case $1 in
    --bind) binds+=("$(realpath -e "$2")"); shift 2 ;;
    --env) envs+=("$2"); shift 2 ;;
    --cwd) cwd=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "bazel-chroot: unknown option $1 (usage: [--bind DIR]... [--env NAME=VALUE]... [--cwd DIR] -- COMMAND...)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "bazel-chroot: no command" >&2; exit 2; }

mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
for dir in "${binds[@]}"; do
  mkdir -p "$root$dir"
  mount --bind "$dir" "$root$dir"
done
exec chroot "$root" env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 "${envs[@]}" \
  sh -c 'cd "$1" && shift && exec "$@"' sh "$cwd" "$@"
