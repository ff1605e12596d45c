// The other entry point of entries.spv: v[i] *= k, k an i32 push constant (entry times_k).
#version 450
layout(local_size_x = 8) in;
layout(set = 0, binding = 0) buffer V { int v[]; };
layout(push_constant) uniform Args { int k; } args;
void main() { v[gl_GlobalInvocationID.x] *= args.k; }
