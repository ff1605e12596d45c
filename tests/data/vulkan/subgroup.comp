// Subgroup facts: out[i] = (gl_SubgroupSize, subgroupAdd(1), gl_SubgroupInvocationID).
#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer Out { uvec4 o[]; };
void main() {
  uint i = gl_GlobalInvocationID.x;
  o[i] = uvec4(gl_SubgroupSize, subgroupAdd(1u), gl_SubgroupInvocationID, 0u);
}
