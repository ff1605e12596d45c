#!/usr/bin/env bash
# System tools the test suite uses (Debian/Ubuntu):
#   gcc, libc6-dev                   a C compiler: loom server client builds the native client (tests/test_native_client.py)
#   libvulkan1, mesa-vulkan-drivers  the Vulkan loader and lavapipe, a CPU Vulkan device for `loom test`
#   spirv-tools                      spirv-val / spirv-dis, to validate emitted SPIR-V
#   llvm-19, lld-19                  llvm-readelf / llvm-objdump / ld.lld, to check emitted code objects
#   bazel-bootstrap                  Bazel 4.2.3, to build the Bazel rules' examples (tests/test_bazel*.py), offline
#   debootstrap                      the Debian sid chroot of Bazel 7 and buildbox (scripts/setup-bazel.sh)
#   postgresql                       the scheduler database of the remote-execution tests' BuildGrid
# Packages already installed are left alone; nothing is done on other systems.
set -euo pipefail

packages=(gcc libc6-dev libvulkan1 mesa-vulkan-drivers spirv-tools llvm-19 lld-19 bazel-bootstrap debootstrap postgresql)

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-system-deps: no apt-get here; install the equivalents of: ${packages[*]}" >&2
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
