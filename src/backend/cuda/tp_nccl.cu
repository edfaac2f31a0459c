/* tp_nccl.cu — tensor parallelism on CUDA: n backends (one a GPU) joined into one NCCL group, and the all_reduce op
 * their forward passes call after each row-parallel matmul (a float sum, in place, on the backend's stream, so a
 * decode graph records it). NCCL is loaded at run time (dlopen), so the one binary runs where it is absent:
 * QUARREL_NCCL_LIB names the library, else libnccl.so.2 is looked up on the library path.
 *
 * Small sums (a decode step's rows: 16 KB a row of a 4096-wide model) take a one-shot peer-to-peer kernel instead
 * when every pair of GPUs can address each other's memory (NVLink or PCIe P2P): NCCL's latency, ~13 us a call on the
 * H200 pair, times two calls a layer was most of a two-GPU decode step's overhead. Each rank writes its buffer
 * into every peer's receive area (two, alternating by call), releases a flag in each peer's memory, acquires the
 * peers' flags in its own, then sums the ranks' values in rank order from its own memory (the same float on every
 * rank). The work is cut into up to 64 CTAs that synchronise each with its namesakes on the other GPUs only, each
 * counting its own calls in device memory, so a recorded graph replays it as it is. */
#include <dlfcn.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#define QR_TP_NCCL_ID_BYTES_CU 128 /* model.h's QR_TP_NCCL_ID_BYTES */
extern "C" {
#include "util/util.h"
}

/* The NCCL entry points used, from the loaded library (kept for the process: communicators outlive no library). */
typedef struct nccl_api {
    void *lib;
    ncclResult_t (*comm_init_all)(ncclComm_t *comms, int ndev, const int *devlist);
    ncclResult_t (*all_reduce)(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream);
    ncclResult_t (*comm_destroy)(ncclComm_t comm);
    ncclResult_t (*comm_abort)(ncclComm_t comm);
    const char *(*error_string)(ncclResult_t r);
    ncclResult_t (*get_version)(int *version);
    ncclResult_t (*get_unique_id)(ncclUniqueId *id);
    ncclResult_t (*comm_init_rank)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
} nccl_api;

static nccl_api api;

static qr_status nccl_load(char *err, size_t err_len) {
    if (api.lib) return QR_OK;
    const char *path = getenv("QUARREL_NCCL_LIB");
    void *lib = dlopen(path && *path ? path : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib && !(path && *path)) lib = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED,
                       "tensor parallelism needs NCCL: cannot load %s (%s); install libnccl2 or point QUARREL_NCCL_LIB "
                       "at libnccl.so.2", path && *path ? path : "libnccl.so.2", dlerror());
    nccl_api a;
    memset(&a, 0, sizeof a);
    a.lib = lib;
    a.comm_init_all = (ncclResult_t(*)(ncclComm_t *, int, const int *))dlsym(lib, "ncclCommInitAll");
    a.all_reduce = (ncclResult_t(*)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                    cudaStream_t))dlsym(lib, "ncclAllReduce");
    a.comm_destroy = (ncclResult_t(*)(ncclComm_t))dlsym(lib, "ncclCommDestroy");
    a.comm_abort = (ncclResult_t(*)(ncclComm_t))dlsym(lib, "ncclCommAbort");
    a.error_string = (const char *(*)(ncclResult_t))dlsym(lib, "ncclGetErrorString");
    a.get_version = (ncclResult_t(*)(int *))dlsym(lib, "ncclGetVersion");
    a.get_unique_id = (ncclResult_t(*)(ncclUniqueId *))dlsym(lib, "ncclGetUniqueId");
    a.comm_init_rank = (ncclResult_t(*)(ncclComm_t *, int, ncclUniqueId, int))dlsym(lib, "ncclCommInitRank");
    if (!a.comm_init_all || !a.all_reduce || !a.comm_destroy || !a.error_string || !a.get_version ||
        !a.get_unique_id || !a.comm_init_rank || !a.comm_abort) {
        dlclose(lib);
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "%s lacks the NCCL functions tensor parallelism calls",
                       path && *path ? path : "libnccl.so.2");
    }
    api = a;
    return QR_OK;
}

/* ---- the peer-to-peer all-reduce ---- */
#include <stdint.h>

#define P2P_MAX_RANKS 8
#define P2P_MAX_CTAS 64
#define P2P_THREADS 512

