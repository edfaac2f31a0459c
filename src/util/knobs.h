/* knobs.h — the library's environment switches (diagnosis and tuning knobs such as QUARREL_SIMD), in one
 * table: name, type, default, range and documentation. The environment is read once, on the first
 * access from any thread; a value that does not parse gets a warning on stderr and the default.
 * docs/knobs.md lists every knob; the CUDA backend's QUARREL_CUDA_* switches live in
 * src/backend/cuda/tune.cu (re-read at each backend creation). */
#ifndef QR_KNOBS_H
#define QR_KNOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum qr_knob {
    QR_KNOB_SIMD,          /* QUARREL_SIMD: choice qr_knob_simd */
    QR_KNOB_CPU_ISA,       /* QUARREL_CPU_ISA: choice qr_knob_cpu_isa */
    QR_KNOB_TILE,          /* QUARREL_TILE: dims, prefill GEMM tile rows x columns */
    QR_KNOB_SSM_SCAN,      /* QUARREL_SSM_SCAN: choice qr_knob_ssm_scan */
    QR_KNOB_HOST_PROF,     /* QUARREL_HOST_PROF: bool */
    QR_KNOB_GRAPH_MAX_ROWS, /* QUARREL_GRAPH_MAX_ROWS: int */
    QR_KNOB_SAMPLE_THREADS, /* QUARREL_SAMPLE_THREADS: int, 0 = auto */
    QR_KNOB_SAMPLE_TOPK,   /* QUARREL_SAMPLE_TOPK: bool */
    QR_KNOB_STEP_TOKENS,   /* QUARREL_STEP_TOKENS: int, 0 = the scheduler's default */
    QR_KNOB_SCHED_DISPATCH, /* QUARREL_SCHED_DISPATCH: int, -1 = by the backend */
    QR_KNOB_OLLAMA_MODELS, /* OLLAMA_MODELS: string, "" = $HOME/.ollama/models */
    QR_KNOB_MODELS_DIR,    /* QUARREL_MODELS_DIR: string, "" = $HOME/.cache/quarrel/models */
    QR_KNOB_HOME,          /* HOME: string */
    QR_KNOB_FLIGHT_KEY,    /* QUARREL_FLIGHT_KEY: string, "" = none */
    QR_KNOB_TP_TIMEOUT,    /* QUARREL_TP_TIMEOUT: int seconds */
    QR_KNOB_CPU_REPACK,    /* QUARREL_CPU_REPACK: bool */
    QR_KNOB_CPU_PREFETCH,  /* QUARREL_CPU_PREFETCH: int bytes, 0 = none, -1 = by the CPU */
    QR_KNOB_SPEC_TRACE,    /* QUARREL_SPEC_TRACE: bool */
    QR_KNOB_COUNT
} qr_knob;

/* Values of the choice knobs (positions in their choice lists). */
enum qr_knob_simd { QR_SIMD_AUTO = 0, QR_SIMD_SCALAR = 1 };
enum qr_knob_cpu_isa { QR_CPU_ISA_AUTO = 0, QR_CPU_ISA_AVX512 = 1, QR_CPU_ISA_AVX2 = 2, QR_CPU_ISA_SCALAR = 3 };
enum qr_knob_ssm_scan { QR_SSM_SCAN_REC = 0, QR_SSM_SCAN_SSD = 1, QR_SSM_SCAN_RECURRENT = 2 /* = REC */ };

/* Largest QUARREL_TILE dimension; equals quant.h's QR_TILE_MAX (backend_cpu.c asserts it). */
#define QR_KNOB_TILE_MAX 4

typedef enum qr_knob_type {
    QR_KNOB_BOOL,   /* 1 true yes on / 0 false no off (any case) */
    QR_KNOB_INT,    /* a decimal integer in [lo, hi] */
    QR_KNOB_CHOICE, /* one of the names in `choices` ('|'-separated); the value is its position */
    QR_KNOB_DIMS,   /* "AxB", A and B in [lo, hi] */
    QR_KNOB_STRING, /* any text */
} qr_knob_type;

typedef struct qr_knob_def {
    const char *name;    /* the environment variable */
    qr_knob_type type;
    const char *def;     /* the default, written as a value of the variable ("" for STRING: none) */
    int32_t lo, hi;      /* INT, DIMS: accepted range */
    const char *choices; /* CHOICE: "a|b|c" */
    const char *read_by; /* the code that reads it */
    const char *doc;     /* what it does */
} qr_knob_def;

/* A parsed value. */
typedef struct qr_knob_value {
    int32_t i[2];  /* BOOL 0/1, INT the number, CHOICE the position; DIMS [A, B] */
    const char *s; /* STRING: the text (NUL-terminated, lives as long as the process); else NULL */
} qr_knob_value;

/* The table, indexed by qr_knob. */
extern const qr_knob_def qr_knob_defs[QR_KNOB_COUNT];

/* Parses text as a value of knob d into *out. text NULL or "" is "unset": the default, true. A value
 * that does not parse leaves *out at the default and returns false with the reason in why. The
 * STRING value points into text (or d->def). */
bool qr_knob_parse(const qr_knob_def *d, const char *text, qr_knob_value *out, char *why, size_t why_len);

/* The current value of knob k (the environment as it was at the first access of any knob). */
int32_t qr_knob_int(qr_knob k);                            /* BOOL, INT, CHOICE */
void qr_knob_dims(qr_knob k, int32_t *a, int32_t *b);      /* DIMS */
const char *qr_knob_str(qr_knob k);                        /* STRING; never NULL */
/* True when the environment set knob k (to a valid value): callers may keep their own default otherwise. */
bool qr_knob_is_set(qr_knob k);

#endif
