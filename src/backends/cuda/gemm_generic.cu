/* cuda_generic's own kernel: the always-works block-FP8 GEMM on FP8 tensor cores (mma.sync m16n8k32 e4m3, sm_89+).
 * It runs every problem cuda_generic is given, sm_90 included: where hopper's wgmma kernel is faster, the dispatcher
 * picks hopper, not this backend.
 *
 * y[m,n] = sum_kb sa[m,kb] * sb[n/128,kb] * (sum_{k in kb} a[m,k] b[n,k]) + bias[n], one rounding at the end.
 * A CTA computes a BM x BN tile (BN divides 128, so one weight-scale row per tile) and walks K in 128-wide blocks:
 * each block is one pipeline stage (cp.async, STAGES deep), four mma k-steps into a fresh fp32 partial, then the
 * partial is promoted into the fp32 total with the two scales. Out-of-range rows and K bytes are zero-filled in
 * shared memory, so partial blocks are exact. Small M splits K across CTAs (fp32 partials in a workspace, reduced
 * in a fixed order by a second kernel that also adds the bias and rounds once). K % 16 != 0 or unaligned pointers
 * take a byte-load path (correct, slower).
 *
 * Grouped (MoE) problems run the same tile code with a group index (docs/grouped.md): masked, group g = grid z, its
 * row count read from masked_m on the device (tiles past it return at once, rows past it are never stored);
 * contiguous, the tiles cover all rows and each tile makes one pass per expert among its rows (found on the
 * device), storing only that expert's rows, so any order of rows is right and 128-aligned segments (DeepGEMM's
 * layout) take one pass per tile. No split-K for grouped problems. */
#include <climits>
#include <cuda_runtime.h>

#include "cuda_grouped.h"
#include "fp8_math.cuh"

