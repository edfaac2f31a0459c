/* tp_net.c — tensor parallelism across processes (and hosts): the ranks meet over TCP at one address.
 *
 * Rank 0 (the driver: the process that runs run / bench / serve) listens at --tp-addr; every other rank (a worker
 * process, `quarrel worker ... --tp-rank R`) connects to it twice: a control connection (the driver's commands, the
 * worker's replies: context set-up, each pass's batch plan, its logits columns back) and a data connection (the
 * all-reduce of CPU ranks). Each connection opens with a hello (world, rank, backend, a fingerprint of the model's
 * tensors); the driver checks every one (the world, the rank, the backend and the model must match; a rank twice is
 * refused) and answers on the control connection with a welcome carrying its verdict and, for CUDA ranks, the NCCL
 * unique id every rank then joins with (ncclCommInitRank: NCCL's own transports, NVLink or the network).
 *
 * Messages are a fixed header (type, payload bytes) and a payload; a reply is (status, message bytes, payload
 * bytes), the message, then the payload. Every integer is in the host's byte order: the ranks run the same build.
 * Waits are bounded by QUARREL_TP_TIMEOUT (connect, hello, a reply, an all-reduce), except a worker's wait for the
 * next command (a server may idle for hours). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include "model/model.h"
#include "util/knobs.h"
#include "util/util.h"

#define TP_MAGIC 0x50545251u /* "QRTP" */
#define TP_VERSION 1u

typedef struct hello {
    uint32_t magic, version, world, rank, backend, channel; /* channel: 0 control, 1 data */
    uint64_t fingerprint;
} hello;

typedef struct welcome {
    uint32_t magic;
    int32_t status;
    char msg[256];
    uint8_t nccl_id[QR_TP_NCCL_ID_BYTES];
} welcome;

typedef struct msg_hdr {
    uint32_t type;
    uint32_t pad;
    uint64_t bytes;
} msg_hdr;

typedef struct reply_hdr {
    int32_t status;
    uint32_t msg_bytes;
    uint64_t bytes;
} reply_hdr;

struct qr_tp_net {
    int32_t world, rank;
    int ctl[QR_TP_MAX];  /* the driver: rank r's control connection (r >= 1); a worker: ctl[0], to the driver */
    int data[QR_TP_MAX]; /* the same for the data connections */
    bool broken;         /* an all-reduce failed: the ranks are out of step, every later one fails at once */
    char addr[256];
    float *tmp;          /* the driver's receive buffer of an all-reduce */
    size_t tmp_cap;
    void *rbuf[QR_TP_MAX]; /* the driver: rank r's last reply payload; a worker: rbuf[0], the last command's */
    size_t rbuf_cap[QR_TP_MAX];
};

static double timeout_s(void) { return (double)qr_knob_int(QR_KNOB_TP_TIMEOUT); }

/* Splits "host:port" (host may be empty = every address, a name, an IPv4 or [IPv6] literal). */
static qr_status parse_addr(const char *addr, char *host, size_t host_len, char *port, size_t port_len, char *err,
                            size_t err_len) {
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    if (!colon || !colon[1])
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "--tp-addr '%s': expected HOST:PORT", addr ? addr : "");
    char *end = NULL;
    errno = 0;
    const long p = strtol(colon + 1, &end, 10);
    if (errno || *end || p < 1 || p > 65535)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "--tp-addr '%s': port must be 1..65535", addr);
    const char *h = addr;
    size_t hn = (size_t)(colon - addr);
    if (hn >= 2 && h[0] == '[' && h[hn - 1] == ']') h++, hn -= 2;
    if (hn >= host_len) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "--tp-addr '%s': host name too long", addr);
    memcpy(host, h, hn);
    host[hn] = 0;
    snprintf(port, port_len, "%ld", p);
    return QR_OK;
}