typedef struct p2p_args {
    float *recv[P2P_MAX_RANKS];      /* rank q's receive area: [2][P2P_MAX_RANKS][cap] floats (parity, sender) */
    unsigned *flags[P2P_MAX_RANKS];  /* rank q's flags: [sender][P2P_MAX_CTAS], the last call each sender's CTA posted */
    unsigned *calls;                 /* this rank's [P2P_MAX_CTAS] call counters */
    int rank, world;
    long long cap;
} p2p_args;

struct cuda_p2p {
    p2p_args a;      /* device pointers (peers' through unified addressing) */
    void *own_alloc; /* this rank's receive area + flags + counters */
};

/* How long a rank waits for a peer's post before it gives up (a lost GPU, a peer that died). */
#define P2P_TIMEOUT_NS 20000000000ull
static __device__ __forceinline__ unsigned long long global_ns(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
static __device__ __forceinline__ void flag_release(unsigned *p, unsigned v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
static __device__ __forceinline__ unsigned flag_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* Push variant: every rank writes its chunk into each peer's receive area (posted writes over the link), releases a
 * flag there, acquires the peers' flags in its own memory, and sums locally in rank order. n, chunk: multiples of 4
 * (float4 traffic); buf 16-byte aligned. */
__global__ void p2p_all_reduce_kernel(float *buf, long long n, long long chunk, p2p_args a) {
    const int b = blockIdx.x, t = threadIdx.x;
    __shared__ unsigned call;
    if (t == 0) call = ++a.calls[b];
    __syncthreads();
    const unsigned c = call;
    const long long par = (long long)(c & 1) * P2P_MAX_RANKS * a.cap;
    const long long i0 = (long long)b * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
    for (int q = 0; q < a.world; q++) {
        if (q == a.rank) continue;
        float4 *dst = (float4 *)(a.recv[q] + par + (long long)a.rank * a.cap);
        for (long long i = i0 / 4 + t; i < i1 / 4; i += blockDim.x) dst[i] = ((const float4 *)buf)[i];
    }
    __syncthreads();
    if (t < a.world && t != a.rank) { /* post to peer t (after every thread's writes), then wait for its post */
        flag_release(a.flags[t] + a.rank * P2P_MAX_CTAS + b, c);
        const unsigned *wait = a.flags[a.rank] + t * P2P_MAX_CTAS + b;
        const unsigned long long t0 = global_ns();
        while ((int)(flag_acquire(wait) - c) < 0)
            if (global_ns() - t0 > P2P_TIMEOUT_NS) __trap(); /* a peer is gone: fail the pass, never hang */
    }
    __syncthreads();
    const float *mine = a.recv[a.rank] + par;
    for (long long i = i0 / 4 + t; i < i1 / 4; i += blockDim.x) {
        float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int q = 0; q < a.world; q++) {
            const float4 v = q == a.rank ? ((const float4 *)buf)[i] : ((const float4 *)(mine + (long long)q * a.cap))[i];
            if (q == 0) s = v;
            else s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
        }
        ((float4 *)buf)[i] = s;
    }
}

/* Peer access between every pair, and each rank's staging / flags / counters; NULL ranks' p2p on any failure (the
 * sums then all go through NCCL). */
static void p2p_setup(qr_backend *const *bes, int32_t n) {
    if (n > P2P_MAX_RANKS) return;
    const long long cap = CB(bes[0])->tune.tp_p2p_max;
    if (cap <= 0) return;
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = 0; j < n; j++) {
            int ok = 0;
            if (i != j && (cudaDeviceCanAccessPeer(&ok, CB(bes[i])->device, CB(bes[j])->device) != cudaSuccess || !ok)) {
                qr_log(QR_LOG_INFO, "tensor parallelism: GPU %d cannot reach GPU %d directly: every sum through NCCL",
                       CB(bes[i])->device, CB(bes[j])->device);
                return;
            }
        }
    const size_t flag_bytes = sizeof(unsigned) * P2P_MAX_RANKS * P2P_MAX_CTAS,
                 recv_bytes = 2 * (size_t)P2P_MAX_RANKS * (size_t)cap * sizeof(float),
                 bytes = recv_bytes + flag_bytes + sizeof(unsigned) * P2P_MAX_CTAS;
    p2p_args a;
    memset(&a, 0, sizeof a);
    a.world = n;
    a.cap = cap;
    void *alloc[P2P_MAX_RANKS] = {0};
    bool ok = true;
    for (int32_t i = 0; i < n && ok; i++) {
        cudaSetDevice(CB(bes[i])->device);
        for (int32_t j = 0; j < n; j++) {
            if (j == i) continue;
            const cudaError_t e = cudaDeviceEnablePeerAccess(CB(bes[j])->device, 0);
            if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
            else if (e != cudaSuccess) ok = false;
        }
        ok = ok && cudaMalloc(&alloc[i], bytes) == cudaSuccess && cudaMemset(alloc[i], 0, bytes) == cudaSuccess;
        if (ok) {
            a.recv[i] = (float *)alloc[i];
            a.flags[i] = (unsigned *)((char *)alloc[i] + recv_bytes);
        }
    }
    if (ok) {
        for (int32_t i = 0; i < n; i++) {
            cudaSetDevice(CB(bes[i])->device);
            ok = ok && cudaDeviceSynchronize() == cudaSuccess;
        }
    }
    for (int32_t i = 0; i < n && ok; i++) {
        cuda_p2p *p = (cuda_p2p *)calloc(1, sizeof *p);
        if (!p) {
            ok = false;
            break;
        }
        p->a = a;
        p->a.rank = i;
        p->a.calls = (unsigned *)((char *)alloc[i] + recv_bytes + flag_bytes);
        p->own_alloc = alloc[i];
        CB(bes[i])->p2p = p;
    }
    if (!ok) {
        qr_log(QR_LOG_INFO, "tensor parallelism: no peer-to-peer all-reduce (%s): every sum through NCCL",
               cudaGetErrorString(cudaGetLastError()));
        for (int32_t i = 0; i < n; i++) {
            cudaSetDevice(CB(bes[i])->device);
            if (CB(bes[i])->p2p) free(CB(bes[i])->p2p);
            CB(bes[i])->p2p = NULL;
            if (alloc[i]) cudaFree(alloc[i]);
        }
    }
}

