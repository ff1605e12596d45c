// OpenCL C equivalent of samples/saxpy.loom, for bench/codegen_bench.py.
__kernel void saxpy(long n, float alpha, __global const float* restrict x, __global float* restrict y) {
  size_t i = get_global_id(0);
  if (i < (size_t)n) {
    y[i] = fma(alpha, x[i], y[i]);
  }
}
