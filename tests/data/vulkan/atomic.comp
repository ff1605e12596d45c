// Float atomics (VK_EXT_shader_atomic_float): every invocation adds its id to sum[0].
#version 450
#extension GL_EXT_shader_atomic_float : require
layout(local_size_x = 32) in;
layout(set = 0, binding = 0) buffer Sum { float sum[]; };
void main() {
  atomicAdd(sum[0], float(gl_GlobalInvocationID.x));
}