static void set_timeout(int fd, double s) {
    struct timeval tv = {.tv_sec = (time_t)s, .tv_usec = (suseconds_t)((s - (double)(time_t)s) * 1e6)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static void tune_socket(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int buf = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

/* Whole buffers, or false (a closed peer, a timeout, an error: errno, 0 for a closed peer). */
static bool send_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        const ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}
static bool recv_all(int fd, void *p, size_t n) {
    char *c = p;
    while (n > 0) {
        const ssize_t r = recv(fd, c, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) errno = 0;
        if (r <= 0) return false;
        c += r;
        n -= (size_t)r;
    }
    return true;
}
static bool sendv_all(int fd, const struct iovec *iov, int n) {
    for (int i = 0; i < n; i++)
        if (iov[i].iov_len && !send_all(fd, iov[i].iov_base, iov[i].iov_len)) return false;
    return true;
}
static const char *io_why(void) { return errno ? strerror(errno) : "the connection was closed"; }

static bool grow(void **buf, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    void *nb = realloc(*buf, need);
    if (!nb) return false;
    *buf = nb;
    *cap = need;
    return true;
}

static qr_tp_net *net_new(int32_t world, int32_t rank, const char *addr) {
    qr_tp_net *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->world = world;
    n->rank = rank;
    for (int i = 0; i < QR_TP_MAX; i++) n->ctl[i] = n->data[i] = -1;
    snprintf(n->addr, sizeof n->addr, "%s", addr);
    return n;
}

void qr_tp_net_free(qr_tp_net *n) {
    if (!n) return;
    for (int i = 0; i < QR_TP_MAX; i++) {
        if (n->ctl[i] >= 0) close(n->ctl[i]);
        if (n->data[i] >= 0) close(n->data[i]);
        free(n->rbuf[i]);
    }
    free(n->tmp);
    free(n);
}


/* ---- the driver ---- */

qr_status qr_tp_net_listen(const char *addr, int32_t world, uint32_t backend, uint64_t fingerprint,
                           const uint8_t *nccl_id, qr_tp_net **out, char *err, size_t err_len) {
    *out = NULL;
    char host[256], port[16];
    qr_status st = parse_addr(addr, host, sizeof host, port, sizeof port, err, err_len);
    if (st != QR_OK) return st;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    const int gai = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai);
    if (gai) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "--tp-addr '%s': %s", addr, gai_strerror(gai));
    int lfd = -1, e = 0;
    for (struct addrinfo *a = ai; a && lfd < 0; a = a->ai_next) {
        lfd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (lfd < 0) continue;
        int one = 1;
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(lfd, a->ai_addr, a->ai_addrlen) != 0 || listen(lfd, 2 * QR_TP_MAX) != 0) {
            e = errno;
            close(lfd);
            lfd = -1;
        }
    }
    freeaddrinfo(ai);
    if (lfd < 0)
        return qr_errf(err, err_len, QR_ERR_IO, "tensor parallelism: cannot listen at %s: %s", addr,
                       e ? strerror(e) : "no address");
    qr_tp_net *n = net_new(world, 0, addr);
    if (!n) {
        close(lfd);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    }
    const double t_end = qr_time_s() + timeout_s();
    int32_t joined = 0; /* connections (two a rank) */
    qr_log(QR_LOG_INFO, "tensor parallelism: waiting at %s for ranks 1..%d", addr, world - 1);
    while (st == QR_OK && joined < 2 * (world - 1)) {
        const double left = t_end - qr_time_s();
        struct pollfd pf = {.fd = lfd, .events = POLLIN};
        const int pr = left > 0 ? poll(&pf, 1, (int)(left * 1000) + 1) : 0;
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) {
            char missing[128] = "";
            size_t len = 0;
            for (int32_t r = 1; r < world && len + 8 < sizeof missing; r++)
                if (n->ctl[r] < 0 || n->data[r] < 0) len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d", len ? ", " : "", r);
            st = qr_errf(err, err_len, QR_ERR_IO, "tensor parallelism: waited %.0f s at %s for rank%s %s (start "
                         "`quarrel worker -m MODEL --tp %d --tp-rank R --tp-addr %s` on each; QUARREL_TP_TIMEOUT)",
                         timeout_s(), addr, strchr(missing, ',') ? "s" : "", missing, world, addr);
            break;
        }
        struct sockaddr_storage peer;
        socklen_t pl = sizeof peer;
        const int fd = accept4(lfd, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC);
        if (fd < 0) continue;
        char who[128] = "?";
        getnameinfo((struct sockaddr *)&peer, pl, who, sizeof who, NULL, 0, NI_NUMERICHOST);
        tune_socket(fd);
        set_timeout(fd, 10.0);
        hello h;
        if (!recv_all(fd, &h, sizeof h) || h.magic != TP_MAGIC) { /* not one of ours (a port scan): ignore it */
            close(fd);
            continue;
        }
        const char *why = NULL;
        char buf[256];
        if (h.version != TP_VERSION) why = "a different version of quarrel";
        else if ((int32_t)h.world != world)
            snprintf(buf, sizeof buf, "it was started with --tp %u, this driver with --tp %d", h.world, world), why = buf;
        else if (h.rank < 1 || (int32_t)h.rank >= world)
            snprintf(buf, sizeof buf, "its rank %u is outside 1..%d", h.rank, world - 1), why = buf;
        else if (h.backend != backend)
            snprintf(buf, sizeof buf, "it runs on the %s, this driver on the %s", h.backend ? "GPU (cuda)" : "CPU",
                     backend ? "GPU (cuda)" : "CPU"), why = buf;
        else if (h.fingerprint != fingerprint) why = "it loaded a different model file (tensors differ)";
        else if (h.channel > 1) why = "a bad channel";
        else if ((h.channel ? n->data : n->ctl)[h.rank] >= 0)
            snprintf(buf, sizeof buf, "rank %u joined twice", h.rank), why = buf;
        if (why) {
            welcome w = {.magic = TP_MAGIC, .status = QR_ERR_INVALID_ARG};
            snprintf(w.msg, sizeof w.msg, "the driver at %.64s refused rank %u: %.140s", addr, h.rank, why);
            send_all(fd, &w, sizeof w);
            close(fd);
            st = qr_errf(err, err_len, QR_ERR_INVALID_ARG, "tensor parallelism: refused rank %u from %s: %s", h.rank,
                         who, why);
            break;
        }
        (h.channel ? n->data : n->ctl)[h.rank] = fd;
        joined++;
        qr_log(QR_LOG_INFO, "tensor parallelism: rank %u joined from %s (%s)", h.rank, who, h.channel ? "data" : "control");
    }
    close(lfd);
    /* the verdict to every control connection */
    welcome w = {.magic = TP_MAGIC, .status = st};
    if (st != QR_OK) snprintf(w.msg, sizeof w.msg, "the driver at %.64s gave up: %.140s", addr, err ? err : "");
    if (nccl_id) memcpy(w.nccl_id, nccl_id, sizeof w.nccl_id);
    for (int32_t r = 1; r < world; r++) {
        if (n->ctl[r] >= 0 && !send_all(n->ctl[r], &w, sizeof w) && st == QR_OK)
            st = qr_errf(err, err_len, QR_ERR_IO, "tensor parallelism: rank %d: %s", r, io_why());
        if (n->ctl[r] >= 0) set_timeout(n->ctl[r], timeout_s());
        if (n->data[r] >= 0) set_timeout(n->data[r], timeout_s());
    }
    if (st != QR_OK) {
        qr_tp_net_free(n);
        return st;
    }
    *out = n;
    return QR_OK;
}

