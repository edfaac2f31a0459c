// bench/launch_probe.cu — does the GPU start a captured graph's first kernel before cudaGraphLaunch returns?
//
//   nvcc -O2 -arch=sm_90 -o launch_probe bench/launch_probe.cu && ./launch_probe [n_kernels]
//
// A graph of n small kernels (as a decode step: one after another, with or without programmatic dependent
// launch). Its first kernel records the value of a host flag (mapped pinned memory) that the host sets
// right after cudaGraphLaunch returns: 0 means the GPU was already running the graph during the launch call.
// Prints the launch call's host time and the share of replays that started early, per variant.
// Result (H200, 2026-11-28): docs/performance.md, "Issue 9 on the H200".
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

__global__ void first_kernel(volatile int *flag, int *seen) {
    if (threadIdx.x == 0) *seen = *flag;
}
__global__ void step_kernel(float *buf, int i) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (threadIdx.x == 0 && blockIdx.x == 0) buf[i & 1023] += 1.0f;
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 290;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    int *flag_h, *flag_d, *seen_h, *seen_d;
    cudaHostAlloc((void **)&flag_h, 4, cudaHostAllocMapped);
    cudaHostAlloc((void **)&seen_h, 4, cudaHostAllocMapped);
    cudaHostGetDevicePointer((void **)&flag_d, flag_h, 0);
    cudaHostGetDevicePointer((void **)&seen_d, seen_h, 0);
    float *buf;
    cudaMalloc((void **)&buf, 4096);
    for (int pdl = 0; pdl < 2; pdl++) {
        cudaGraph_t g;
        cudaGraphExec_t ge;
        cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
        first_kernel<<<1, 32, 0, s>>>(flag_d, seen_d);
        for (int i = 0; i < n; i++) {
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(132);
            cfg.blockDim = dim3(128);
            cfg.stream = s;
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            at[0].val.programmaticStreamSerializationAllowed = 1;
            cfg.attrs = at;
            cfg.numAttrs = pdl;
            cudaLaunchKernelEx(&cfg, step_kernel, buf, i);
        }
        cudaStreamEndCapture(s, &g);
        if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) {
            printf("instantiate failed\n");
            return 1;
        }
        cudaGraphUpload(ge, s);
        cudaStreamSynchronize(s);
        const int reps = 200;
        int early = 0;
        double t_launch = 0, t_total = 0, t_sync = 0;
        for (int r = 0; r < reps + 10; r++) {
            *(volatile int *)flag_h = 0;
            *(volatile int *)seen_h = -1;
            const double t0 = now_us();
            cudaGraphLaunch(ge, s);
            const double t1 = now_us();
            *(volatile int *)flag_h = 1;
            cudaStreamSynchronize(s);
            const double t2 = now_us();
            if (r >= 10) {
                early += *(volatile int *)seen_h == 0;
                t_launch += t1 - t0;
                t_sync += t2 - t1;
                t_total += t2 - t0;
            }
        }
        // the GPU time of the graph alone: back-to-back replays
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        cudaEventRecord(e0, s);
        for (int r = 0; r < 50; r++) cudaGraphLaunch(ge, s);
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        printf("pdl %d, %d kernels: launch call %.1f us, launch..sync %.1f us (sync wait %.1f), graph back to back "
               "%.1f us; started before the launch returned in %d of %d\n",
               pdl, n, t_launch / reps, t_total / reps, t_sync / reps, ms * 1000.0 / 50, early, reps);
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
    }
    return 0;
}
