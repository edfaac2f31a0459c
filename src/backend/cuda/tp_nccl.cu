/* tp_nccl.cu — tensor parallelism on CUDA: n backends (one a GPU) joined into one NCCL group, and the all_reduce op
 * their forward passes call after each row-parallel matmul (a float sum, in place, on the backend's stream, so a
 * decode graph records it). NCCL is loaded at run time (dlopen), so the one binary runs where it is absent:
 * QUARREL_NCCL_LIB names the library, else libnccl.so.2 is looked up on the library path. */
#include <dlfcn.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
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
    const char *(*error_string)(ncclResult_t r);
    ncclResult_t (*get_version)(int *version);
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
    a.error_string = (const char *(*)(ncclResult_t))dlsym(lib, "ncclGetErrorString");
    a.get_version = (ncclResult_t(*)(int *))dlsym(lib, "ncclGetVersion");
    if (!a.comm_init_all || !a.all_reduce || !a.comm_destroy || !a.error_string || !a.get_version) {
        dlclose(lib);
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "%s lacks the NCCL functions tensor parallelism calls",
                       path && *path ? path : "libnccl.so.2");
    }
    api = a;
    return QR_OK;
}

static void cuda_all_reduce(qr_backend *be, float *buf, int64_t n) {
    cuda_backend *cb = CB(be);
    if (cb->error != QR_OK) return;
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

void cuda_tp_release(cuda_backend *cb) {
    if (cb->nccl_comm && api.comm_destroy) api.comm_destroy((ncclComm_t)cb->nccl_comm);
    cb->nccl_comm = NULL;
}

void cuda_tp_ops(qr_backend_ops *o) {
    o->thread_bind = cuda_thread_bind;
    o->all_reduce = cuda_all_reduce;
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
    int v = 0;
    api.get_version(&v);
    qr_log(QR_LOG_INFO, "tensor parallelism: %d GPUs joined by NCCL %d", n, v);
    return QR_OK;
}