/* One command to rank r and its reply: the payload into the net's buffer for r (*reply, *reply_len). A failed
 * exchange is QR_ERR_IO naming the rank; a rank's own error comes back with its status and message. */
qr_status qr_tp_net_call(qr_tp_net *n, int32_t r, uint32_t type, const struct iovec *parts, int n_parts,
                         const void **reply, size_t *reply_len, char *err, size_t err_len) {
    if (reply) *reply = NULL;
    if (reply_len) *reply_len = 0;
    uint64_t bytes = 0;
    for (int i = 0; i < n_parts; i++) bytes += parts[i].iov_len;
    const msg_hdr h = {.type = type, .bytes = bytes};
    reply_hdr rh;
    if (n->ctl[r] < 0 || !send_all(n->ctl[r], &h, sizeof h) || !sendv_all(n->ctl[r], parts, n_parts) ||
        !recv_all(n->ctl[r], &rh, sizeof rh))
        return qr_errf(err, err_len, QR_ERR_IO, "tensor parallelism: rank %d (at %s): %s", r, n->addr, io_why());
    char msg[512] = "";
    const size_t ml = rh.msg_bytes < sizeof msg ? rh.msg_bytes : sizeof msg - 1;
    if (!recv_all(n->ctl[r], msg, ml) || !grow(&n->rbuf[r], &n->rbuf_cap[r], rh.bytes ? rh.bytes : 1))
        return qr_errf(err, err_len, QR_ERR_IO, "tensor parallelism: rank %d: %s", r, io_why());
    msg[ml] = 0;
    for (size_t skip = rh.msg_bytes - ml; skip > 0;) { /* an over-long message: drop its tail */
        char sink[256];
        const size_t k = skip < sizeof sink ? skip : sizeof sink;
        if (!recv_all(n->ctl[r], sink, k)) return qr_errf(err, err_len, QR_ERR_IO, "tensor parallelism: rank %d: %s", r, io_why());
        skip -= k;
    }
    if (rh.bytes && !recv_all(n->ctl[r], n->rbuf[r], rh.bytes))
        return qr_errf(err, err_len, QR_ERR_IO, "tensor parallelism: rank %d: %s", r, io_why());
    if (reply) *reply = n->rbuf[r];
    if (reply_len) *reply_len = rh.bytes;
    if (rh.status != QR_OK) return qr_errf(err, err_len, (qr_status)rh.status, "rank %d: %s", r, msg);
    return QR_OK;
}

