// OpenCL C equivalent of bench/quality/transpose.loom (32x8 tile through LDS).
__kernel void transpose_f32(long rows, long cols, __global const float* restrict in, __global float* restrict out) {
  __local float tile[32][33];
  uint tx = __builtin_amdgcn_workitem_id_x(), ty = __builtin_amdgcn_workitem_id_y();
  long x = __builtin_amdgcn_workgroup_id_x() * 32 + tx;
  long y0 = __builtin_amdgcn_workgroup_id_y() * 32;
  for (int j = 0; j < 32; j += 8)
    if (x < cols && y0 + ty + j < rows) tile[ty + j][tx] = in[(y0 + ty + j) * cols + x];
  __builtin_amdgcn_s_barrier();
  long ox = y0 + tx;
  long oy0 = __builtin_amdgcn_workgroup_id_x() * 32;
  for (int j = 0; j < 32; j += 8)
    if (ox < rows && oy0 + ty + j < cols) out[(oy0 + ty + j) * rows + ox] = tile[tx][ty + j];
}
