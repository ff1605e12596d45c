#!/usr/bin/env bash
# The Debian sid chroot in which loom's tests run a modern Bazel and a remote-execution worker
# (tests/test_bazel*.py, docs/bazel.md "What is tested"):
#   bazel-bootstrap  Bazel 7.7.1 (Debian's own build, offline: its rules come as Debian packages)
#   buildbox         buildbox-casd, buildbox-worker, buildbox-run-hosttools: BuildGrid's worker side
# The host keeps Debian 12's Bazel 4.2.3 (scripts/install-system-deps.sh); BuildGrid (pip) and
# PostgreSQL run on the host; the tests start and stop all of it.
#
# Idempotent: a finished chroot records this recipe in $root/.loom-recipe and is left alone while
# the recipe is unchanged. A broken or half-made one is made again from scratch; a killed run leaves
# only $root.partial, which the next run removes.
#
# The chroot runs loom through bind mounts, not an install of its own: scripts/bazel-chroot.sh binds
# the checkout and the Python that runs it at the same paths, so Bazel inside and outside run the
# same loom, and a remote worker in the chroot finds it at the path the client's wrapper names.
#
# Exit status: 0 ready; 3 the Debian archive cannot be reached (the tests that need the chroot then
# skip, saying so); anything else is a failure.
#
#   LOOM_BAZEL_CHROOT    where the chroot lives (default /var/lib/loom/bazel-sid)
#   LOOM_DEBIAN_MIRROR   the Debian archive (default http://deb.debian.org/debian)
set -euo pipefail

root=${LOOM_BAZEL_CHROOT:-/var/lib/loom/bazel-sid}
mirror=${LOOM_DEBIAN_MIRROR:-http://deb.debian.org/debian}

# Bazel needs only a Java runtime to run its server: the rules it builds here use no Java and no C
# compiler. Debian's bazel-bootstrap depends on a full JDK (350 MB) and build-essential, so two
# empty stand-in packages satisfy those dependencies, and the system bazelrc below points Bazel's
# server at the runtime. libffi8 ... zlib1g: what the host's Python and llvmlite link against.
packages=(bazel-bootstrap buildbox default-jre-headless libffi8 libssl3t64 libbz2-1.0 liblzma5 libuuid1 zlib1g)
standins=("default-jdk-headless:default-jre-headless" "build-essential:")
# Bazel 7's own module (MODULE.tools) depends on modules that Debian does not package; offline,
# bzlmod needs a local module for each. They are never built: an empty module is enough.
stubs=(protobuf zlib buildozer apple_support)
overrides=/usr/share/loom-bazel/overrides

recipe="packages=${packages[*]} standins=${standins[*]} stubs=${stubs[*]} mirror=$mirror v1"

if [ "$(id -u)" -ne 0 ]; then
  echo "setup-bazel: needs root (debootstrap, chroot, mounts)" >&2
  exit 1
fi
if [ -f "$root/.loom-recipe" ] && [ "$(cat "$root/.loom-recipe")" = "$recipe" ]; then
  exit 0
fi

mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock 9  # one setup at a time; a second waits, then finds the chroot ready
if [ -f "$root/.loom-recipe" ] && [ "$(cat "$root/.loom-recipe")" = "$recipe" ]; then
  exit 0
fi

if ! python3 - "$mirror" <<'EOF'
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1] + "/dists/sid/Release", timeout=20) as reply:
    reply.read(64)
EOF
then
  echo "setup-bazel: the Debian archive $mirror cannot be reached; Bazel 7 and remote execution are not set up" >&2
  exit 3
fi

if ! command -v debootstrap >/dev/null 2>&1; then
  echo "setup-bazel: no debootstrap (scripts/install-system-deps.sh installs it)" >&2
  exit 1
fi

# Runs a command inside the chroot, with /proc and /dev mounted in a private mount namespace.
in_chroot() {
  unshare -m --propagation private sh -c '
    root=$1; shift
    mount -t proc proc "$root/proc" && mount --rbind /dev "$root/dev" &&
    exec chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
      DEBIAN_FRONTEND=noninteractive "$@"' sh "$root" "$@"
}

started=$(date +%s)
partial=$root.partial
rm -rf "$partial"
if [ -d "$root" ] && [ ! -x "$root/usr/bin/apt-get" ]; then
  rm -rf "$root"  # a chroot that is not one
fi
if [ ! -d "$root" ]; then
  echo "setup-bazel: debootstrap sid into $root" >&2
  # A second try: a fetch from a busy mirror fails now and then (debootstrap has no retry option).
  debootstrap --variant=minbase sid "$partial" "$mirror" >"$partial.log" 2>&1 || {
    echo "setup-bazel: debootstrap failed; trying once more" >&2
    rm -rf "$partial"
    debootstrap --variant=minbase sid "$partial" "$mirror" >"$partial.log" 2>&1
  } || {
    tail -20 "$partial.log" >&2
    exit 1
  }
  mv "$partial.log" "$partial/debootstrap.log"
  mv "$partial" "$root"
fi
rm -f "$root/.loom-recipe"

# The archive may be a snapshot older than its Release file's Valid-Until; its signatures still count.
echo 'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/90loom-snapshot"
# apt retries a failed download (a busy mirror) instead of failing the setup.
echo 'Acquire::Retries "3";' >"$root/etc/apt/apt.conf.d/90loom-retries"
# No daemon starts inside the chroot.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"

mkdir -p "$root/var/tmp/loom-standins"
debs=()
for spec in "${standins[@]}"; do
  name=${spec%%:*} depends=${spec#*:}
  folder=$root/var/tmp/loom-standins/$name
  mkdir -p "$folder/DEBIAN"
  {
    echo "Package: $name"
    echo "Version: 99:0-loom"
    echo "Architecture: all"
    echo "Maintainer: loom's scripts/setup-bazel.sh <nobody@invalid>"
    [ -z "$depends" ] || echo "Depends: $depends"
    echo "Description: stand-in: loom's Bazel tests build no Java and no C"
  } >"$folder/DEBIAN/control"
  in_chroot dpkg-deb --build "/var/tmp/loom-standins/$name" "/var/tmp/loom-standins/$name.deb" >/dev/null
  debs+=("/var/tmp/loom-standins/$name.deb")
done

echo "setup-bazel: apt-get install ${packages[*]}" >&2
in_chroot apt-get update -qq
in_chroot apt-get install -y -qq --no-install-recommends "${packages[@]}" "${debs[@]}" >"$root/var/tmp/loom-install.log" 2>&1 || {
  tail -30 "$root/var/tmp/loom-install.log" >&2
  exit 1
}
in_chroot apt-get clean

for module in "${stubs[@]}"; do
  mkdir -p "$root$overrides/$module"
  echo "module(name = \"$module\")" >"$root$overrides/$module/MODULE.bazel"
  : >"$root$overrides/$module/BUILD.bazel"
done
{
  echo "# Written by loom's scripts/setup-bazel.sh; Debian's /etc/bazel/bazelrc imports it."
  echo "# Bazel's server runs on the Java runtime (no JDK is installed)."
  echo "startup --server_javabase=/usr/lib/jvm/default-java"
  echo "# Offline bzlmod: modules Debian does not package, as empty local modules."
  for module in "${stubs[@]}"; do
    echo "common --override_module=$module=$overrides/$module"
  done
} >"$root/etc/bazel.bazelrc"

echo "$recipe" >"$root/.loom-recipe"
echo "setup-bazel: $root ready in $(($(date +%s) - started)) s" >&2