/* ---- a worker ---- */

qr_status qr_tp_net_connect(const char *addr, int32_t world, int32_t rank, uint32_t backend, uint64_t fingerprint,
                            uint8_t *nccl_id, qr_tp_net **out, char *err, size_t err_len) {
    *out = NULL;
    char host[256], port[16];
    qr_status st = parse_addr(addr, host, sizeof host, port, sizeof port, err, err_len);
    if (st != QR_OK) return st;
    if (!host[0]) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "--tp-addr '%s': a worker needs the driver's host", addr);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    const int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "--tp-addr '%s': %s", addr, gai_strerror(gai));
    qr_tp_net *n = net_new(world, rank, addr);
    if (!n) {
        freeaddrinfo(ai);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    }
    const double t_end = qr_time_s() + timeout_s();
    int e = 0;
    for (int ch = 0; ch < 2 && st == QR_OK; ch++) {
        int fd = -1;
        while (fd < 0) { /* the driver may not listen yet: try again until the timeout */
            for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
                fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
                if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
                    e = errno;
                    close(fd);
                    fd = -1;
                }
            }
            if (fd >= 0 || qr_time_s() > t_end) break;
            if (ch == 1) { /* the driver may have answered the control connection already (a refusal): read it */
                struct pollfd pf = {.fd = n->ctl[0], .events = POLLIN};
                if (poll(&pf, 1, 0) > 0) break;
            }
            usleep(200 * 1000);
        }
        if (fd < 0 && ch == 1) { /* no data connection: the welcome on the control connection says why */
            struct pollfd pf = {.fd = n->ctl[0], .events = POLLIN};
            if (poll(&pf, 1, 0) > 0) break;
        }
        if (fd < 0) {
            st = qr_errf(err, err_len, QR_ERR_IO, "tensor parallelism: no driver at %s after %.0f s: %s "
                         "(QUARREL_TP_TIMEOUT)", addr, timeout_s(), e ? strerror(e) : "unreachable");
            break;
        }
        tune_socket(fd);
        set_timeout(fd, timeout_s());
        const hello h = {.magic = TP_MAGIC, .version = TP_VERSION, .world = (uint32_t)world, .rank = (uint32_t)rank,
                         .backend = backend, .channel = (uint32_t)ch, .fingerprint = fingerprint};
        if (!send_all(fd, &h, sizeof h)) st = qr_errf(err, err_len, QR_ERR_IO, "tensor parallelism: %s: %s", addr, io_why());
        (ch ? n->data : n->ctl)[0] = fd;
    }
    freeaddrinfo(ai);
    welcome w;
    if (st == QR_OK) {
        /* the driver answers once every rank has joined: wait as long as it waits */
        set_timeout(n->ctl[0], 2 * timeout_s() + 10.0);
        if (!recv_all(n->ctl[0], &w, sizeof w) || w.magic != TP_MAGIC)
            st = qr_errf(err, err_len, QR_ERR_IO, "tensor parallelism: the driver at %s: %s", addr,
                         errno ? strerror(errno) : "closed the connection (it refused this rank or failed)");
        else if (w.status != QR_OK) st = qr_errf(err, err_len, (qr_status)w.status, "tensor parallelism: %.255s", w.msg);
    }
    if (st != QR_OK) {
        qr_tp_net_free(n);
        return st;
    }
    set_timeout(n->ctl[0], 0.0); /* the next command may come hours later */
    if (nccl_id) memcpy(nccl_id, w.nccl_id, sizeof w.nccl_id);
    *out = n;
    return QR_OK;
}

