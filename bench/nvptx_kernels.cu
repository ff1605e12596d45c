// The samples/{saxpy,reduction,matmul}.loom kernels in CUDA C++, written the
// same way (same workgroup sizes, 32-bit indices, same shared-memory tree and
// tiles), compiled by bench/nvptx_bench.py with
//   clang-19 --cuda-device-only -nocudalib -nocudainc --cuda-gpu-arch=sm_90 -O3 -S
// No CUDA headers: the builtins below are clang's own.
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __launch_bounds__(n) __attribute__((launch_bounds(n)))


extern "C" __global__ __launch_bounds__(128) void saxpy(unsigned n, float alpha, const float *__restrict__ x,
                                                        float *__restrict__ y) {
  unsigned i = __nvvm_read_ptx_sreg_ctaid_x() * 128u + __nvvm_read_ptx_sreg_tid_x();
  if (i < n) y[i] = __builtin_fmaf(alpha, x[i], y[i]);
}

extern "C" __global__ __launch_bounds__(256) void sum_f32(unsigned n, const float *in, float *out) {
  __shared__ float tree[256];
  unsigned lane = __nvvm_read_ptx_sreg_tid_x();
  unsigned i = __nvvm_read_ptx_sreg_ctaid_x() * 256u + lane;
  tree[lane] = in[i];
  __syncthreads();
  for (unsigned k = 0; k < 8; ++k) {
    unsigned stride = 128u >> k;
    if (lane < stride) tree[lane] = tree[lane] + tree[lane + stride];
    __syncthreads();
  }
  if (lane == 0) __nvvm_atom_add_gen_f(out, tree[0]);
}

// The tiled matmul, its element offsets computed in `Offset`: 32-bit `unsigned`
// (wraps past 2^32 elements) or 64-bit, as Loom's `offset` type computes them
// (offset_bitwidth 64 on nvptx), which is what samples/matmul.loom does.
template <typename Offset>
__attribute__((device, always_inline)) static void matmul(unsigned m, unsigned n, unsigned k, const float *a,
                                                         const float *b, float *c) {
  __shared__ float ta[16][16];
  __shared__ float tb[16][16];
  unsigned tx = __nvvm_read_ptx_sreg_tid_x(), ty = __nvvm_read_ptx_sreg_tid_y();
  unsigned col = __nvvm_read_ptx_sreg_ctaid_x() * 16u + tx, row = __nvvm_read_ptx_sreg_ctaid_y() * 16u + ty;
  bool row_ok = row < m, col_ok = col < n;
  float sum = 0.0f;
  for (unsigned s = 0; s < (k + 15u) / 16u; ++s) {
    unsigned ak = s * 16u + tx, bk = s * 16u + ty;
    ta[ty][tx] = row_ok && ak < k ? a[(Offset)row * k + ak] : 0.0f;
    tb[ty][tx] = bk < k && col_ok ? b[(Offset)bk * n + col] : 0.0f;
    __syncthreads();
    for (unsigned j = 0; j < 16; ++j) sum = __builtin_fmaf(ta[ty][j], tb[j][tx], sum);
    __syncthreads();
  }
  if (row_ok && col_ok) c[(Offset)row * n + col] = sum;
}

extern "C" __global__ __launch_bounds__(256) void matmul_f32(unsigned m, unsigned n, unsigned k, const float *a,
                                                             const float *b, float *c) {
  matmul<unsigned>(m, n, k, a, b, c);
}

extern "C" __global__ __launch_bounds__(256) void matmul_f32_wide(unsigned m, unsigned n, unsigned k, const float *a,
                                                                  const float *b, float *c) {
  matmul<unsigned long long>(m, n, k, a, b, c);
}
