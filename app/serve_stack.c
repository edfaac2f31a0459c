/* serve_stack.c — a stack floor for `quarrel serve`'s HTTP threads, in the quarrel program only.
 *
 * Debian's CivetWeb creates its worker threads with 100 KiB stacks (its build-time USE_STACK_SIZE; no
 * run-time option). glibc carves a thread's static TLS out of the stack it is given and refuses the
 * thread (pthread_create fails, CivetWeb logs "Cannot create threads") when that TLS plus a minimum does
 * not fit. In a CUDA build the program links cuBLAS, whose libraries bring about 104 KiB of static TLS
 * (libcublasLt 92 KiB, libcublas 12 KiB), so no CivetWeb thread can start. This definition interposes
 * the libc function for this program only and raises stack requests below 1 MiB to 1 MiB; larger ones
 * pass through unchanged. It lives here, not in libquarrel: a library must not redefine libc names for
 * the programs that link it (issue 32 item 10; tests/unit/check_exports.sh checks libquarrel.so), while
 * a program may choose this for itself. (The CPU backend's attention scratch, once 128 KiB of
 * thread-local arrays, is heap memory owned by the backend now.) */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

#define SERVE_MIN_STACK ((size_t)1 << 20)

/* libc's pthread_attr_setstacksize with sizes below SERVE_MIN_STACK raised to it; returns libc's result
 * (0 when libc's function cannot be found: the thread keeps the default stack). */
int pthread_attr_setstacksize(pthread_attr_t *attr, size_t size) {
    static int (*real)(pthread_attr_t *, size_t);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "pthread_attr_setstacksize");
    if (!real) return 0;
    return real(attr, size < SERVE_MIN_STACK ? SERVE_MIN_STACK : size);
}
