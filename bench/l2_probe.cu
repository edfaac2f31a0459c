/* bench/l2_probe.cu — does a 14 MB weight slice prefetched into L2 survive ~200 MB of streaming reads in
 * between (mixtral: the next layer's q/k/v prefetched during the routing, the experts streamed after)?
 * Times the read of the slice A in five orders (us, CUDA events around the read only):
 *   cold        A after 200 MB of other reads
 *   hot         A right after it was prefetched
 *   keep/plain  prefetch A (L2::evict_last), stream 200 MB with plain loads, read A
 *   keep/first  prefetch A (evict_last), stream 200 MB with L2::evict_first loads, read A
 *   norm/first  prefetch A (plain), stream with evict_first loads, read A
 *   build (device): nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/l2_probe bench/l2_probe.cu && /tmp/l2_probe [MB_A] [MB_stream] */
#include <cstdio>
#include <cstdint>
#include <cstdlib>

#define CK(x)                                                                  \
    do {                                                                       \
        cudaError_t e_ = (x);                                                  \
        if (e_ != cudaSuccess) {                                               \
            fprintf(stderr, "%d %s: %s\n", __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

template <int HINT> /* 0 plain (.nc no L1), 1 L2::evict_first */
static __global__ void read_kernel(const uint4 *p, size_t n16, uint32_t *sink) {
    uint64_t pol = 0;
    if (HINT == 1) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    uint32_t acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride * 4) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const size_t j = i + u * stride;
            if (j >= n16) { v[u] = make_uint4(0, 0, 0, 0); continue; }
            if (HINT == 1)
                asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                             : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(p + j), "l"(pol));
            else
                asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                             : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(p + j));
        }
#pragma unroll
        for (int u = 0; u < 4; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

template <int KEEP>
static __global__ void prefetch_kernel(const char *p, size_t bytes) {
    for (size_t off = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 128; off < bytes; off += (size_t)gridDim.x * blockDim.x * 128) {
        if (KEEP) asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(p + off));
        else asm volatile("prefetch.global.L2 [%0];" ::"l"(p + off));
    }
}

int main(int argc, char **argv) {
    const size_t A = (size_t)(argc > 1 ? atof(argv[1]) : 14.2) * 1000000 / 16 * 16;
    const size_t S = (size_t)(argc > 2 ? atof(argv[2]) : 198) * 1000000 / 16 * 16;
    int nsm;
    CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
    char *a, *s, *f;
    uint32_t *sink;
    CK(cudaMalloc(&a, A));
    CK(cudaMalloc(&s, S));
    CK(cudaMalloc(&f, S));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(a, 1, A));
    CK(cudaMemset(s, 2, S));
    CK(cudaMemset(f, 3, S));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    auto rd = [&](const char *p, size_t n, int hint) {
        if (hint) read_kernel<1><<<nsm * 8, 128>>>((const uint4 *)p, n / 16, sink);
        else read_kernel<0><<<nsm * 8, 128>>>((const uint4 *)p, n / 16, sink);
    };
    auto timed_a = [&]() {
        cudaEventRecord(e0);
        rd(a, A, 0);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        return ms * 1e3f;
    };
    const char *names[] = {"cold", "hot", "keep/plain", "keep/first", "norm/first", "keep/first x2 streams"};
    for (int mode = 0; mode < 6; mode++) {
        float tot = 0;
        const int reps = 10;
        for (int r = 0; r < reps; r++) {
            rd(f, S, 0); /* flush A out of L2 */
            if (mode == 0) {
            } else if (mode == 1) {
                prefetch_kernel<1><<<nsm * 4, 256>>>(a, A);
            } else {
                if (mode == 4) prefetch_kernel<0><<<nsm * 4, 256>>>(a, A);
                else prefetch_kernel<1><<<nsm * 4, 256>>>(a, A);
                rd(s, S, mode == 2 ? 0 : 1);
                if (mode == 5) rd(f, S, 1);
            }
            CK(cudaDeviceSynchronize());
            tot += timed_a();
        }
        CK(cudaGetLastError());
        printf("%-24s A %.1f MB, stream %.0f MB: read A %7.2f us (%6.0f GB/s)\n", names[mode], A / 1e6, S / 1e6,
               tot / reps, A / (tot / reps) * 1e-3);
    }
    return 0;
}
