#!/usr/bin/env bash
# Rebuilds the committed SPIR-V test data from the GLSL beside it (needs
# glslc and spirv-tools; the tests themselves only read the .spv files).
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
entry() {  # entry SRC NAME OUT: compile SRC with its entry point renamed NAME
  glslc --target-env=vulkan1.3 -O -fshader-stage=compute "$1" -o "$tmp/$2.spv"
  spirv-dis --raw-id "$tmp/$2.spv" | sed "s/\"main\"/\"$2\"/" > "$tmp/$2.spvasm"
  spirv-as --target-env vulkan1.3 "$tmp/$2.spvasm" -o "$3"
}
entry saxpy.comp saxpy saxpy.spv
entry types.comp types types.spv
entry subgroup.comp subgroup subgroup.spv
entry atomic.comp atomic atomic.spv
entry add_one.comp add_one "$tmp/add_one.out.spv"
entry times_k.comp times_k "$tmp/times_k.out.spv"
spirv-link --target-env vulkan1.3 "$tmp/add_one.out.spv" "$tmp/times_k.out.spv" -o entries.spv
for f in *.spv; do spirv-val --target-env vulkan1.3 "$f"; done