static void cuda_all_reduce(qr_backend *be, float *buf, int64_t n) {
    cuda_backend *cb = CB(be);
    /* a rank with an error still takes part (its sum is discarded with the pass), so that the others do not wait
     * for it; a rank whose device is lost cannot, and the peers' wait times out (the P2P kernel) */
    if (cb->tune.tp_skip_reduce) return;
    if (cb->p2p && n <= cb->p2p->a.cap && n % 4 == 0 && ((uintptr_t)buf & 15) == 0) {
        int ctas = (int)((n + 4095) / 4096);
        ctas = ctas < 1 ? 1 : ctas > P2P_MAX_CTAS ? P2P_MAX_CTAS : ctas;
        const long long chunk = ((n + ctas - 1) / ctas + 3) / 4 * 4;
        p2p_all_reduce_kernel<<<ctas, P2P_THREADS, 0, cb->stream>>>(buf, (long long)n, chunk, cb->p2p->a);
        cb->op_epoch++;
        cb->act_valid = false;
        cuda_ok(cb, cudaGetLastError(), "all_reduce (peer-to-peer)");
        return;
    }
    if (cb->nccl_aborted) {
        raise_error(cb, QR_ERR_IO, "all_reduce: another rank is gone (the NCCL group was ended)");
        return;
    }
    if (!cb->nccl_comm) {
        raise_error(cb, QR_ERR_INTERNAL, "all_reduce: the backend is in no tensor-parallel group");
        return;
    }
    const ncclResult_t r = api.all_reduce(buf, buf, (size_t)n, ncclFloat32, ncclSum, (ncclComm_t)cb->nccl_comm, cb->stream);
    cb->op_epoch++; /* buf changed outside the ops: no activation reuse across it */
    cb->act_valid = false;
    if (r != ncclSuccess) raise_error(cb, QR_ERR_INTERNAL, "NCCL all-reduce of %lld floats: %s", (long long)n, api.error_string(r));
}

static void cuda_thread_bind(qr_backend *be) { cudaSetDevice(CB(be)->device); }

/* Ends the group once (from any thread): NCCL's kernels waiting for a lost peer return; the context is failed. */
static void cuda_tp_abort(qr_backend *be) {
    cuda_backend *cb = CB(be);
    if (!cb->nccl_comm || !cb->nccl_joined || __atomic_exchange_n(&cb->nccl_aborted, true, __ATOMIC_ACQ_REL)) return;
    qr_log(QR_LOG_WARN, "tensor parallelism: a rank is gone; ending GPU %d's NCCL group", cb->device);
    api.comm_abort((ncclComm_t)cb->nccl_comm);
}

