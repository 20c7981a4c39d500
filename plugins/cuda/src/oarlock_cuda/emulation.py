"""run CUDA kernel sources on the CPU, for tests without a GPU.

The .cu sources are compiled for the host with g++ (C++20) behind a small shim (`SHIM`) and called through
ctypes on numpy arrays:

- the CUDA threads of a block are fibers on the launching OS thread: each has its own stack (256 KiB of
  address space, mapped once and reused, with a guard page below it; the kernels use a few KiB) and runs
  until it waits at a barrier or ends, then a scheduler switches to the next (a hand-written switch of the
  callee-saved registers on x86-64, ucontext elsewhere). `threadIdx`, the warp and lane follow the running
  fiber. A barrier per block (__syncthreads) and per warp (shuffles, __syncwarp and the warp-collective
  tensor-core primitives of kernels/tensor_core.cuh: mma.sync m16n8k16, ldmatrix, with PTX's fragment
  layouts; the products of 16-bit inputs are exact in float32 and accumulate in float32 in k order, the
  model of the hardware's unspecified order) is "arrive, then yield until its phase changes";
- the scheduler always runs the first runnable fiber in thread order, or in its reverse: the order flips each
  time the block passes a __syncthreads, and block b starts in the reverse order when b is odd. So the first
  (or the last) warp runs ahead of the others up to the block's next barrier, and a missing __syncthreads
  makes a thread read shared memory that another has not written yet, or that a warp running ahead has
  already overwritten, in one order or the other: deterministically, on every run;
- the blocks of a 1-, 2- or 3-D grid run one after another, so `__shared__` can be `static`; the dynamic
  shared memory (`dynamic_smem()`, the launch's `shared_bytes`) is 16-byte aligned (and deliberately not
  32-byte aligned: CUDA promises 16) and filled with 0xFF bytes at the start of every block, so a kernel that
  reads shared memory it did not write fails its tests;
- each launch checks its arguments against the kernel's C++ signature (what a cupy launch cannot) and its
  configuration against sm_90's limits; an ldmatrix row address that is not 16-byte aligned fails the launch;
  so does a warp-collective call (shuffle, mma, ldmatrix, __syncwarp) or __syncthreads that not every thread
  of the warp / block reaches (undefined on the GPU, a hang there): when no fiber can run before all are
  done, the launch ends with that failure (the rest of its grid does not run).

Limits: global atomics exist only where the shim defines them (atomic because a fiber is never switched
out between a read and a write); cp.async copies at once (tensor_core.cuh's host branch), so a missing
wait / __syncthreads between an async copy and its readers shows only where another thread's copy had not
been issued yet; static `__shared__` memory keeps its contents from one block to the next; a kernel that
spins on a flag another thread sets never ends (a fiber runs until it waits at a barrier).

`HostRuntime(build_dir, source_of, names_of)` builds each kernel family once (cached by content in
build_dir) and has the launch interface of oarlock_cuda.fused.RUNTIME plus `shared_bytes`:

    rt = HostRuntime(tmp_path, lambda family: SOURCE, lambda family: ["my_kernel<bf16_t>"])
    fn = rt.function("mine", "my_kernel<bf16_t>", 0)
    rt.launch(fn, 0, (blocks,), (128,), (x, out, np.int32(n)), shared_bytes=64 * 1024)
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

SHIM = r"""
// A host stand-in for the CUDA features the kernels use: the CUDA threads of a block are fibers (user-level
// contexts, one stack each) on the launching OS thread, switched by the scheduler below; a barrier per block
// (__syncthreads) and per warp (shuffles, warp-collective tensor-core primitives) is "arrive, then yield until
// its phase changes"; the blocks run one after another (so __shared__ can be static).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>
#include <math.h>
#include <sys/mman.h>
#include <unistd.h>
#if !defined(__x86_64__) || defined(EMU_UCONTEXT)
#define EMU_UCONTEXT 1
#include <ucontext.h>
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

