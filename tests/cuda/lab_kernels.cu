/* lab_kernels.cu — the lab's own kernel: a streaming read of a large buffer (16-byte loads, grid-
 * stride, one float written per CTA), the read-bandwidth roofline the mat-vec kernels are compared
 * with. */
#include <cuda_runtime.h>
#include <stdint.h>

static __global__ void read_kernel(const uint4 *__restrict__ p, size_t n, float *out) {
    uint32_t acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) out[blockIdx.x] = (float)acc; /* keeps the loads; almost never stores */
}

extern "C" int lab_read_kernel(const void *p, size_t bytes, float *out, void *stream) {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    read_kernel<<<sms * 8, 256, 0, (cudaStream_t)stream>>>((const uint4 *)p, bytes / 16, out);
    return (int)cudaGetLastError();
}

/* Keeps the GPU busy for about `us` microseconds without touching memory: queued before a timed
 * region that should find L2 warm, so that the region's launches are already queued when it starts
 * (otherwise the events would time the host's launch latency). */
static __global__ void spin_kernel(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

extern "C" int lab_spin_kernel(double us, void *stream) {
    int dev = 0, khz = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev);
    spin_kernel<<<1, 32, 0, (cudaStream_t)stream>>>((long long)(us * (double)khz / 1000.0));
    return (int)cudaGetLastError();
}
