/* The kernels of the CLI's GPU timer (tools/cuda_timer.c): the L2 flush by writing or by reading, and the spin
 * before each timed call. Launchers return a cudaError_t as int (0 = cudaSuccess). */
#include <cuda_runtime.h>

#include <stdint.h>

namespace {

__global__ void fill_kernel(uint4 *p, size_t n16, uint8_t *tail, size_t tail_bytes, unsigned value) {
    const uint4 v = make_uint4(value, value, value, value);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
    if (blockIdx.x == 0 && threadIdx.x < tail_bytes) tail[threadIdx.x] = (uint8_t)value;
}

/* Reads n16 16-byte words. The store guarded by a test on the XOR of everything read (practically never taken)
 * keeps the compiler from dropping the loads. */
__global__ void read_kernel(const uint4 *p, size_t n16, unsigned *sink) {
    unsigned acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9E3779B9u) *sink = acc;
}

/* One thread spinning for `cycles` SM clock cycles (what torch.cuda._sleep does). */
__global__ void hold_kernel(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

} // namespace

/* Sets `bytes` of device memory to the byte `value`. */
extern "C" int cli_cuda_launch_fill(void *ptr, size_t bytes, unsigned value, void *stream) {
    const size_t n16 = bytes / 16;
    value = (value & 0xFFu) * 0x01010101u;
    fill_kernel<<<1024, 256, 0, (cudaStream_t)stream>>>((uint4 *)ptr, n16, (uint8_t *)ptr + n16 * 16, bytes % 16,
                                                        value);
    return (int)cudaGetLastError();
}

/* Reads `bytes` (a multiple of 16) of device memory; `sink` is a device word. */
extern "C" int cli_cuda_launch_read(const void *ptr, size_t bytes, unsigned *sink, void *stream) {
    read_kernel<<<1024, 256, 0, (cudaStream_t)stream>>>((const uint4 *)ptr, bytes / 16, sink);
    return (int)cudaGetLastError();
}

/* Keeps the GPU busy for `cycles` clock cycles. */
extern "C" int cli_cuda_launch_hold(long long cycles, void *stream) {
    hold_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(cycles);
    return (int)cudaGetLastError();
}
