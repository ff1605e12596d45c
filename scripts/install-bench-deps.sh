#!/usr/bin/env bash
# The anchors the benchmarks compare loom with (bench/, never the tests) (Debian/Ubuntu):
#   clang-19   OpenCL C -> AMDGPU code objects (bench/saxpy.cl, bench/build_bench.py, bench/server_bench.py)
#   glslc      GLSL -> SPIR-V (bench/saxpy.comp)
#   cmake, ninja come with `pip install -e '.[test]'`; GNU make with the system.
# Packages already installed are left alone; nothing is done on other systems.
set -euo pipefail

packages=(clang-19 glslc make)

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-bench-deps: no apt-get here; install the equivalents of: ${packages[*]}" >&2
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