qr_status qr_tp_net_next(qr_tp_net *n, uint32_t *type, const void **payload, size_t *bytes) {
    msg_hdr h;
    if (!recv_all(n->ctl[0], &h, sizeof h)) return errno ? QR_ERR_IO : QR_ERR_NOT_FOUND; /* closed: the driver left */
    if (!grow(&n->rbuf[0], &n->rbuf_cap[0], h.bytes ? h.bytes : 1)) return QR_ERR_NOMEM;
    if (h.bytes && !recv_all(n->ctl[0], n->rbuf[0], h.bytes)) return QR_ERR_IO;
    *type = h.type;
    *payload = n->rbuf[0];
    *bytes = h.bytes;
    return QR_OK;
}

bool qr_tp_net_reply(qr_tp_net *n, qr_status st, const char *msg, const void *payload, size_t bytes) {
    const size_t ml = st != QR_OK && msg ? strlen(msg) : 0;
    const reply_hdr h = {.status = st, .msg_bytes = (uint32_t)ml, .bytes = payload ? bytes : 0};
    return send_all(n->ctl[0], &h, sizeof h) && (!ml || send_all(n->ctl[0], msg, ml)) &&
           (!h.bytes || send_all(n->ctl[0], payload, h.bytes));
}

bool qr_tp_net_peer_gone(qr_tp_net *n, int ms) {
    struct pollfd pf = {.fd = n->ctl[0], .events = POLLRDHUP};
    return poll(&pf, 1, ms) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* ---- the all-reduce of CPU ranks ---- */

bool qr_tp_net_all_reduce(qr_tp_net *n, float *buf, int64_t count, char *err, size_t err_len) {
    if (n->broken) {
        qr_errf(err, err_len, QR_ERR_IO, "tensor parallelism: an earlier all-reduce failed");
        return false;
    }
    const size_t bytes = (size_t)count * sizeof(float);
    bool ok = true;
    int32_t bad = -1;
    if (n->rank == 0) { /* receive every rank's buffer, sum in rank order (as one process's ranks do), send back */
        if (!grow((void **)&n->tmp, &n->tmp_cap, bytes)) {
            n->broken = true;
            qr_errf(err, err_len, QR_ERR_NOMEM, "tensor parallelism: out of memory");
            return false;
        }
        for (int32_t r = 1; r < n->world && ok; r++) {
            ok = recv_all(n->data[r], n->tmp, bytes);
            if (!ok) {
                bad = r;
                break;
            }
            for (int64_t i = 0; i < count; i++) buf[i] += n->tmp[i];
        }
        for (int32_t r = 1; r < n->world && ok; r++)
            if (!(ok = send_all(n->data[r], buf, bytes))) bad = r;
    } else {
        ok = send_all(n->data[0], buf, bytes) && recv_all(n->data[0], buf, bytes);
        bad = 0;
    }
    if (!ok) {
        n->broken = true;
        qr_errf(err, err_len, QR_ERR_IO, "tensor parallelism: all-reduce with rank %d (%s): %s", bad, n->addr, io_why());
        /* the others may wait for this rank's part of the sum: end their waits now, not after the timeout */
        for (int32_t r = 0; r < QR_TP_MAX; r++)
            if (n->data[r] >= 0) shutdown(n->data[r], SHUT_RDWR);
    }
    return ok;
}
