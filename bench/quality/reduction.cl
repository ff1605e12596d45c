// OpenCL C equivalent of samples/reduction.loom (tree sum in LDS, one atomic per workgroup).
__kernel void sum_f32(long n, __global const float* restrict in, __global float* restrict out) {
  __local float tree[256];
  uint lane = __builtin_amdgcn_workitem_id_x();
  size_t i = __builtin_amdgcn_workgroup_id_x() * 256 + lane;
  tree[lane] = in[i];
  __builtin_amdgcn_s_barrier();
  for (uint k = 0; k < 8; ++k) {
    uint stride = 128u >> k;
    if (lane < stride) tree[lane] += tree[lane + stride];
    __builtin_amdgcn_s_barrier();
  }
  if (lane == 0) __opencl_atomic_fetch_add((volatile __global atomic_float*)out, tree[0],
                                           memory_order_relaxed, memory_scope_device);
}
