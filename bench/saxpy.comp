#version 450
#extension GL_ARB_gpu_shader_int64 : require
// GLSL equivalent of samples/saxpy.loom, for bench/codegen_bench.py.
layout(local_size_x = 128) in;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform Args { uint64_t n; float alpha; } args;
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i < uint(args.n)) {
    y[i] = fma(args.alpha, x[i], y[i]);
  }
}