struct dim3 { unsigned x = 1, y = 1, z = 1; };
static dim3 gridDim, blockDim;
static dim3 threadIdx, blockIdx;          // the running fiber's: the scheduler sets them at every switch
constexpr int warpSize = 32;

struct EmuBarrier {                       // `expected` fibers arrive, then the phase advances
    unsigned expected = 0, count = 0, phase = 0;
};
struct Warp {
    EmuBarrier bar;
    unsigned long long slot[32];    // shuffles: each lane's value
    unsigned frag[32][6];           // mma: each lane's a[4], b[2]
    const void* rows[32];           // ldmatrix: each lane's row address
};
struct EmuFiber {                         // one CUDA thread of the block
    void* sp;                             // its saved stack pointer while it is switched out
#ifdef EMU_UCONTEXT
    ucontext_t context;
#endif
    const EmuBarrier* waits;              // the barrier it waits at (null: runnable) ...
    unsigned phase;                       // ... until its phase differs from this
    bool done;
    unsigned thread;                      // its linear index in the block
    dim3 index;
    Warp* warp;
    int lane;
};
static Warp* emu_warp;                    // the running fiber's warp, lane, block barrier
static int emu_lane;
static EmuBarrier* emu_block;
static EmuFiber* emu_fiber;               // the running fiber
static unsigned char* emu_smem;                         // the block's dynamic shared memory
static std::atomic<const char*> emu_error{nullptr};     // the first failure of the launch (a string literal)
static void (*emu_body)();                // runs the launch's kernel (with its arguments) on the running fiber

inline void emu_fail(const char* what) {
    const char* none = nullptr;
    emu_error.compare_exchange_strong(none, what);
}

// -- the context switch: the scheduler (the launching OS thread) <-> one fiber --------------------------------
#ifndef EMU_UCONTEXT
// x86-64 System V: save the callee-saved registers on the old stack, switch stacks, restore them from the new
extern "C" __attribute__((visibility("hidden"))) void emu_switch(void** save, void* load);
asm(R"(
    .text
    .p2align 4
    .globl emu_switch
    .hidden emu_switch
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch
)");
static void* emu_scheduler_sp;
inline void emu_yield() { emu_switch(&emu_fiber->sp, emu_scheduler_sp); }
inline void emu_resume(EmuFiber& f) { emu_switch(&emu_scheduler_sp, f.sp); }
#else
static ucontext_t emu_scheduler_context;
inline void emu_yield() { swapcontext(&emu_fiber->context, &emu_scheduler_context); }
inline void emu_resume(EmuFiber& f) { swapcontext(&emu_scheduler_context, &f.context); }
#endif

[[noreturn]] static void emu_fiber_main() {
    emu_body();
    emu_fiber->done = true;
    emu_yield();
    __builtin_trap();                     // a finished fiber is never resumed
}

constexpr std::size_t EMU_STACK = 256 * 1024;   // each fiber's stack (touched pages only), a guard page below
static unsigned char* emu_stacks;               // kept from launch to launch
static std::size_t emu_stack_count, emu_page;

