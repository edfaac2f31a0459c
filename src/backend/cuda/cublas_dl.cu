/* cublas_dl.cu — cuBLAS loaded on first use instead of at program start. Linking libcublas / libcublasLt costs every
 * run of the one binary ~216 MB of resident memory before main (their relocations), CPU-only runs and `quarrel
 * --version` included; the CUDA backend calls eight cuBLAS functions, defined here under their own names: each
 * loads libcublas.so.<major of the headers> (QUARREL_CUBLAS_LIB names another) once and forwards the call, or
 * returns CUBLAS_STATUS_NOT_INITIALIZED when the library cannot be loaded (cublasCreate then fails and the backend
 * reports it; an auto backend falls back to the CPU). */
#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#define QR_STR2(x) #x
#define QR_STR(x) QR_STR2(x)

static void *cublas_lib;
static pthread_once_t cublas_once = PTHREAD_ONCE_INIT;

static void cublas_load(void) {
    const char *path = getenv("QUARREL_CUBLAS_LIB");
    cublas_lib = dlopen(path && *path ? path : "libcublas.so." QR_STR(CUBLAS_VER_MAJOR), RTLD_NOW | RTLD_LOCAL);
    if (!cublas_lib && !(path && *path)) cublas_lib = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
}

/* The library's `name`, or NULL. */
static void *cublas_sym(const char *name) {
    pthread_once(&cublas_once, cublas_load);
    return cublas_lib ? dlsym(cublas_lib, name) : NULL;
}

#define FORWARD(name, params, args)                                      \
    extern "C" cublasStatus_t CUBLASWINAPI name params {                \
        typedef cublasStatus_t (*fn_t) params;                         \
        static fn_t fn = (fn_t)cublas_sym(#name);                      \
        return fn ? fn args : CUBLAS_STATUS_NOT_INITIALIZED;           \
    }

FORWARD(cublasCreate_v2, (cublasHandle_t * handle), (handle))
FORWARD(cublasDestroy_v2, (cublasHandle_t handle), (handle))
FORWARD(cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream), (handle, stream))
FORWARD(cublasSetWorkspace_v2, (cublasHandle_t handle, void *workspace, size_t bytes), (handle, workspace, bytes))
FORWARD(cublasGemmEx,
        (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
         const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B, cudaDataType Btype, int ldb,
         const void *beta, void *C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType, cublasGemmAlgo_t algo),
        (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc, computeType, algo))
FORWARD(cublasSgemm_v2,
        (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
         const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta, float *C, int ldc),
        (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))
FORWARD(cublasGemmBatchedEx,
        (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
         const void *alpha, const void *const Aarray[], cudaDataType Atype, int lda, const void *const Barray[],
         cudaDataType Btype, int ldb, const void *beta, void *const Carray[], cudaDataType Ctype, int ldc,
         int batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo),
        (handle, transa, transb, m, n, k, alpha, Aarray, Atype, lda, Barray, Btype, ldb, beta, Carray, Ctype, ldc,
         batchCount, computeType, algo))
FORWARD(cublasGemmStridedBatchedEx,
        (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
         const void *alpha, const void *A, cudaDataType Atype, int lda, long long int strideA, const void *B,
         cudaDataType Btype, int ldb, long long int strideB, const void *beta, void *C, cudaDataType Ctype, int ldc,
         long long int strideC, int batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo),
        (handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc,
         strideC, batchCount, computeType, algo))
