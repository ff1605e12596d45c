// OpenCL C equivalent of bench/quality/stencil.loom (3-point weighted stencil, clamped edges).
__kernel void stencil_f32(long n, __global const float* restrict in, __global float* restrict out) {
  long i = __builtin_amdgcn_workgroup_id_x() * 256 + __builtin_amdgcn_workitem_id_x();
  if (i < n) {
    long l = i > 0 ? i - 1 : 0, r = i + 1 < n ? i + 1 : n - 1;
    out[i] = fma(0.25f, in[l], fma(0.5f, in[i], 0.25f * in[r]));
  }
}