static bool emu_reserve_stacks(unsigned count) {
    if (count <= emu_stack_count) return true;
    if (!emu_page) emu_page = (std::size_t)sysconf(_SC_PAGESIZE);
    if (emu_stacks) munmap(emu_stacks, emu_stack_count * (EMU_STACK + emu_page));
    emu_stacks = nullptr;
    emu_stack_count = 0;
    void* at = mmap(nullptr, count * (EMU_STACK + emu_page), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (at == MAP_FAILED) return false;
    emu_stacks = static_cast<unsigned char*>(at);
    emu_stack_count = count;
    for (unsigned i = 0; i < count; ++i) mprotect(emu_stacks + i * (EMU_STACK + emu_page), emu_page, PROT_NONE);
    return true;
}

// fiber i starts emu_fiber_main on its own stack at its next resume
static void emu_start(EmuFiber& f, unsigned i) {
    unsigned char* base = emu_stacks + i * (EMU_STACK + emu_page) + emu_page;
#ifndef EMU_UCONTEXT
    void** top = reinterpret_cast<void**>(base + EMU_STACK);     // 16-byte aligned
    top[-1] = nullptr;                                            // emu_fiber_main's (absent) return address
    top[-2] = reinterpret_cast<void*>(&emu_fiber_main);           // emu_switch's ret goes there
    for (int r = 3; r <= 8; ++r) top[-r] = nullptr;               // rbp rbx r12-r15
    f.sp = top - 8;
#else
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = base;
    f.context.uc_stack.ss_size = EMU_STACK;
    f.context.uc_link = nullptr;
    makecontext(&f.context, emu_fiber_main, 0);
#endif
}

// The scheduler runs the runnable fiber first in its order: thread order, or the reverse; the order flips
// whenever the block's threads pass a __syncthreads. So the first warp (or the last) runs ahead of the others
// as far as the block's next barrier, and a fiber runs until it waits or ends: a missing __syncthreads makes
// a thread read shared memory another has not written yet (or has overwritten already), whichever of the two
// comes first in thread order.
static bool emu_reverse;                  // the order is the reverse of thread order
static unsigned emu_threads;              // the block's
static unsigned emu_restart;              // a completed barrier: the first position of the fibers it released

inline unsigned emu_position(unsigned thread) { return emu_reverse ? emu_threads - 1 - thread : thread; }

inline void emu_arrive_and_wait(EmuBarrier& b) {
    if (++b.count == b.expected) {        // the last to arrive goes on at once; the others can run again
        b.count = 0;
        ++b.phase;
        if (&b == emu_block) {
            emu_reverse = !emu_reverse;
            emu_restart = 0;
        } else {
            const unsigned first = emu_fiber->thread / 32 * 32;      // the warp's
            emu_restart = std::min(emu_restart, std::min(emu_position(first), emu_position(first + 31)));
        }
        return;
    }
    emu_fiber->waits = &b;
    emu_fiber->phase = b.phase;
    emu_yield();
}

// runs the block's fibers until all are done, starting in thread order or its reverse; when no fiber can run
// before all are done, a barrier waits for a thread that will never come (a hang on the GPU): its failure
static const char* emu_run_block(EmuFiber* fibers, unsigned n, bool reverse) {
    emu_reverse = reverse;
    emu_threads = n;
    unsigned live = n;
    for (unsigned p = 0;;) {
        EmuFiber* f = nullptr;
        for (; p < n; ++p) {
            EmuFiber& g = fibers[emu_position(p)];
            if (!g.done && (g.waits == nullptr || g.waits->phase != g.phase)) {
                f = &g;
                break;
            }
        }
        if (f == nullptr) break;
        f->waits = nullptr;
        emu_fiber = f;
        threadIdx = f->index;
        emu_warp = f->warp;
        emu_lane = f->lane;
        emu_restart = n;
        emu_resume(*f);
        live -= f->done;
        p = std::min(emu_restart, emu_position(f->thread) + 1);
    }
    if (live == 0) return nullptr;
    for (unsigned t = 0; t < n; ++t)
        if (!fibers[t].done && fibers[t].waits == emu_block)
            return "__syncthreads that not every thread of the block reaches (a hang on the GPU)";
    return "a warp-collective call (shuffle, __syncwarp, mma, ldmatrix) that not every lane of the warp reaches "
           "(a hang on the GPU)";
}

inline void __syncthreads() { emu_arrive_and_wait(*emu_block); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu_arrive_and_wait(emu_warp->bar); }

// every lane deposits its value, then reads lane `source(lane)`'s (its own where that is out of its segment)
template <typename V, typename F>
inline V emu_shuffle(V v, F source) {
    static_assert(sizeof(V) <= 8, "a shuffle moves at most 8 bytes");
    std::memcpy(&emu_warp->slot[emu_lane], &v, sizeof(V));
    emu_arrive_and_wait(emu_warp->bar);
    V out;
    std::memcpy(&out, &emu_warp->slot[source(emu_lane)], sizeof(V));
    emu_arrive_and_wait(emu_warp->bar);
    return out;
}
template <typename V>
inline V __shfl_xor_sync(unsigned, V v, int offset, int width = 32) {
    return emu_shuffle(v, [&](int l) { int s = l ^ offset; return (s & -width) == (l & -width) ? s : l; });
}
template <typename V>
inline V __shfl_sync(unsigned, V v, int src, int width = 32) {
    return emu_shuffle(v, [&](int l) { return (l & -width) + (src & (width - 1)); });
}
template <typename V>
inline V __shfl_down_sync(unsigned, V v, unsigned delta, int width = 32) {
    return emu_shuffle(v, [&](int l) { int s = l + (int)delta; return (s & -width) == (l & -width) ? s : l; });
}
template <typename V>
inline V __shfl_up_sync(unsigned, V v, unsigned delta, int width = 32) {
    return emu_shuffle(v, [&](int l) { int s = l - (int)delta; return s >= (l & -width) ? s : l; });
}

inline float __int_as_float(int v) { float f; std::memcpy(&f, &v, 4); return f; }
inline float __uint_as_float(unsigned v) { float f; std::memcpy(&f, &v, 4); return f; }
inline unsigned __float_as_uint(float v) { unsigned u; std::memcpy(&u, &v, 4); return u; }
inline int __float_as_int(float v) { int u; std::memcpy(&u, &v, 4); return u; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
using std::max;
using std::min;

struct __align__(8) float2 { float x, y; };
struct __align__(16) float4 { float x, y, z, w; };
struct __align__(8) int2 { int x, y; };
struct __align__(16) int4 { int x, y, z, w; };
struct __align__(8) uint2 { unsigned x, y; };
struct __align__(16) uint4 { unsigned x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

// atomic: a fiber runs until it waits at a barrier, so nothing else runs between the read and the write
inline unsigned long long atomicMin(unsigned long long* address, unsigned long long value) {
    unsigned long long old = *address;
    if (value < old) *address = value;
    return old;
}

// -- tensor_core.cuh's host declarations, warp-collective like the PTX instructions -----------------------

inline float emu_16bit(unsigned reg, int half, bool bf16) {
    const unsigned short bits = (unsigned short)(reg >> (16 * half));
    if (bf16) return __uint_as_float((unsigned)bits << 16);
    _Float16 h;
    std::memcpy(&h, &bits, 2);
    return (float)h;
}

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: d += A B (A 16x16 in a[4], B 16x8 in b[2], PTX layouts)
void emu_mma_16816(float* d, const unsigned* a, const unsigned* b, bool bf16) {
    Warp& w = *emu_warp;
    const int lane = emu_lane, g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) w.frag[lane][i] = a[i];
    w.frag[lane][4] = b[0];
    w.frag[lane][5] = b[1];
    emu_arrive_and_wait(w.bar);
    for (int i = 0; i < 4; ++i) {
        const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
        float acc = d[i];
        for (int k = 0; k < 16; ++k) {
            // A[row][k]: lane 4 (row % 8) + (k % 8) / 2, register (row >= 8) + 2 (k >= 8), half k % 2;
            // B[k][col]: lane 4 col + (k % 8) / 2, register 4 + (k >= 8), half k % 2. The product is exact.
            const float x = emu_16bit(w.frag[4 * (row % 8) + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)], k % 2, bf16);
            const float y = emu_16bit(w.frag[4 * col + (k % 8) / 2][4 + (k >= 8)], k % 2, bf16);
            acc += x * y;
        }
        d[i] = acc;
    }
    emu_arrive_and_wait(w.bar);   // the slots are free again
}

// ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16: lane i gives row i % 8 of matrix i / 8
void emu_ldmatrix(unsigned* r, const void* row, int count, bool trans) {
    Warp& w = *emu_warp;
    const int lane = emu_lane, g = lane / 4, t = lane % 4;
    if (lane < 8 * count && reinterpret_cast<std::uintptr_t>(row) % 16 != 0)
        emu_fail("ldmatrix: a row address is not 16-byte aligned");
    w.rows[lane] = row;
    emu_arrive_and_wait(w.bar);
    for (int j = 0; j < count; ++j) {
        unsigned short lo, hi;
        if (!trans) {           // row g, columns 2t, 2t + 1
            std::memcpy(&lo, (const unsigned char*)w.rows[8 * j + g] + 2 * (2 * t), 2);
            std::memcpy(&hi, (const unsigned char*)w.rows[8 * j + g] + 2 * (2 * t + 1), 2);
        } else {                // the transpose's row g: column g of rows 2t, 2t + 1
            std::memcpy(&lo, (const unsigned char*)w.rows[8 * j + 2 * t] + 2 * g, 2);
            std::memcpy(&hi, (const unsigned char*)w.rows[8 * j + 2 * t + 1] + 2 * g, 2);
        }
        r[j] = (unsigned)lo | ((unsigned)hi << 16);
    }
    emu_arrive_and_wait(w.bar);
}

unsigned char* emu_dynamic_smem() { return emu_smem; }
"""

LAUNCHER = r"""
struct half_t;
struct bf16_t;

template <typename T> constexpr char emu_code() {
    if constexpr (std::is_pointer_v<T>) {
        using P = std::remove_cv_t<std::remove_pointer_t<T>>;
        if constexpr (std::is_same_v<P, float>) return 'F';
        else if constexpr (std::is_same_v<P, double>) return 'D';
        else if constexpr (std::is_same_v<P, half_t>) return 'H';
        else if constexpr (std::is_same_v<P, bf16_t>) return 'B';
        else if constexpr (std::is_same_v<P, long long>) return 'L';
        else if constexpr (std::is_same_v<P, int>) return 'I';
        else if constexpr (std::is_same_v<P, unsigned>) return 'W';
        else if constexpr (std::is_same_v<P, unsigned long long>) return 'U';
        else if constexpr (std::is_same_v<P, unsigned short>) return 'S';
        else if constexpr (std::is_same_v<P, unsigned char>) return 'C';
        else return '?';
    } else if constexpr (std::is_same_v<T, long long>) return 'q';
    else if constexpr (std::is_same_v<T, unsigned long long>) return 'u';
    else if constexpr (std::is_same_v<T, int>) return 'i';
    else if constexpr (std::is_same_v<T, unsigned>) return 'w';
    else if constexpr (std::is_same_v<T, float>) return 'f';
    else if constexpr (std::is_same_v<T, double>) return 'd';
    else return '?';
}

template <typename... A>
const char* emu_signature(void (*)(A...)) {
    static const char text[] = {emu_code<A>()..., 0};
    return text;
}

static void (*emu_kernel)();    // the launch's kernel (its real type is the launch's) and arguments
static void** emu_params;

template <typename... A, std::size_t... I>
void emu_invoke(void (*kernel)(A...), void** params, std::index_sequence<I...>) {
    kernel(*static_cast<A*>(params[I])...);
}
template <typename... A>
void emu_body_of() {
    emu_invoke(reinterpret_cast<void (*)(A...)>(emu_kernel), emu_params, std::index_sequence_for<A...>{});
}

// runs the grid; returns the first failure (null when none)
template <typename... A>
const char* emu_launch(void (*kernel)(A...), const unsigned* grid, const unsigned* block,
                       unsigned long long shared, void** params) {
    gridDim = {grid[0], grid[1], grid[2]};
    blockDim = {block[0], block[1], block[2]};
    const unsigned bx = block[0], by = block[1], threads = block[0] * block[1] * block[2];
    if (!emu_reserve_stacks(threads)) return "could not map the stacks of the block's fibers";
    std::vector<unsigned char> storage(shared + 64);    // 16-byte aligned, not 32-byte aligned
    const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(storage.data());
    emu_smem = storage.data() + (48 - at % 32) % 32;
    emu_error = nullptr;
    emu_kernel = reinterpret_cast<void (*)()>(kernel);
    emu_params = params;
    emu_body = &emu_body_of<A...>;
    EmuBarrier sync;
    emu_block = &sync;
    std::vector<Warp> warps((threads + 31) / 32);
    std::vector<EmuFiber> fibers(threads);
    const char* hang = nullptr;     // a hang ends the launch (its fibers are abandoned)
    unsigned linear = 0;
    for (unsigned z = 0; z < grid[2] && !hang; ++z) {
        for (unsigned y = 0; y < grid[1] && !hang; ++y) {
            for (unsigned x = 0; x < grid[0] && !hang; ++x, ++linear) {
                blockIdx = {x, y, z};
                std::memset(emu_smem, 0xFF, shared);       // a block that reads what it did not write sees 0xFF
                sync = EmuBarrier{threads, 0, 0};
                for (auto& w : warps) w.bar = EmuBarrier{32, 0, 0};
                for (unsigned t = 0; t < threads; ++t) {
                    EmuFiber& f = fibers[t];
                    f.waits = nullptr;
                    f.phase = 0;
                    f.done = false;
                    f.thread = t;
                    f.index = {t % bx, t / bx % by, t / (bx * by)};
                    f.warp = &warps[t / 32];
                    f.lane = (int)(t % 32);
                    emu_start(f, t);
                }
                hang = emu_run_block(fibers.data(), threads, linear % 2);
            }
        }
    }
    if (hang) emu_fail(hang);
    emu_smem = nullptr;
    emu_fiber = nullptr;
    emu_block = nullptr;
    emu_warp = nullptr;
    return emu_error.exchange(nullptr);
}
"""

ARG_CODES = {np.float32: "f", np.float64: "d", np.int32: "i", np.uint32: "w", np.int64: "q", np.uint64: "u"}
POINTER_CODES = {"float32": "F", "float64": "D", "float16": "H", "bfloat16": "B", "int64": "L", "int32": "I",
                 "uint32": "W", "uint64": "U", "uint16": "S", "uint8": "C"}
CTYPE_OF = {"f": ctypes.c_float, "d": ctypes.c_double, "i": ctypes.c_int, "w": ctypes.c_uint,
            "q": ctypes.c_longlong, "u": ctypes.c_ulonglong}
MAX_SHARED_BYTES = 227 * 1024          # sm_90's dynamic shared memory per block (with the opt-in attribute)
# -O1: the emulated kernels run about as fast as at -O2, which compiles a family 1.3 to 1.6 times slower
FLAGS = ("-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-Wno-attributes")


def gxx() -> str | None:
    """The g++ that builds the host libraries, or None where there is none."""
    return shutil.which("g++")


class _Function(NamedTuple):
    launch: object          # the library's emu_launch_<i>
    signature: str          # the kernel's argument codes (LAUNCHER's emu_code)
    name: str


class HostRuntime:
    """fused.RUNTIME's interface for numpy arrays, for any kernel families: each family built once as a host
    shared library (cached by content in build_dir); `source_of(family)` gives its full CUDA source,
    `names_of(family)` the kernel name expressions to export (e.g. "fm_fwd<bf16_t, 64>")."""

    def __init__(self, build_dir: Path | str, source_of: Callable[[str], str],
                 names_of: Callable[[str], list[str]]):
        self.build_dir = Path(build_dir)
        self.source_of, self.names_of = source_of, names_of
        self.libs: dict = {}            # family -> (ctypes.CDLL, name expressions)
        self._lock = threading.Lock()   # a library's grid state is global: one launch at a time

    def _library(self, family):
        built = self.libs.get(family)
        if built is not None:
            return built
        compiler = gxx()
        if compiler is None:
            raise RuntimeError("g++ is not installed here (the host emulation of the CUDA kernels needs it)")
        names = list(self.names_of(family))
        exports = "\n".join(
            f'extern "C" const char* emu_launch_{i}(const unsigned* g, const unsigned* b, unsigned long long s, '
            f"void** p) {{ return emu_launch(&{name}, g, b, s, p); }}\n"
            f'extern "C" const char* emu_signature_{i}() {{ return emu_signature(&{name}); }}'
            for i, name in enumerate(names))
        code = SHIM + self.source_of(family) + LAUNCHER + exports
        digest = hashlib.sha256("\0".join((code, compiler, *FLAGS)).encode()).hexdigest()[:16]
        stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in family)
        self.build_dir.mkdir(parents=True, exist_ok=True)
        so = self.build_dir / f"{stem}-{digest}.so"
        if not so.exists():
            src = self.build_dir / f"{stem}-{digest}.cpp"
            src.write_text(code)
            fd, partial = tempfile.mkstemp(suffix=".so", dir=self.build_dir)   # concurrent builds: rename at the end
            os.close(fd)
            try:
                done = subprocess.run([compiler, *FLAGS, "-o", partial, str(src)], capture_output=True, text=True,
                                      timeout=600)
                if done.returncode:
                    raise RuntimeError(f"host build of kernel family {family!r} failed ({src}):\n"
                                       f"{done.stderr[-4000:]}")
                os.replace(partial, so)
            finally:
                if os.path.exists(partial):
                    os.unlink(partial)
        built = self.libs[family] = (ctypes.CDLL(str(so)), names)
        return built

    def function(self, family: str, name: str, device: int):
        lib, names = self._library(family)
        if name not in names:
            raise KeyError(f"{name!r} is not a name expression of kernel family {family!r} ({names})")
        i = names.index(name)
        signature = getattr(lib, f"emu_signature_{i}")
        signature.restype = ctypes.c_char_p
        launch = getattr(lib, f"emu_launch_{i}")
        launch.restype = ctypes.c_char_p
        return _Function(launch, signature().decode(), name)

    @staticmethod
    def device_of(array) -> int:
        return 0

    def launch(self, fn, device, grid, block, args, shared_bytes=0):
        launch, signature, name = fn
        if len(args) != len(signature):
            raise TypeError(f"{name}: {len(args)} arguments for {len(signature)} parameters ({signature})")
        values = []
        for k, (code, arg) in enumerate(zip(signature, args)):
            if code == "?":
                raise TypeError(f"{name}: argument {k} has a C++ type the emulation does not know ({signature})")
            if code.isupper():
                if not isinstance(arg, np.ndarray):
                    raise TypeError(f"{name}: argument {k} must be an array, got {type(arg)}")
                if POINTER_CODES.get(arg.dtype.name) != code:
                    raise TypeError(f"{name}: argument {k} has dtype {arg.dtype}, the kernel takes {code}")
                values.append(ctypes.c_void_p(arg.ctypes.data))
            else:
                if ARG_CODES.get(type(arg)) != code:
                    raise TypeError(f"{name}: argument {k} is {type(arg).__name__}, the kernel takes {code}")
                values.append(CTYPE_OF[code](arg))
        params = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
        grid, block = tuple(int(v) for v in grid), tuple(int(v) for v in block)
        if not 1 <= len(grid) <= 3 or not 1 <= len(block) <= 3:
            raise ValueError(f"{name}: grid {grid} and block {block} need 1 to 3 dimensions")
        grid, block = grid + (1,) * (3 - len(grid)), block + (1,) * (3 - len(block))
        threads = block[0] * block[1] * block[2]
        if min(block) < 1 or threads > 1024 or threads % 32 or block[2] > 64:
            raise ValueError(f"{name}: block {block} (the emulation runs whole warps: a multiple of 32 threads, "
                             f"at most 1024, z at most 64)")
        if min(grid) < 1 or grid[0] >= 2 ** 31 or max(grid[1:]) > 65535:
            raise ValueError(f"{name}: grid {grid}")
        if not 0 <= int(shared_bytes) <= MAX_SHARED_BYTES:
            raise ValueError(f"{name}: {shared_bytes} bytes of dynamic shared memory (sm_90: at most "
                             f"{MAX_SHARED_BYTES})")
        with self._lock:
            failure = launch((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block),
                             ctypes.c_ulonglong(int(shared_bytes)), params)
        if failure:
            raise RuntimeError(f"{name}: {failure.decode()}")
