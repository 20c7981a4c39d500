// tensor_core.cuh: warp-level tensor-core and async-copy primitives for kernels that want them (it is not part
// of the prelude: a kernel family prepends it after prelude.cuh). Self-contained like the prelude.
//
// Fragment layouts are PTX's for mma.sync.aligned.m16n8k16.row.col with .bf16/.f16 inputs and .f32
// accumulators (lane = threadIdx % 32, g = lane / 4, t = lane % 4; a 32-bit register holds two 16-bit values,
// the lower column (or k) index in the low half):
//   A (16x16, row-major): a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..2t+1], a[2] = A[g][2t+8..], a[3] = A[g+8][2t+8..]
//   B (16x8, "col"):      b[0] = B[2t..2t+1][g],  b[1] = B[2t+8..2t+9][g]
//   C/D (16x8, float):    d[0], d[1] = D[g][2t], D[g][2t+1];  d[2], d[3] = D[g+8][2t], D[g+8][2t+1]
// ldmatrix .x4 loads four 8x8 16-bit matrices: lane i gives the shared-memory address of row i % 8 of
// matrix i / 8 (16 contiguous bytes); register j of lane l then holds matrix j's row l / 4, columns
// 2 (l % 4) and 2 (l % 4) + 1. With .trans each matrix is transposed first. .x2 uses lanes 0-15's addresses.
//
// A host build (no __CUDACC__: the CPU emulation in the tests) declares emu_* functions that the emulation
// shim defines, with the same semantics.

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
__device__ __forceinline__ unsigned smem_address(const void* p) {
    unsigned address;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(address) : "l"(p));
    return address;
}
extern __shared__ __align__(16) unsigned char oarlock_dynamic_smem[];
// the block's dynamic shared memory (the launch's shared_mem bytes; above 48 KB the launcher raises the limit)
__device__ __forceinline__ unsigned char* dynamic_smem() { return oarlock_dynamic_smem; }
#else
void emu_mma_16816(float* d, const unsigned* a, const unsigned* b, bool bf16);
void emu_ldmatrix(unsigned* r, const void* row, int count, bool trans);
unsigned char* emu_dynamic_smem();
inline unsigned char* dynamic_smem() { return emu_dynamic_smem(); }
#endif

// d += A B for one 16x16x8 step; T is bf16_t or half_t (the prelude's storage types).
template <typename T> __device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4],
                                                                const unsigned (&b)[2]);
template <> __device__ __forceinline__ void mma_16816<bf16_t>(float (&d)[4], const unsigned (&a)[4],
                                                              const unsigned (&b)[2]) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    emu_mma_16816(d, a, b, true);
#endif
}
template <> __device__ __forceinline__ void mma_16816<half_t>(float (&d)[4], const unsigned (&a)[4],
                                                              const unsigned (&b)[2]) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    emu_mma_16816(d, a, b, false);
#endif
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* row) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_address(row)));
#else
    emu_ldmatrix(r, row, 4, false);
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* row) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_address(row)));
#else
    emu_ldmatrix(r, row, 4, true);
#endif
}
__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], const void* row) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(smem_address(row)));
#else
    emu_ldmatrix(r, row, 2, false);
#endif
}
__device__ __forceinline__ void ldmatrix_x2_trans(unsigned (&r)[2], const void* row) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(smem_address(row)));
#else
    emu_ldmatrix(r, row, 2, true);
#endif
}

// 16 bytes global -> shared without passing through registers; zero-fills the 16 bytes when !valid (the
// source address must still be a valid pointer then: pass the tensor's base). Completion: commit, then wait.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"(smem_address(smem)), "l"(gmem), "r"(valid ? 16 : 0));
#else
    if (valid) __builtin_memcpy(smem, gmem, 16); else __builtin_memset(smem, 0, 16);
#endif
}
// 4 bytes global -> shared the same way (cached at all levels: for small, reused data such as mask vectors)
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, bool valid) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
                 :: "r"(smem_address(smem)), "l"(gmem), "r"(valid ? 4 : 0));
#else
    if (valid) __builtin_memcpy(smem, gmem, 4); else __builtin_memset(smem, 0, 4);
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
    asm volatile("cp.async.commit_group;");
#endif
}
// wait until at most N committed groups of this thread are still in flight (then __syncthreads to share them)
template <int N> __device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");   // later plain reads must stay after it
#endif
}

// two floats -> one register of two T (round to nearest even), lo in the low half: one cvt.rn.{bf16x2,f16x2}.f32
// instruction on the GPU (kernels pack every P and dS tile this way), the prelude's from_f on the host
template <typename T> __device__ __forceinline__ unsigned pack2(float lo, float hi) {
    const T l = from_f<T>(lo), h = from_f<T>(hi);
    return (unsigned)l.bits | ((unsigned)h.bits << 16);
}
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
template <> __device__ __forceinline__ unsigned pack2<bf16_t>(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
template <> __device__ __forceinline__ unsigned pack2<half_t>(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
#endif
