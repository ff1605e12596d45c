// OpenCL C equivalent of samples/saxpy.loom, for bench/codegen_bench.py.
// -nogpulib leaves out the device library, so the work-item id comes from builtins.
__kernel void saxpy(long n, float alpha, __global const float* restrict x, __global float* restrict y) {
  size_t i = __builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() + __builtin_amdgcn_workitem_id_x();
  if (i < (size_t)n) {
    y[i] = fma(alpha, x[i], y[i]);
  }
}