namespace {

constexpr int kBK = 128;    /* K per stage = one scale block */
constexpr int kGroupM = 8;  /* tile rasterization: groups of 8 M-tiles walk N together (L2 reuse of B) */

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

[[maybe_unused]] __device__ __forceinline__ void mma_e4m3(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* Hopper has no FP8 mma.sync datapath: the compiler emulates each e4m3 m16n8k32 with two f16 HMMAs and converts
 * the fragments again for every instruction (SASS: HMMA.16816.F32 only). Converting each fragment once to f16
 * (exact: every e4m3 value is an f16 value) and issuing m16n8k16 f16 MMAs ourselves does the conversions once per
 * k-step instead of once per MMA. The k order inside the product is permuted identically for A and B (a thread's
 * 4 consecutive bytes become two f16x2 halves of two k16 MMAs), which leaves each 128-block sum unchanged. */
[[maybe_unused]] __device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two_bytes) {
    uint32_t out;
    asm("{\n .reg .b16 lo;\n mov.b32 {lo, _}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}\n" : "=r"(out) : "r"(two_bytes));
    return out;
}

[[maybe_unused]] __device__ __forceinline__ void mma_f16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define BFP8_GENERIC_F16_PATH 1
#else
#define BFP8_GENERIC_F16_PATH 0
#endif

/* Byte offset of 16-byte chunk `ch` of tile row `r` (rows of 128 bytes): XOR swizzle so that the 8 rows an
 * ldmatrix phase reads hit 8 different bank groups. */
__device__ __forceinline__ uint32_t swz(int r, int ch) { return (uint32_t)(r * 128 + ((ch ^ (r & 7)) << 4)); }

/* The chunks of a ROWS x 128-byte tile one thread copies. The tile's base pointer and 32-bit chunk offsets are
 * computed once, so the K loop does no 64-bit multiplies (needs 128 * k < 2^32: caps.max_k). */
template <int ROWS, int THREADS> struct TileLoader {
    static constexpr int ITER = (ROWS * 8 + THREADS - 1) / THREADS;
    const uint8_t *base;
    uint32_t off[ITER];
    uint32_t row_ok; /* bit i: chunk i is this thread's and its row exists */

    __device__ __forceinline__ void init(const uint8_t *g, int64_t rows_total, int64_t k, int64_t row0) {
        base = g + row0 * k;
        row_ok = 0;
#pragma unroll
        for (int i = 0; i < ITER; i++) {
            const int c = threadIdx.x + i * THREADS;
            const int r = c >> 3, ch = c & 7;
            if (c < ROWS * 8 && row0 + r < rows_total) row_ok |= 1u << i;
            off[i] = (uint32_t)r * (uint32_t)k + (uint32_t)(ch * 16);
        }
    }

    /* Copies K bytes [k0, k0+128) into `tile`, zero-filling what lies outside the matrix. */
    template <bool ALIGNED> __device__ __forceinline__ void load(uint8_t *tile, int64_t k, int64_t k0) const {
        const uint32_t sbase = smem_addr(tile);
#pragma unroll
        for (int i = 0; i < ITER; i++) {
            const int c = threadIdx.x + i * THREADS;
            if (ITER * THREADS > ROWS * 8 && c >= ROWS * 8) continue;
            const int r = c >> 3, ch = c & 7;
            const int64_t gk = k0 + ch * 16;
            const bool rok = (row_ok >> i) & 1u;
            if (ALIGNED) {
                /* k % 16 == 0: a chunk is wholly inside or wholly outside. */
                const bool ok = rok && gk < k;
                cp_async16(sbase + swz(r, ch), ok ? (const void *)(base + off[i] + k0) : (const void *)base,
                           ok ? 16 : 0);
            } else {
                uint32_t w[4] = {0, 0, 0, 0};
                if (rok) {
                    const uint8_t *p = base + off[i] + k0;
#pragma unroll
                    for (int j = 0; j < 16; j++)
                        if (gk + j < k) w[j >> 2] |= (uint32_t)__ldg(p + j) << (8 * (j & 3));
                }
                *(uint4 *)(tile + swz(r, ch)) = make_uint4(w[0], w[1], w[2], w[3]);
            }
        }
    }
};

__device__ __forceinline__ float load_bias(const void *bias, int dtype, int64_t n) {
    return bias ? bfp8_dev_load_f32(bias, dtype, n) : 0.0f;
}

/* The grouping of a tile: a dense GEMM, or the bfp8_grouped_layout values. */
constexpr int kDense = 0, kContiguous = 1, kMasked = 2;

__device__ __forceinline__ size_t dtype_bytes(int dtype) { return dtype == 0 ? 4 : 2; }

/* One pass over K for a tile, with d's pointers at the pass's group. Rows at or past rows_valid, and for a
 * contiguous pass the rows of other experts, are computed on what was loaded and never stored. */
template <int BM, int BN, int WM, int WN, int STAGES, bool ALIGNED, int GM>
__device__ __forceinline__ void tile_pass(const bfp8_cuda_gemm_desc &d, const bfp8_cuda_grouped_desc &gd, int64_t m0,
                                          int64_t n0, int64_t rows_valid, int64_t kb_begin, int nk,
                                          float *__restrict__ ws, int expert) {
    constexpr int THREADS = WM * WN * 32;
    constexpr int WTM = BM / WM, WTN = BN / WN;
    constexpr int MT = WTM / 16, NT = WTN / 8;
    static_assert(MT >= 1 && NT >= 2 && NT % 2 == 0, "warp tile");
    static_assert(128 % BN == 0, "a tile must sit inside one weight-scale row");
    constexpr int STAGE_BYTES = (BM + BN) * kBK;

    extern __shared__ __align__(128) uint8_t smem[];

    const int64_t M = d.m, N = d.n, K = d.k;
    const int split = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp / WN, wn = warp % WN;
    const int g = lane >> 2, t = lane & 3;

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    TileLoader<BM, THREADS> a_loader;
    TileLoader<BN, THREADS> b_loader;
    a_loader.init(d.a, rows_valid, K, m0);
    b_loader.init(d.b, N, K, n0);
    auto load_stage = [&](int slot, int64_t kb) {
        uint8_t *tile = smem + slot * STAGE_BYTES;
        a_loader.template load<ALIGNED>(tile, K, kb * kBK);
        b_loader.template load<ALIGNED>(tile + BM * kBK, K, kb * kBK);
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < nk) load_stage(s, kb_begin + s);
        cp_async_commit();
    }

