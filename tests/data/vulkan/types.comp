// Element types that need device features: i64, f64 arithmetic; i8, i16 and
// f16 storage. Push constants: k (i64 at 0), h (f16 in the low bits at 8).
#version 450
#extension GL_EXT_shader_explicit_arithmetic_types : require
layout(local_size_x = 4) in;
layout(set = 0, binding = 0) buffer A { int64_t a[]; };
layout(set = 0, binding = 1) buffer B { double b[]; };
layout(set = 0, binding = 2) buffer C { int8_t c[]; };
layout(set = 0, binding = 3) buffer D { int16_t d[]; };
layout(set = 0, binding = 4) buffer E { float16_t e[]; };
layout(push_constant) uniform Args { int64_t k; uint h; } args;
void main() {
  uint i = gl_GlobalInvocationID.x;
  a[i] = a[i] * 3 + args.k;
  b[i] = b[i] * 0.5lf;
  c[i] = int8_t(c[i] + int8_t(1));
  d[i] = int16_t(d[i] * int16_t(-2));
  e[i] = e[i] * unpackFloat2x16(args.h).x;
}
