/* GPU activation quantization: 1x128 groups along K, fp32 or UE8M0 scales, any scale layout. One warp per group,
 * four elements per lane; the bytes and scales are the host's (bfp8_quantize_act) bit for bit. */
#include <cuda_runtime.h>

#include "fp8_math.cuh"

namespace {

constexpr int kWarpsPerBlock = 8;

__global__ void quantize_act_kernel(const void *__restrict__ x, int x_dtype, int64_t m, int64_t k,
                                    uint8_t *__restrict__ q, bfp8_cuda_scale_view scales, int ue8m0,
                                    unsigned long long *nonfinite) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* A GEMM launched as this kernel's programmatic dependent may start now: it waits for this grid before it
     * reads the activations (hopper streams its weight meanwhile). Ordinary launches are unaffected. */
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    const int lane = threadIdx.x & 31;
    const int64_t kblocks = (k + 127) / 128;
    const int64_t groups = m * kblocks;
    const int64_t warp0 = (int64_t)blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
    const int64_t warp_step = (int64_t)gridDim.x * kWarpsPerBlock;
    for (int64_t gi = warp0; gi < groups; gi += warp_step) {
        const int64_t row = gi / kblocks, kb = gi % kblocks;
        const int64_t k0 = kb * 128;
        const int width = (int)(k - k0 < 128 ? k - k0 : 128); /* edge groups are partial */
        const int64_t base = row * k + k0;
        float v[4];
        float amax = 0.0f;
        unsigned bad = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int c = lane + 32 * j;
            v[j] = c < width ? bfp8_dev_load_f32(x, x_dtype, base + c) : 0.0f;
            if (c < width) {
                if (isfinite(v[j]))
                    amax = fmaxf(amax, fabsf(v[j]));
                else
                    bad++;
            }
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
            bad += __shfl_xor_sync(0xFFFFFFFFu, bad, off);
        }
        /* IEEE division, no fast math: the host computes exactly this. */
        float s = __fdiv_rn(fmaxf(amax, 1e-10f), 448.0f);
        uint32_t e = 0;
        if (ue8m0) {
            e = bfp8_dev_ue8m0_ceil(s);
            s = bfp8_dev_ue8m0_value(e);
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int c = lane + 32 * j;
            if (c < width) {
                uint8_t code;
                if (isfinite(v[j])) {
                    code = bfp8_dev_e4m3_from_f32(__fdiv_rn(v[j], s));
                } else {
                    code = (uint8_t)((__float_as_uint(v[j]) >> 24 & 0x80u) | 0x7Fu);
                }
                q[base + c] = code;
            }
        }
        if (lane == 0) {
            if (scales.packed) {
                uint8_t *bytes = (uint8_t *)scales.data;
                bytes[4 * (row * scales.row_stride + (kb >> 2) * scales.kb_stride) + (kb & 3)] = (uint8_t)e;
            } else {
                ((float *)scales.data)[row * scales.row_stride + kb * scales.kb_stride] = s;
            }
            if (bad && nonfinite) atomicAdd(nonfinite, (unsigned long long)bad);
        }
    }
}

} // namespace

extern "C" int bfp8_cuda_launch_quantize_act(const void *x, int x_dtype, int64_t m, int64_t k, uint8_t *q,
                                             bfp8_cuda_scale_view scales, int ue8m0, long long *nonfinite,
                                             void *stream) {
    const int64_t groups = m * ((k + 127) / 128);
    if (groups == 0) return 0;
    int64_t blocks = (groups + kWarpsPerBlock - 1) / kWarpsPerBlock;
    if (blocks > 65535LL * 64) blocks = 65535LL * 64; /* grid-stride beyond that */
    quantize_act_kernel<<<(unsigned)blocks, 32 * kWarpsPerBlock, 0, (cudaStream_t)stream>>>(
        x, x_dtype, m, k, q, scales, ue8m0, (unsigned long long *)nonfinite);
    return (int)cudaGetLastError();
}
