// Hand-written twin of samples/saxpy.loom under the device ABI v1:
// buffers x, y at set 0 bindings 0, 1; push constants n (index, 8-byte slot
// at 0, low 32 bits read) and alpha (f32 at 8). Entry point: saxpy.
#version 450
layout(local_size_x = 128) in;
layout(set = 0, binding = 0) buffer X { float x[]; };
layout(set = 0, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform Args { uint n; uint n_high; float alpha; } args;
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i < args.n) y[i] = fma(args.alpha, x[i], y[i]);
}