    /* Rows of this thread's fragments (clamped: rows past the last are computed on zeros and never stored). */
    int64_t rows[MT][2];
    [[maybe_unused]] bool store_row[MT][2]; /* grouped: the row exists and (contiguous) is this pass's expert's */
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int64_t r = m0 + wm * WTM + i * 16 + g + h * 8;
            rows[i][h] = r < rows_valid ? r : rows_valid - 1;
            if constexpr (GM != kDense) store_row[i][h] = r < rows_valid;
            if constexpr (GM == kContiguous) store_row[i][h] = store_row[i][h] && __ldg(gd.m_indices + r) == expert;
        }
    const int64_t nblk = n0 / 128;

    for (int it = 0; it < nk; it++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        {
            const int nxt = it + STAGES - 1;
            if (nxt < nk) load_stage(nxt % STAGES, kb_begin + nxt);
            cp_async_commit();
        }
        const int64_t kb = kb_begin + it;
        /* Scale loads issued before the MMAs so their latency overlaps them. */
        float sa[MT][2];
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) sa[i][h] = bfp8_dev_scale_get(d.sa, rows[i][h], kb);
        const float sb = bfp8_dev_scale_get(d.sb, nblk, kb);

        const uint8_t *a_tile = smem + (it % STAGES) * STAGE_BYTES;
        const uint8_t *b_tile = a_tile + BM * kBK;
        const uint32_t a_base = smem_addr(a_tile), b_base = smem_addr(b_tile);

        float part[MT][NT][4];
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) part[i][j][e] = 0.0f;

#pragma unroll
        for (int ks = 0; ks < kBK / 32; ks++) {
            const int mi = lane >> 3;
            uint32_t af[MT][4];
#pragma unroll
            for (int i = 0; i < MT; i++) {
                const int r = wm * WTM + i * 16 + (mi & 1) * 8 + (lane & 7);
                ldmatrix_x4(a_base + swz(r, ks * 2 + (mi >> 1)), af[i][0], af[i][1], af[i][2], af[i][3]);
            }
            uint32_t bf[NT][2];
#pragma unroll
            for (int j = 0; j < NT / 2; j++) {
                const int r = wn * WTN + j * 16 + (mi >> 1) * 8 + (lane & 7);
                ldmatrix_x4(b_base + swz(r, ks * 2 + (mi & 1)), bf[2 * j][0], bf[2 * j][1], bf[2 * j + 1][0],
                            bf[2 * j + 1][1]);
            }
#if BFP8_GENERIC_F16_PATH
            /* Each fp8 register (4 bytes of k) -> two f16x2: low pair feeds the first k16 MMA, high pair the
             * second; registers 0/1 (A) and 0 (B) cover bytes 0-15 of the k32 step, 2/3 and 1 bytes 16-31. */
            uint32_t ah[MT][4][2], bh[NT][2][2];
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    ah[i][r][0] = e4m3x2_to_f16x2(af[i][r]);
                    ah[i][r][1] = e4m3x2_to_f16x2(af[i][r] >> 16);
                }
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    bh[j][r][0] = e4m3x2_to_f16x2(bf[j][r]);
                    bh[j][r][1] = e4m3x2_to_f16x2(bf[j][r] >> 16);
                }
#pragma unroll
            for (int half = 0; half < 2; half++) /* bytes 0-15, then 16-31 */
#pragma unroll
                for (int i = 0; i < MT; i++)
#pragma unroll
                    for (int j = 0; j < NT; j++)
                        mma_f16(part[i][j], ah[i][2 * half][0], ah[i][2 * half + 1][0], ah[i][2 * half][1],
                                ah[i][2 * half + 1][1], bh[j][half][0], bh[j][half][1]);
#else
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT; j++) mma_e4m3(part[i][j], af[i], bf[j][0], bf[j][1]);
#endif
        }
        /* Promotion: the block's partial, scaled, into the fp32 total. */
