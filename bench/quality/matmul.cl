// OpenCL C equivalent of samples/matmul.loom (16x16 tiles in LDS, guarded edges).
__kernel void matmul_f32(long m, long n, long k, __global const float* restrict a,
                         __global const float* restrict b, __global float* restrict c) {
  __local float ta[16][16];
  __local float tb[16][16];
  uint tx = __builtin_amdgcn_workitem_id_x(), ty = __builtin_amdgcn_workitem_id_y();
  long col = __builtin_amdgcn_workgroup_id_x() * 16 + tx;
  long row = __builtin_amdgcn_workgroup_id_y() * 16 + ty;
  float acc = 0.0f;
  for (long s = 0; s < (k + 15) / 16; ++s) {
    long ak = s * 16 + tx, bk = s * 16 + ty;
    ta[ty][tx] = (row < m && ak < k) ? a[row * k + ak] : 0.0f;
    tb[ty][tx] = (bk < k && col < n) ? b[bk * n + col] : 0.0f;
    __builtin_amdgcn_s_barrier();
    for (int j = 0; j < 16; ++j) acc = fma(ta[ty][j], tb[j][tx], acc);
    __builtin_amdgcn_s_barrier();
  }
  if (row < m && col < n) c[row * n + col] = acc;
}