void cuda_tp_release(cuda_backend *cb) {
    /* a communicator with ranks in other processes: abort, which does not wait for the peers (destroy may, and a
     * peer may be gone already) */
    if (cb->nccl_comm && cb->nccl_joined && api.comm_abort) {
        if (!__atomic_exchange_n(&cb->nccl_aborted, true, __ATOMIC_ACQ_REL)) api.comm_abort((ncclComm_t)cb->nccl_comm);
    }
    else if (cb->nccl_comm && api.comm_destroy) api.comm_destroy((ncclComm_t)cb->nccl_comm);
    cb->nccl_comm = NULL;
    if (cb->p2p) {
        cudaFree(cb->p2p->own_alloc);
        free(cb->p2p);
        cb->p2p = NULL;
    }
}

void cuda_tp_ops(qr_backend_ops *o) {
    o->thread_bind = cuda_thread_bind;
    o->all_reduce = cuda_all_reduce;
    o->tp_abort = cuda_tp_abort;
}

extern "C" qr_status qr_backend_cuda_tp_init(qr_backend *const *bes, int32_t n, char *err, size_t err_len) {
    if (n < 2 || n > 64) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "tensor parallelism: %d GPUs", n);
    qr_status st = nccl_load(err, err_len);
    if (st != QR_OK) return st;
    int devs[64];
    ncclComm_t comms[64];
    for (int32_t r = 0; r < n; r++) {
        if (strcmp(bes[r]->name, "cuda") != 0)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "tensor parallelism: rank %d is not a CUDA backend", r);
        devs[r] = CB(bes[r])->device;
        for (int32_t q = 0; q < r; q++)
            if (devs[q] == devs[r])
                return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "tensor parallelism: ranks %d and %d are both GPU %d", q,
                               r, devs[r]);
    }
    const ncclResult_t res = api.comm_init_all(comms, (int)n, devs);
    if (res != ncclSuccess)
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "NCCL cannot join the %d GPUs: %s", n, api.error_string(res));
    for (int32_t r = 0; r < n; r++) CB(bes[r])->nccl_comm = comms[r];
    p2p_setup(bes, n);
    int v = 0;
    api.get_version(&v);
    const cuda_p2p *p2p = CB(bes[0])->p2p;
    qr_log(QR_LOG_INFO, "tensor parallelism: %d GPUs joined by NCCL %d; peer-to-peer all-reduce up to %lld floats a call",
           n, v, p2p ? p2p->a.cap : 0LL);
    return QR_OK;
}

static_assert(sizeof(ncclUniqueId) == QR_TP_NCCL_ID_BYTES_CU, "NCCL's unique id size");

extern "C" qr_status qr_backend_cuda_nccl_id(uint8_t *id, char *err, size_t err_len) {
    qr_status st = nccl_load(err, err_len);
    if (st != QR_OK) return st;
    ncclUniqueId u;
    const ncclResult_t r = api.get_unique_id(&u);
    if (r != ncclSuccess) return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "NCCL: no unique id: %s", api.error_string(r));
    memcpy(id, &u, sizeof u);
    return QR_OK;
}

/* One process's rank: NCCL only (the peer-to-peer kernel needs the peers' memory in this process). */
extern "C" qr_status qr_backend_cuda_tp_join(qr_backend *be, int32_t world, int32_t rank, const uint8_t *id, char *err,
                                             size_t err_len) {
    qr_status st = nccl_load(err, err_len);
    if (st != QR_OK) return st;
    if (strcmp(be->name, "cuda") != 0)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "tensor parallelism: rank %d is not a CUDA backend", rank);
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclComm_t comm;
    cudaSetDevice(CB(be)->device);
    const ncclResult_t r = api.comm_init_rank(&comm, (int)world, u, (int)rank);
    if (r != ncclSuccess)
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "NCCL cannot join rank %d of %d: %s", rank, world,
                       api.error_string(r));
    CB(be)->nccl_comm = comm;
    CB(be)->nccl_joined = true;
    int v = 0;
    api.get_version(&v);
    qr_log(QR_LOG_INFO, "tensor parallelism: GPU %d joined as rank %d of %d by NCCL %d", CB(be)->device, rank, world, v);
    return QR_OK;
}