#pragma unroll
        for (int i = 0; i < MT; i++) {
            const float s0 = sa[i][0] * sb, s1 = sa[i][1] * sb;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                acc[i][j][0] = fmaf(part[i][j][0], s0, acc[i][j][0]);
                acc[i][j][1] = fmaf(part[i][j][1], s0, acc[i][j][1]);
                acc[i][j][2] = fmaf(part[i][j][2], s1, acc[i][j][2]);
                acc[i][j][3] = fmaf(part[i][j][3], s1, acc[i][j][3]);
            }
        }
    }
    cp_async_wait<0>();

    /* Epilogue: direct (bias + one rounding) or an fp32 partial for the split-K reduction. */
    const bool direct = gridDim.y == 1;
    const bool pairs = (N % 2) == 0;
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t row = m0 + wm * WTM + i * 16 + g + h * 8;
            if constexpr (GM == kDense) {
                if (row >= M) continue;
            } else if (!store_row[i][h]) {
                continue;
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const int64_t col = n0 + wn * WTN + j * 8 + 2 * t;
                if (col >= N) continue;
                float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
                const bool has1 = col + 1 < N;
                if (!direct) {
                    float *dst = ws + ((int64_t)split * M + row) * N + col;
                    if (pairs && has1) {
                        *(float2 *)dst = make_float2(v0, v1);
                    } else {
                        dst[0] = v0;
                        if (has1) dst[1] = v1;
                    }
                    continue;
                }
                v0 += load_bias(d.bias, d.bias_dtype, col);
                if (has1) v1 += load_bias(d.bias, d.bias_dtype, col + 1);
                const int64_t idx = row * N + col;
                if (pairs && has1) {
                    /* N even and col even: the pair is aligned for 2-element stores. */
                    if (d.y_dtype == 1)
                        *(__nv_bfloat162 *)((__nv_bfloat16 *)d.y + idx) = __floats2bfloat162_rn(v0, v1);
                    else if (d.y_dtype == 2)
                        *(__half2 *)((__half *)d.y + idx) = __floats2half2_rn(v0, v1);
                    else
                        *(float2 *)((float *)d.y + idx) = make_float2(v0, v1);
                } else {
                    bfp8_dev_store_f32(d.y, d.y_dtype, idx, v0);
                    if (has1) bfp8_dev_store_f32(d.y, d.y_dtype, idx + 1, v1);
                }
            }
        }
}

/* One output tile (all of a CTA's work). GM != kDense: a grouped problem (cuda_grouped.h), d holding group 0's
 * pointers. */
