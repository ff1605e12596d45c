// One of two entry points linked into entries.spv: v[i] += 1 (entry add_one).
#version 450
layout(local_size_x = 8) in;
layout(set = 0, binding = 0) buffer V { int v[]; };
void main() { v[gl_GlobalInvocationID.x] += 1; }