template <int BM, int BN, int WM, int WN, int STAGES, bool ALIGNED, int GM>
__device__ __forceinline__ void gemm_tile(bfp8_cuda_gemm_desc d, int kb_per_split, float *__restrict__ ws,
                                          const bfp8_cuda_grouped_desc &gd) {
    constexpr int THREADS = WM * WN * 32;

    const int64_t M = d.m, N = d.n, K = d.k;
    const int64_t kblocks = (K + kBK - 1) / kBK;
    const int64_t tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;

    /* Grouped rasterization of the linear tile index. */
    const int64_t tile = blockIdx.x;
    const int64_t per_group = (int64_t)kGroupM * tiles_n;
    const int64_t first_m = (tile / per_group) * kGroupM;
    const int64_t group_rows = tiles_m - first_m < kGroupM ? tiles_m - first_m : kGroupM;
    const int64_t tm = first_m + (tile % per_group) % group_rows;
    const int64_t tn = (tile % per_group) / group_rows;
    const int64_t m0 = tm * BM, n0 = tn * BN;

    /* The rows that exist: M, or for a masked group the count read from masked_m (clamped to [0, max_m], so no
     * value there makes the kernel write outside the group's rows). */
    int64_t rows_valid = M;
    if constexpr (GM == kMasked) {
        const int64_t grp = blockIdx.z;
        const int64_t mg = __ldg(gd.masked_m + grp);
        rows_valid = mg < 0 ? 0 : mg > M ? M : mg;
        if (m0 >= rows_valid) return;
        d.a += grp * M * K;
        d.b += grp * N * K;
        d.sa.data = (char *)d.sa.data + grp * gd.a_group_bytes;
        d.sb.data = (char *)d.sb.data + grp * gd.b_group_bytes;
        if (d.bias) d.bias = (const char *)d.bias + (size_t)(grp * N) * dtype_bytes(d.bias_dtype);
        d.y = (char *)d.y + (size_t)(grp * M * N) * dtype_bytes(d.y_dtype);
    }

    const int split = blockIdx.y;
    const int64_t kb_begin = (int64_t)split * kb_per_split;
    int64_t kb_end = kb_begin + kb_per_split;
    if (kb_end > kblocks) kb_end = kblocks;
    const int nk = kb_end > kb_begin ? (int)(kb_end - kb_begin) : 0;

    if constexpr (GM != kContiguous) {
        tile_pass<BM, BN, WM, WN, STAGES, ALIGNED, GM>(d, gd, m0, n0, rows_valid, kb_begin, nk, ws, -1);
    } else {
        /* One pass per expert among the tile's rows, in increasing order (one pass for a tile inside a 128-aligned
         * segment). Indices outside [0, groups) are never taken, so those rows are never written. */
        __shared__ int next_expert;
        const uint8_t *const b_group0 = d.b;
        void *const sb_group0 = d.sb.data;
        const void *const bias_group0 = d.bias;
        for (int expert = -1;;) {
            __syncthreads(); /* the previous pass is done with shared memory and with next_expert */
            if (threadIdx.x == 0) next_expert = INT_MAX;
            __syncthreads();
            for (int r = threadIdx.x; r < BM && m0 + r < M; r += THREADS) {
                const int e = __ldg(gd.m_indices + m0 + r);
                if (e > expert && e < gd.groups) atomicMin(&next_expert, e);
            }
            __syncthreads();
            if (next_expert == INT_MAX) return;
            expert = next_expert;
            d.b = b_group0 + expert * N * K;
            d.sb.data = (char *)sb_group0 + expert * gd.b_group_bytes;
            if (bias_group0) d.bias = (const char *)bias_group0 + (size_t)(expert * N) * dtype_bytes(d.bias_dtype);
            tile_pass<BM, BN, WM, WN, STAGES, ALIGNED, GM>(d, gd, m0, n0, rows_valid, kb_begin, nk, ws, expert);
        }
    }
}


template <int BM, int BN, int WM, int WN, int STAGES, bool ALIGNED>
__global__ void __launch_bounds__(WM *WN * 32, 1)
    gemm_generic_kernel(bfp8_cuda_gemm_desc d, int kb_per_split, float *__restrict__ ws) {
    gemm_tile<BM, BN, WM, WN, STAGES, ALIGNED, kDense>(d, kb_per_split, ws, bfp8_cuda_grouped_desc{});
}

/* Grouped: masked groups are grid z; the whole K in one CTA (no split). */
template <int BM, int BN, int WM, int WN, int STAGES, bool ALIGNED, int GM>
__global__ void __launch_bounds__(WM *WN * 32, 1)
    gemm_grouped_kernel(bfp8_cuda_gemm_desc d, int kb_per_split, bfp8_cuda_grouped_desc gd) {
    gemm_tile<BM, BN, WM, WN, STAGES, ALIGNED, GM>(d, kb_per_split, nullptr, gd);
}

/* Sums the split-K partials in split order, adds the bias and rounds once. */
__global__ void splitk_reduce_kernel(const float *__restrict__ ws, int splits, int64_t m, int64_t n,
                                     const void *bias, int bias_dtype, void *y, int y_dtype) {
    const int64_t total = m * n;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < splits; s++) v += ws[(int64_t)s * total + i];
        v += load_bias(bias, bias_dtype, i % n);
        bfp8_dev_store_f32(y, y_dtype, i, v);
    }
}

typedef void (*grouped_kernel_fn)(bfp8_cuda_gemm_desc, int, bfp8_cuda_grouped_desc);

struct Config {
    int bm, bn, stages, threads;
    void (*aligned)(bfp8_cuda_gemm_desc, int, float *);
    void (*unaligned)(bfp8_cuda_gemm_desc, int, float *);
    grouped_kernel_fn grouped[2][2]; /* [masked][aligned] */
    int smem() const { return stages * (bm + bn) * kBK; }
};

#define BFP8_CFG(BM, BN, WM, WN, ST)                                                                              \
    Config {                                                                                                     \
        BM, BN, ST, WM *WN * 32, gemm_generic_kernel<BM, BN, WM, WN, ST, true>,                                  \
            gemm_generic_kernel<BM, BN, WM, WN, ST, false>, {                                                    \
            {gemm_grouped_kernel<BM, BN, WM, WN, ST, false, kContiguous>,                                        \
             gemm_grouped_kernel<BM, BN, WM, WN, ST, true, kContiguous>},                                        \
                {gemm_grouped_kernel<BM, BN, WM, WN, ST, false, kMasked>,                                        \
                 gemm_grouped_kernel<BM, BN, WM, WN, ST, true, kMasked>}                                         \
        }                                                                                                        \
    }

/* Tile configs, largest first. Warp tiles: 64x32, 32x64, 32x32, 16x32. */
const Config kConfigs[] = {
    BFP8_CFG(128, 128, 2, 4, 4),
    BFP8_CFG(64, 128, 2, 2, 4),
    BFP8_CFG(32, 128, 1, 4, 5),
    BFP8_CFG(16, 128, 1, 4, 6),
};
constexpr int kNumConfigs = (int)(sizeof kConfigs / sizeof kConfigs[0]);

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

} // namespace

extern "C" int bfp8_cuda_generic_plan(const bfp8_cuda_gemm_desc *d, int num_sms, bfp8_cuda_gemm_plan *plan) {
    int cfg;
    if (d->m <= 16)
        cfg = 3;
    else if (d->m <= 32)
        cfg = 2;
    else if (d->m <= 64)
        cfg = 1;
    else
        cfg = cdiv(d->m, 128) * cdiv(d->n, 128) >= num_sms ? 0 : 1;
    const Config &c = kConfigs[cfg];
    const int64_t tiles = cdiv(d->m, c.bm) * cdiv(d->n, c.bn);
    const int64_t kblocks = cdiv(d->k, kBK);
    /* Split K for small M: the work is a stream of weight bytes, and a last wave that leaves SMs idle costs as
     * much as a full one. Take the smallest split whose waves are >= 85% full (at least 2 K-blocks a split),
     * else the fullest. Large M is compute-bound with enough tiles: no split (no workspace traffic). */
    const int64_t slots = (int64_t)num_sms * (c.smem() <= 113 * 1024 ? 2 : 1);
    int64_t splits = 1;
    if (d->m <= 256 && kblocks >= 4) {
        double best_eff = 0;
        const int64_t max_splits = kblocks / 2 < 32 ? kblocks / 2 : 32;
        for (int64_t s = 1; s <= max_splits; s++) {
            const int64_t ctas = tiles * s, waves = cdiv(ctas, slots);
            const double eff = (double)ctas / (double)(waves * slots);
            if (ctas >= slots && eff >= 0.85) {
                splits = s;
                break;
            }
            if (eff > best_eff + 0.02) best_eff = eff, splits = s;
        }
        const int64_t per = cdiv(kblocks, splits);
        splits = cdiv(kblocks, per);
    }
    plan->config = cfg;
    plan->splits = (int)splits;
    plan->workspace_bytes = splits > 1 ? (size_t)splits * (size_t)d->m * (size_t)d->n * sizeof(float) : 0;
    return 0;
}

extern "C" int bfp8_cuda_generic_launch(const bfp8_cuda_gemm_desc *d, const bfp8_cuda_gemm_plan *plan,
                                        float *workspace, void *stream) {
    if (plan->config < 0 || plan->config >= kNumConfigs) return (int)cudaErrorInvalidValue;
    const Config &c = kConfigs[plan->config];
    const bool aligned = d->k % 16 == 0 && ((uintptr_t)d->a % 16) == 0 && ((uintptr_t)d->b % 16) == 0;
    void (*kernel)(bfp8_cuda_gemm_desc, int, float *) = aligned ? c.aligned : c.unaligned;
    /* Raising the dynamic shared-memory limit is idempotent; done on every launch it costs a driver call but
     * needs no once-only state shared between threads. */
    cudaError_t err = cudaFuncSetAttribute((const void *)kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           c.smem());
    if (err != cudaSuccess) return (int)err;
    const int64_t tiles = cdiv(d->m, c.bm) * cdiv(d->n, c.bn);
    const int64_t kblocks = cdiv(d->k, kBK);
    const int kb_per_split = plan->splits > 1 ? (int)cdiv(kblocks, plan->splits) : (int)(kblocks ? kblocks : 1);
    if (tiles > 0x7FFFFFFFLL || plan->splits > 65535) return (int)cudaErrorInvalidConfiguration;
    dim3 grid((unsigned)tiles, (unsigned)plan->splits);
    kernel<<<grid, c.threads, c.smem(), (cudaStream_t)stream>>>(*d, kb_per_split, workspace);
    err = cudaGetLastError();
    if (err != cudaSuccess || plan->splits == 1) return (int)err;
    const int64_t total = d->m * d->n;
    int64_t blocks = cdiv(total, 256);
    if (blocks > 132LL * 32) blocks = 132LL * 32;
    splitk_reduce_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(workspace, plan->splits, d->m, d->n,
                                                                             d->bias, d->bias_dtype, d->y,
                                                                             d->y_dtype);
    return (int)cudaGetLastError();
}

/* Grouped: the tile height from the rows a group is expected to carry (masked: masked_m; contiguous: a segment),
 * the largest tile where enough of them fill the SMs; no split-K (it would need a workspace of every group's rows
 * and a reduction that reads masked_m again; the groups' tiles usually fill the SMs by themselves). */
extern "C" int bfp8_cuda_generic_grouped_launch(const bfp8_cuda_gemm_desc *d, const bfp8_cuda_grouped_desc *g,
                                                int num_sms, void *stream) {
    const bool masked = g->layout == kMasked;
    if ((g->layout != kMasked && g->layout != kContiguous) || g->groups < 1 ||
        g->groups > BFP8_CUDA_GROUPED_MAX_GROUPS)
        return (int)cudaErrorInvalidValue;
    if (d->m == 0 || d->n == 0) return 0;
    const int64_t per = g->expected_m > 0 ? g->expected_m : masked ? d->m : cdiv(d->m, g->groups);
    int cfg;
    if (per <= 16)
        cfg = 3;
    else if (per <= 32)
        cfg = 2;
    else if (per <= 64)
        cfg = 1;
    else
        cfg = (masked ? g->groups * cdiv(per, 128) : cdiv(d->m, 128)) * cdiv(d->n, 128) >= num_sms ? 0 : 1;
    const Config &c = kConfigs[cfg];
    const bool aligned = d->k % 16 == 0 && ((uintptr_t)d->a % 16) == 0 && ((uintptr_t)d->b % 16) == 0;
    grouped_kernel_fn kernel = c.grouped[masked][aligned];
    cudaError_t err = cudaFuncSetAttribute((const void *)kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, c.smem());
    if (err != cudaSuccess) return (int)err;
    const int64_t tiles = cdiv(d->m, c.bm) * cdiv(d->n, c.bn), kblocks = cdiv(d->k, kBK);
    if (tiles > 0x7FFFFFFFLL) return (int)cudaErrorInvalidConfiguration;
    dim3 grid((unsigned)tiles, 1, masked ? (unsigned)g->groups : 1u);
    kernel<<<grid, c.threads, c.smem(), (cudaStream_t)stream>>>(*d, (int)(kblocks ? kblocks : 1), *g);
    return (int)cudaGetLastError();
}
