/*
 * bootstorm-cni's compiled front end: CNI ADD without a Python interpreter.
 *
 * Why: every sandbox's ADD execs the plugin, on its critical path. The Python
 * plugin costs ~46 ms of CPU to start (~8 ms with `python -I -S`) against the
 * Go bridge plugin's ~4 ms; 100 of them at once on a 2-core node queue behind
 * each other (issue 34: median ADD 4.2x the bridge's alone). This file does a
 * plain ADD in a few hundred microseconds of its own CPU.
 *
 * Scope (the fast path): CNI_COMMAND=ADD, an ASCII network config that is
 * strict JSON without duplicate keys, cniVersion 0.3.0..1.1.0, a plain
 * `http://IPv4[:port][/path]` agent, a token file, timeout_s, wait_s, stage,
 * failure_policy, log_file, state_dir and a delegate found in CNI_PATH; no
 * `pool`, no `ca_file`/https, no hostnames. For those it does what the Python
 * plugin's ADD does (validation/cni_plugin/_main.py): take the stage's permit
 * (bounded by timeout_s + wait_s; fail open or closed with the same CNI error
 * codes and messages), exec the delegate with its config built as
 * _delegate.delegate_config builds it, renew the lease at a third of its TTL
 * while the delegate runs, release it in every path (SIGTERM included: the
 * delegate is killed and the answer is code 11), print the delegate's stdout
 * byte for byte and exit with its status, and append the same JSON line to
 * log_file.
 *
 * Everything else -- other commands, a pooled config, https, anything this
 * file does not fully validate -- is handed to the Python plugin with the
 * same stdin bytes and environment (execv of `python -I -S`, the package's
 * directory put on sys.path), before any side effect. So the Python plugin
 * stays the one full implementation and the one place a config error is
 * reported: when in doubt, fall back.
 *
 * Built by `bootstorm agent install-cni` (validation/cni_plugin/install.py)
 * with -DBOOTSTORM_PYTHON="..." and -DBOOTSTORM_PYPATH="...". libc only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#ifndef BOOTSTORM_PYTHON
#error "build with -DBOOTSTORM_PYTHON='\"/path/to/python\"' (bootstorm agent install-cni)"
#endif
#ifndef BOOTSTORM_PYPATH
#error "build with -DBOOTSTORM_PYPATH='\"/dir/holding/cni_plugin\"' (bootstorm agent install-cni)"
#endif

extern char **environ;

/* Limits, as the Python plugin's where it has them. */
#define MAX_STDIN (1 << 20)          /* _main.MAX_STDIN_BYTES */
#define MAX_ANSWER (1 << 20)         /* _agent.MAX_ANSWER_BYTES */
#define MAX_TOKEN 4096               /* _config.MAX_TOKEN_BYTES */
#define MAX_OUT (16 << 20)           /* a delegate's stdout kept (a result is a few KiB) */
#define MAX_ERR (1 << 20)            /* a delegate's stderr kept */
#define MAX_NODES 65536              /* JSON values in one document: beyond, fall back */
#define MAX_DEPTH 64                 /* JSON nesting: beyond, fall back */
#define MAX_KEYS 1024                /* members of one object checked for duplicates */
#define MAX_EVENTS 16

static const char *const VERSIONS[] = {"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0", NULL};
static const char *const SPEC_KEYS[] = {"cniVersion", "name", "type", "args", "capabilities",
                                        "runtimeConfig", "prevResult", "dns", NULL};
static const char *const OWN_KEYS[] = {"agent", "stage", "failure_policy", "delegate",
                                       "log_file", "state_dir", NULL}; /* "pool": Python */
static const char *const AGENT_KEYS[] = {"url", "token_file", "timeout_s", "wait_s", NULL};

/* ---- small utilities ---------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* Python's time.monotonic() */
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A growable byte buffer with a ceiling; `over` once something did not fit. */
struct buf {
    char *p;
    size_t len, cap, max;
    int over;
};

static int buf_add(struct buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->max) {
        b->over = 1;
        return -1;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        if (cap > b->max) cap = b->max;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->over = 1;
            return -1;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

static void buf_s(struct buf *b, const char *s) { buf_add(b, s, strlen(s)); }

static void buf_f(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_f(struct buf *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    buf_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* write(2) until done: EINTR and partial writes. -1 on a real error. */
static int write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* ---- signals -------------------------------------------------------------
 * SIGTERM (the runtime cancelling the ADD) stays blocked except inside
 * ppoll(), which unblocks it atomically: a wait is woken, and a signal can
 * never slip in between "checked the flag" and "went to sleep". */

static volatile sig_atomic_t g_term;
static sigset_t g_orig_mask;  /* the mask we were started with (children get it back) */
static sigset_t g_wait_mask;  /* inside interruptible waits: SIGTERM unblocked */
static sigset_t g_block_mask; /* inside waits that must finish (release): blocked */

static void on_term(int sig) {
    (void)sig;
    g_term = 1;
}

/* ---- JSON ----------------------------------------------------------------
 * A strict RFC 8259 parser into a flat node array (spans into the input), as
 * strict as Python's json.loads or stricter: NaN/Infinity, non-ASCII bytes
 * (`ascii_only`), duplicate keys or keys with escapes are refused, and a
 * refused config goes to the Python plugin. */

enum { J_OBJ, J_ARR, J_STR, J_NUM, J_TRUE, J_FALSE, J_NULL };

struct node {
    int type;
    int start, len; /* the value's text; a string's includes its quotes */
    int child;      /* first child (object: key, value, key, value, ...) */
    int next;       /* next sibling */
};

struct json {
    const char *s;
    int n, pos;
    struct node *nodes;
    int count, max;
    int ascii_only;
    int strict_keys; /* refuse duplicate keys and keys with escapes */
};

static int j_new(struct json *j, int type, int start) {
    if (j->count >= j->max) return -1;
    struct node *nd = &j->nodes[j->count];
    nd->type = type;
    nd->start = start;
    nd->len = 0;
    nd->child = nd->next = -1;
    return j->count++;
}

static void j_ws(struct json *j) {
    while (j->pos < j->n) {
        char c = j->s[j->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        j->pos++;
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int j_string(struct json *j) {
    int id = j_new(j, J_STR, j->pos);
    if (id < 0) return -1;
    j->pos++; /* the opening quote */
    while (j->pos < j->n) {
        unsigned char c = (unsigned char)j->s[j->pos];
        if (c == '"') {
            j->pos++;
            j->nodes[id].len = j->pos - j->nodes[id].start;
            return id;
        }
        if (c < 0x20) return -1; /* json.loads(strict=True) refuses control characters */
        if (c >= 0x80 && j->ascii_only) return -1;
        if (c == '\\') {
            if (j->pos + 1 >= j->n) return -1;
            char e = j->s[j->pos + 1];
            if (e == 'u') {
                if (j->pos + 5 >= j->n) return -1;
                for (int k = 2; k < 6; k++)
                    if (hexval(j->s[j->pos + k]) < 0) return -1;
                j->pos += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == '\0') return -1;
            j->pos += 2;
            continue;
        }
        j->pos++;
    }
    return -1;
}

static int isdig(char c) { return c >= '0' && c <= '9'; }

static int j_number(struct json *j) {
    int id = j_new(j, J_NUM, j->pos);
    if (id < 0) return -1;
    const char *s = j->s;
    int p = j->pos, n = j->n;
    if (p < n && s[p] == '-') p++;
    if (p < n && s[p] == '0') p++;
    else if (p < n && isdig(s[p])) while (p < n && isdig(s[p])) p++;
    else return -1;
    if (p < n && s[p] == '.') {
        p++;
        if (!(p < n && isdig(s[p]))) return -1;
        while (p < n && isdig(s[p])) p++;
    }
    if (p < n && (s[p] == 'e' || s[p] == 'E')) {
        p++;
        if (p < n && (s[p] == '+' || s[p] == '-')) p++;
        if (!(p < n && isdig(s[p]))) return -1;
        while (p < n && isdig(s[p])) p++;
    }
    j->nodes[id].len = p - j->pos;
    j->pos = p;
    return id;
}

static int span_eq(const struct json *j, int a, int b) {
    const struct node *x = &j->nodes[a], *y = &j->nodes[b];
    return x->len == y->len && memcmp(j->s + x->start, j->s + y->start, (size_t)x->len) == 0;
}

static int j_value(struct json *j, int depth);

static int j_container(struct json *j, int depth, int is_obj) {
    int id = j_new(j, is_obj ? J_OBJ : J_ARR, j->pos);
    if (id < 0) return -1;
    char close = is_obj ? '}' : ']';
    j->pos++;
    j_ws(j);
    int last = -1, keys[MAX_KEYS], nkeys = 0;
    if (j->pos < j->n && j->s[j->pos] == close) {
        j->pos++;
        j->nodes[id].len = j->pos - j->nodes[id].start;
        return id;
    }
    for (;;) {
        j_ws(j);
        if (is_obj) {
            if (j->pos >= j->n || j->s[j->pos] != '"') return -1;
            int k = j_string(j);
            if (k < 0) return -1;
            if (j->strict_keys) {
                const struct node *kn = &j->nodes[k];
                if (memchr(j->s + kn->start, '\\', (size_t)kn->len)) return -1;
                if (nkeys >= MAX_KEYS) return -1;
                for (int i = 0; i < nkeys; i++)
                    if (span_eq(j, keys[i], k)) return -1; /* Python: last wins; we: refuse */
                keys[nkeys++] = k;
            }
            if (last < 0) j->nodes[id].child = k;
            else j->nodes[last].next = k;
            last = k;
            j_ws(j);
            if (j->pos >= j->n || j->s[j->pos] != ':') return -1;
            j->pos++;
            j_ws(j);
        }
        int v = j_value(j, depth + 1);
        if (v < 0) return -1;
        if (last < 0) j->nodes[id].child = v;
        else j->nodes[last].next = v;
        last = v;
        j_ws(j);
        if (j->pos >= j->n) return -1;
        if (j->s[j->pos] == ',') {
            j->pos++;
            continue;
        }
        if (j->s[j->pos] != close) return -1;
        j->pos++;
        j->nodes[id].len = j->pos - j->nodes[id].start;
        return id;
    }
}

static int j_value(struct json *j, int depth) {
    if (depth > MAX_DEPTH) return -1;
    j_ws(j);
    if (j->pos >= j->n) return -1;
    char c = j->s[j->pos];
    if (c == '{') return j_container(j, depth, 1);
    if (c == '[') return j_container(j, depth, 0);
    if (c == '"') return j_string(j);
    if (c == '-' || isdig(c)) return j_number(j);
    static const struct { const char *word; int type; } words[] = {
        {"true", J_TRUE}, {"false", J_FALSE}, {"null", J_NULL}};
    for (size_t i = 0; i < 3; i++) {
        size_t w = strlen(words[i].word);
        if ((size_t)(j->n - j->pos) >= w && memcmp(j->s + j->pos, words[i].word, w) == 0) {
            int id = j_new(j, words[i].type, j->pos);
            if (id < 0) return -1;
            j->nodes[id].len = (int)w;
            j->pos += (int)w;
            return id;
        }
    }
    return -1;
}

/* The whole document; its root node (0) or -1. */
static int j_parse(struct json *j, const char *s, size_t n, struct node *nodes, int max,
                   int ascii_only, int strict_keys) {
    if (n > (size_t)INT32_MAX / 2) return -1;
    j->s = s;
    j->n = (int)n;
    j->pos = 0;
    j->nodes = nodes;
    j->count = 0;
    j->max = max;
    j->ascii_only = ascii_only;
    j->strict_keys = strict_keys;
    int root = j_value(j, 0);
    if (root < 0) return -1;
    j_ws(j);
    return j->pos == j->n ? root : -1;
}

/* The value of `key` in object `obj` (keys compared as written), or -1. */
static int j_get(const struct json *j, int obj, const char *key) {
    if (obj < 0 || j->nodes[obj].type != J_OBJ) return -1;
    size_t kl = strlen(key);
    for (int k = j->nodes[obj].child; k >= 0; k = j->nodes[j->nodes[k].next].next) {
        const struct node *kn = &j->nodes[k];
        if ((size_t)kn->len == kl + 2 && memcmp(j->s + kn->start + 1, key, kl) == 0)
            return kn->next;
    }
    return -1;
}

/* A string value without escapes, as a NUL-terminated copy in `out`; -1 if
 * not one (escaped strings in fields we interpret go to Python). */
static int j_plain(const struct json *j, int v, char *out, size_t cap) {
    if (v < 0 || j->nodes[v].type != J_STR) return -1;
    const char *p = j->s + j->nodes[v].start + 1;
    size_t n = (size_t)j->nodes[v].len - 2;
    if (n + 1 > cap || memchr(p, '\\', n)) return -1;
    memcpy(out, p, n);
    out[n] = '\0';
    return 0;
}

static int in_list(const char *s, size_t n, const char *const *list) {
    for (; *list; list++)
        if (strlen(*list) == n && memcmp(*list, s, n) == 0) return 1;
    return 0;
}

/* A string's value as UTF-8 (escapes decoded; a lone surrogate as its
 * 3-byte form, which json_str() turns back into the same \\u escape). */
static void j_decode(const struct json *j, int v, struct buf *out) {
    const char *p = j->s + j->nodes[v].start + 1, *end = j->s + j->nodes[v].start +
                                                        j->nodes[v].len - 1;
    while (p < end) {
        if (*p != '\\') {
            buf_add(out, p++, 1);
            continue;
        }
        char e = p[1];
        p += 2;
        const char *simple = strchr("\"\"\\\\//b\bf\fn\nr\rt\t", e);
        if (e != 'u' && simple != NULL) {
            buf_add(out, simple + 1, 1);
            continue;
        }
        unsigned cp = 0;
        for (int k = 0; k < 4; k++) cp = cp * 16 + (unsigned)hexval(p[k]);
        p += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
            unsigned lo = 0;
            for (int k = 2; k < 6; k++) lo = lo * 16 + (unsigned)hexval(p[k]);
            if (lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
        }
        char u[4];
        size_t n;
        if (cp < 0x80) u[0] = (char)cp, n = 1;
        else if (cp < 0x800) u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
        else if (cp < 0x10000)
            u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
            u[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
        else
            u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
            u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
        buf_add(out, u, n);
    }
}

/* `s` (UTF-8) as a JSON string the way Python's json.dumps writes it
 * (ensure_ascii: \\" \\\\ \\b \\f \\n \\r \\t, other controls, DEL and non-ASCII
 * as lower-case \\uXXXX, astral characters as surrogate pairs; bytes that are
 * not UTF-8 as U+FFFD, as Python's errors="replace" decoding would). */
static void json_str(struct buf *out, const char *s, size_t n) {
    buf_s(out, "\"");
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        unsigned cp;
        size_t len = 1;
        if (c < 0x80) cp = c;
        else if ((c & 0xE0) == 0xC0 && i + 1 < n) cp = c & 0x1F, len = 2;
        else if ((c & 0xF0) == 0xE0 && i + 2 < n) cp = c & 0x0F, len = 3;
        else if ((c & 0xF8) == 0xF0 && i + 3 < n) cp = c & 0x07, len = 4;
        else cp = 0xFFFD;
        for (size_t k = 1; k < len; k++) {
            unsigned char d = (unsigned char)s[i + k];
            if ((d & 0xC0) != 0x80) {
                cp = 0xFFFD;
                len = 1;
                break;
            }
            cp = cp << 6 | (d & 0x3F);
        }
        i += len;
        switch (cp) {
        case '"': buf_s(out, "\\\""); continue;
        case '\\': buf_s(out, "\\\\"); continue;
        case '\b': buf_s(out, "\\b"); continue;
        case '\f': buf_s(out, "\\f"); continue;
        case '\n': buf_s(out, "\\n"); continue;
        case '\r': buf_s(out, "\\r"); continue;
        case '\t': buf_s(out, "\\t"); continue;
        default: break;
        }
        if (cp >= 0x20 && cp < 0x7F) {
            char ch = (char)cp;
            buf_add(out, &ch, 1);
        } else if (cp >= 0x10000) {
            cp -= 0x10000;
            buf_f(out, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
        } else {
            buf_f(out, "\\u%04x", cp);
        }
    }
    buf_s(out, "\"");
}

/* A node re-serialized as Python's json.dumps(json.loads(...)) would write it
 * (", " and ": " separators, strings re-escaped); numbers as written. */
static void j_dump(const struct json *j, int v, struct buf *out) {
    const struct node *nd = &j->nodes[v];
    if (nd->type == J_STR) {
        struct buf tmp = {.max = (size_t)nd->len * 4 + 16};
        j_decode(j, v, &tmp);
        json_str(out, tmp.p ? tmp.p : "", tmp.len);
        free(tmp.p);
    } else if (nd->type == J_OBJ || nd->type == J_ARR) {
        buf_s(out, nd->type == J_OBJ ? "{" : "[");
        int first = 1;
        for (int c = nd->child; c >= 0; c = j->nodes[c].next) {
            if (!first) buf_s(out, ", ");
            first = 0;
            if (nd->type == J_OBJ) {
                j_dump(j, c, out);
                buf_s(out, ": ");
                c = j->nodes[c].next;
            }
            j_dump(j, c, out);
        }
        buf_s(out, nd->type == J_OBJ ? "}" : "]");
    } else {
        buf_add(out, j->s + nd->start, (size_t)nd->len);
    }
}

/* A float as Python's repr() writes it: the shortest digits that read back
 * as the same double, fixed-point for exponents -4..15 (with ".0" on integral
 * values), else C's %e form (the same as Python's there). */
static void py_float(struct buf *out, double x) {
    char tmp[64];
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
    int exp = atoi(strchr(tmp, 'e') + 1);
    if (exp >= -4 && exp < 16) {
        int decimals = prec - 1 - exp;
        snprintf(tmp, sizeof tmp, "%.*f", decimals > 0 ? decimals : 0, x);
        if (!strchr(tmp, '.')) strcat(tmp, ".0");
    }
    buf_s(out, tmp);
}

/* ---- the request ---------------------------------------------------------- */

static char *g_in;        /* stdin, as read */
static size_t g_in_len;
static char g_version[16] = "1.0.0"; /* the error JSON's cniVersion */

struct config {
    char url[512];
    char host[64];
    int port;
    char base_path[256];
    char token_file[4096];
    double timeout_s, wait_s;
    char stage[65];
    int fail_open;
    char policy[8];
    char log_file[4096]; /* "" if none */
    char delegate_type[256];
    char delegate_exe[4096];
    const char *container_id, *ifname;
    char token[MAX_TOKEN + 1];
};

/* ---- the fallback: the Python plugin ----------------------------------------- */

static void cni_error(int code, const char *msg);

/* Exec the Python plugin with the same stdin bytes and environment. Called
 * only before any side effect (no permit taken, nothing exec'd). */
static void fallback(void) __attribute__((noreturn));
static void fallback(void) {
    /* stdin was consumed: hand the bytes over in a memfd (a pipe would block
     * on configs over 64 KiB with nobody reading yet). */
    int fd = memfd_create("bootstorm-cni-stdin", 0);
    if (fd >= 0 && write_all(fd, g_in, g_in_len) == 0 && lseek(fd, 0, SEEK_SET) == 0 &&
        dup2(fd, 0) == 0) {
        if (fd != 0) close(fd);
        signal(SIGTERM, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        sigprocmask(SIG_SETMASK, &g_orig_mask, NULL);
        /* -I -S: no site, no editable-install hooks, no user paths (~8 ms of
         * start instead of ~26-46 ms); the package's directory is appended to
         * sys.path (after the standard library: nothing there can shadow it). */
        char *argv[] = {(char *)BOOTSTORM_PYTHON, (char *)"-I", (char *)"-S", (char *)"-c",
                        (char *)"import sys; sys.path.append(sys.argv.pop(1)); "
                                "from cni_plugin import main; sys.exit(main())",
                        (char *)BOOTSTORM_PYPATH, NULL};
        execv(BOOTSTORM_PYTHON, argv);
    }
    char msg[1024];
    snprintf(msg, sizeof msg, "bootstorm-cni: cannot run the Python plugin %s: %s",
             BOOTSTORM_PYTHON, strerror(errno));
    cni_error(5, msg);
    exit(1);
}

/* ---- the answer, the log, the warnings ------------------------------------------ */

struct callog {
    double start_s, wall;
    pid_t pid; /* the plugin's: a detached release's child logs it, not its own */
    double agent_s;
    const struct config *cfg;
    char *events[MAX_EVENTS];
    int nevents;
    struct buf fields; /* ", \"key\": value" pairs in the order Python adds them */
    struct buf delegates;
};

static struct callog g_log;

static void warn(const char *msg) {
    char who[13] = "-";
    if (g_log.cfg != NULL) snprintf(who, sizeof who, "%s", g_log.cfg->container_id);
    struct buf line = {.max = strlen(msg) + 64};
    buf_f(&line, "bootstorm-cni: %s: ", who);
    buf_s(&line, msg);
    buf_s(&line, "\n");
    if (line.p) write_all(2, line.p, line.len);
    free(line.p);
    if (g_log.nevents < MAX_EVENTS) g_log.events[g_log.nevents++] = strdup(msg);
}

/* The spec's error JSON on stdout, as PluginError.to_json writes it. */
static void cni_error(int code, const char *msg) {
    struct buf out = {.max = strlen(msg) * 6 + 128};
    buf_s(&out, "{\"cniVersion\": ");
    json_str(&out, g_version, strlen(g_version));
    buf_f(&out, ", \"code\": %d, \"msg\": ", code);
    json_str(&out, msg, strlen(msg));
    buf_s(&out, "}");
    if (out.p) write_all(1, out.p, out.len);
    free(out.p);
}

/* One JSON line in log_file, as _Log.write does (one write: appends of
 * concurrent plugins do not interleave). */
static void write_log(const char *outcome) {
    const struct config *c = g_log.cfg;
    if (c == NULL || c->log_file[0] == '\0') return;
    struct buf l = {.max = 1 << 20};
    buf_f(&l, "{\"wall_s\": %.6f, \"start_s\": %.9f, \"end_s\": %.9f, \"pid\": %d, ", g_log.wall,
          g_log.start_s, now_s(), (int)g_log.pid);
    buf_s(&l, "\"command\": \"ADD\", \"container_id\": ");
    json_str(&l, c->container_id, strlen(c->container_id));
    buf_s(&l, ", \"ifname\": ");
    json_str(&l, c->ifname, strlen(c->ifname));
    buf_s(&l, ", \"stage\": ");
    json_str(&l, c->stage, strlen(c->stage));
    buf_f(&l, ", \"policy\": \"%s\", \"outcome\": \"%s\", \"agent_s\": %.6f, \"events\": [",
          c->policy, outcome, g_log.agent_s);
    for (int i = 0; i < g_log.nevents; i++) {
        if (i) buf_s(&l, ", ");
        if (g_log.events[i]) json_str(&l, g_log.events[i], strlen(g_log.events[i]));
    }
    buf_s(&l, "]");
    if (g_log.fields.p) buf_add(&l, g_log.fields.p, g_log.fields.len);
    if (g_log.delegates.p) {
        buf_s(&l, ", \"delegates\": [");
        buf_add(&l, g_log.delegates.p, g_log.delegates.len);
        buf_s(&l, "]");
    }
    buf_s(&l, "}\n");
    int fd = open(c->log_file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || (l.p && write_all(fd, l.p, l.len) < 0)) {
        char msg[4200];
        snprintf(msg, sizeof msg, "bootstorm-cni: log_file %s: %s\n", c->log_file,
                 strerror(errno));
        write_all(2, msg, strlen(msg));
    }
    if (fd >= 0) close(fd);
    free(l.p);
}

/* ---- the agent: one HTTP/1.1 call per connection, like _agent.call ---------------- */

struct answer {
    int status;
    char *raw; /* the whole answer */
    size_t raw_len;
    const char *body; /* its JSON body (de-chunked into raw) */
    size_t body_len;
    struct json j;
    struct node nodes[2048];
    int root; /* the body's object, or -1 ({} as Python has it) */
};

/* Python's exception name for an OSError's errno (what _agent.call prints). */
static const char *exc_name(int err) {
    switch (err) {
    case ECONNREFUSED: return "ConnectionRefusedError";
    case ECONNRESET: return "ConnectionResetError";
    case ECONNABORTED: return "ConnectionAbortedError";
    case EPIPE: case ESHUTDOWN: return "BrokenPipeError";
    case EAGAIN: case EALREADY: case EINPROGRESS: return "BlockingIOError";
    case EACCES: case EPERM: return "PermissionError";
    case ENOENT: return "FileNotFoundError";
    case EINTR: return "InterruptedError";
    default: return "OSError";
    }
}

/* Wait for `events` on fd until `deadline`; 1 ready, 0 timed out, -1 SIGTERM
 * (only when interruptible). */
static int wait_fd(int fd, short events, double deadline, int interruptible) {
    for (;;) {
        if (interruptible && g_term) return -1;
        double left = deadline - now_s();
        if (left <= 0) return 0;
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        struct pollfd p = {.fd = fd, .events = events};
        int r = ppoll(&p, 1, &ts, interruptible ? &g_wait_mask : &g_block_mask);
        if (r > 0) return 1;
        if (r < 0 && errno != EINTR) return 1; /* let the I/O call report it */
    }
}

static void answer_free(struct answer *a) {
    free(a->raw);
    a->raw = NULL;
}

/* A Python repr() of a short latin-1 string, for "not an HTTP answer: ...". */
static void py_repr(struct buf *out, const char *s, size_t n) {
    int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    buf_add(out, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\' || c == (unsigned char)q) buf_f(out, "\\%c", c);
        else if (c == '\t') buf_s(out, "\\t");
        else if (c == '\n') buf_s(out, "\\n");
        else if (c == '\r') buf_s(out, "\\r");
        else if (c < 0x20 || c >= 0x7F) buf_f(out, "\\x%02x", c);
        else buf_add(out, (const char *)&c, 1);
    }
    buf_add(out, &q, 1);
}

/* The answer's status and JSON body, as _agent._parse reads them; 0, or -1
 * with `err` set (unreachable: a malformed answer). */
static int parse_answer(struct answer *a, char *err, size_t errlen) {
    char *raw = a->raw;
    char *sep = memmem(raw, a->raw_len, "\r\n\r\n", 4);
    if (sep == NULL) {
        snprintf(err, errlen, "the answer ended before its headers");
        return -1;
    }
    char *line_end = memmem(raw, (size_t)(sep - raw) + 2, "\r\n", 2);
    size_t line_len = (size_t)(line_end - raw);
    /* "HTTP/x <digits>[ reason]" */
    char *sp = memchr(raw, ' ', line_len);
    size_t code_len = 0;
    if (sp != NULL) {
        char *code = sp + 1, *stop = memchr(code, ' ', line_len - (size_t)(code - raw));
        code_len = (size_t)((stop ? stop : line_end) - code);
        for (size_t i = 0; i < code_len; i++)
            if (!isdig(code[i])) code_len = 0;
    }
    if (line_len < 5 || memcmp(raw, "HTTP/", 5) != 0 || code_len == 0 || code_len > 9) {
        struct buf r = {.max = 512};
        py_repr(&r, raw, line_len < 60 ? line_len : 60);
        snprintf(err, errlen, "not an HTTP answer: %s", r.p ? r.p : "''");
        free(r.p);
        return -1;
    }
    a->status = atoi(sp + 1);
    char *body = sep + 4;
    size_t body_len = a->raw_len - (size_t)(body - raw);
    int chunked = 0;
    long clen = -1;
    for (char *h = line_end + 2; h < sep;) {
        char *e = memmem(h, (size_t)(sep + 2 - h), "\r\n", 2);
        char *colon = memchr(h, ':', (size_t)(e - h));
        if (colon != NULL) {
            char *name = h, *name_end = colon, *v = colon + 1, *v_end = e;
            while (name < name_end && (*name == ' ' || *name == '\t')) name++;
            while (name_end > name && (name_end[-1] == ' ' || name_end[-1] == '\t')) name_end--;
            while (v < v_end && (*v == ' ' || *v == '\t')) v++;
            while (v_end > v && (v_end[-1] == ' ' || v_end[-1] == '\t')) v_end--;
            size_t nl = (size_t)(name_end - name), vl = (size_t)(v_end - v);
            if (nl == 17 && strncasecmp(name, "transfer-encoding", 17) == 0)
                chunked = vl == 7 && strncasecmp(v, "chunked", 7) == 0;
            if (nl == 14 && strncasecmp(name, "content-length", 14) == 0) {
                clen = -1;
                if (vl > 0 && vl < 12) {
                    clen = 0;
                    for (size_t i = 0; i < vl; i++)
                        clen = isdig(v[i]) && clen >= 0 ? clen * 10 + (v[i] - '0') : -1;
                }
            }
        }
        h = e + 2;
    }
    if (chunked) {
        /* De-chunk in place (the output never outruns the input). */
        char *in = body, *end = body + body_len, *o = body;
        while (in < end) {
            char *e = memmem(in, (size_t)(end - in), "\r\n", 2);
            if (e == NULL) e = end;
            char *semi = memchr(in, ';', (size_t)(e - in));
            size_t hl = (size_t)((semi ? semi : e) - in);
            unsigned long size = 0;
            for (size_t i = 0; i < hl; i++) {
                int hv = hexval(in[i]);
                if (hv < 0 || size > (1UL << 28)) {
                    snprintf(err, errlen, "the answer's chunked body is malformed");
                    return -1;
                }
                size = size * 16 + (unsigned long)hv;
            }
            if (size == 0) break;
            in = e + (e < end ? 2 : 0);
            size_t take = size < (size_t)(end - in) ? size : (size_t)(end - in);
            memmove(o, in, take);
            o += take;
            in += take;
            in += (size_t)(end - in) < 2 ? (size_t)(end - in) : 2;
        }
        body_len = (size_t)(o - body);
    } else if (clen >= 0 && (size_t)clen < body_len) {
        body_len = (size_t)clen;
    }
    a->body = body;
    a->body_len = body_len;
    a->root = j_parse(&a->j, body, body_len, a->nodes, 2048, 0, 0);
    if (a->root >= 0 && a->nodes[a->root].type != J_OBJ) a->root = -2; /* {} */
    return 0;
}

/* The agent's one-line error, as AgentAnswer.error: its "error" with its
 * "reason" in parentheses. */
static void answer_error(const struct answer *a, struct buf *out) {
    if (a->root == -1) {
        /* Not JSON: Python keeps the text, stripped, first 200 characters. */
        const char *b = a->body;
        size_t n = a->body_len;
        while (n && strchr(" \t\n\r\v\f", *b)) b++, n--;
        while (n && strchr(" \t\n\r\v\f", b[n - 1])) n--;
        if (n == 0) {
            buf_f(out, "HTTP %d", a->status);
            return;
        }
        buf_add(out, b, n > 200 ? 200 : n);
        return;
    }
    int e = a->root >= 0 ? j_get(&a->j, a->root, "error") : -1;
    if (e < 0) buf_f(out, "HTTP %d", a->status);
    else if (a->nodes[e].type == J_STR) j_decode(&a->j, e, out);
    else buf_add(out, a->body + a->nodes[e].start, (size_t)a->nodes[e].len);
    int r = a->root >= 0 ? j_get(&a->j, a->root, "reason") : -1;
    if (r >= 0 && a->nodes[r].type == J_STR && a->nodes[r].len > 2) {
        buf_s(out, " (");
        j_decode(&a->j, r, out);
        buf_s(out, ")");
    }
}

/* One request; 0 with `a` filled, -1 unreachable (`err` as Python words it),
 * -2 interrupted by SIGTERM. Bounded by timeout_s: connect, send, answer. */
static int agent_call(const struct config *c, const char *method, const char *path,
                      const char *payload, double timeout_s, int interruptible, struct answer *a,
                      char *err, size_t errlen) {
    double t0 = now_s(), deadline = t0 + timeout_s;
    int rc = -1, fd = -1;
    memset(a, 0, sizeof *a);
    a->root = -1;
    size_t plen = payload ? strlen(payload) : 0;
    struct buf req = {.max = 1 << 20};
    buf_f(&req, "%s %s%s HTTP/1.1\r\nHost: %s:%d\r\n", method, c->base_path, path, c->host,
          c->port);
    buf_s(&req, "Authorization: Bearer ");
    buf_s(&req, c->token);
    buf_f(&req, "\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                "Connection: close\r\n\r\n", plen);
    if (payload) buf_add(&req, payload, plen);
    struct buf ans = {.max = MAX_ANSWER + 1};
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
    inet_pton(AF_INET, c->host, &sa.sin_addr);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || req.over) goto oserr;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        if (errno != EINPROGRESS && errno != EINTR) goto oserr;
        int w = wait_fd(fd, POLLOUT, deadline, interruptible);
        if (w < 0) goto interrupted;
        if (w == 0) goto timeout;
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr) {
            errno = soerr;
            goto oserr;
        }
    }
    for (size_t sent = 0; sent < req.len;) {
        ssize_t w = send(fd, req.p + sent, req.len - sent, MSG_NOSIGNAL);
        if (w >= 0) {
            sent += (size_t)w;
            continue;
        }
        if (errno != EAGAIN && errno != EINTR) goto oserr;
        int r = wait_fd(fd, POLLOUT, deadline, interruptible);
        if (r < 0) goto interrupted;
        if (r == 0) goto timeout;
    }
    for (;;) {
        char chunk[16384];
        ssize_t r = recv(fd, chunk, sizeof chunk, 0);
        if (r == 0) break;
        if (r > 0) {
            if (buf_add(&ans, chunk, (size_t)r) < 0) {
                snprintf(err, errlen, "answer over %d bytes", MAX_ANSWER);
                goto done;
            }
            continue;
        }
        if (errno != EAGAIN && errno != EINTR) goto oserr;
        int w = wait_fd(fd, POLLIN, deadline, interruptible);
        if (w < 0) goto interrupted;
        if (w == 0) goto timeout;
    }
    if (ans.p == NULL) buf_add(&ans, "", 0);
    a->raw = ans.p;
    a->raw_len = ans.len;
    ans.p = NULL;
    rc = parse_answer(a, err, errlen) == 0 ? 0 : -1;
    if (rc < 0) answer_free(a);
    goto done;
timeout:
    snprintf(err, errlen, "no answer within %g s", timeout_s);
    goto done;
interrupted:
    rc = -2;
    snprintf(err, errlen, "interrupted");
    goto done;
oserr:
    snprintf(err, errlen, "%s: %s", exc_name(errno), strerror(errno));
done:
    if (fd >= 0) close(fd);
    free(req.p);
    free(ans.p);
    g_log.agent_s += now_s() - t0;
    return rc;
}

/* ---- the lease ------------------------------------------------------------------- */

struct lease {
    int held;
    char id[128];
    double ttl_s, renewed_at;
    char lost[1024]; /* "" while not lost */
};

static double num_or(const struct answer *a, const char *key, double dflt) {
    int v = a->root >= 0 ? j_get(&a->j, a->root, key) : -1;
    if (v < 0 || a->nodes[v].type != J_NUM) return dflt;
    return strtod(a->body + a->nodes[v].start, NULL);
}

/* _Lease.renew: -2 if SIGTERM came during it. */
static int renew(const struct config *c, struct lease *l) {
    if (!l->held || l->lost[0]) return 0;
    char path[256], err[512];
    snprintf(path, sizeof path, "/v1/leases/%s/renew", l->id);
    struct answer a;
    int r = agent_call(c, "POST", path, NULL, c->timeout_s, 1, &a, err, sizeof err);
    if (r == -2) return -2;
    if (r < 0) {
        /* Not lost yet: the agent keeps it until its TTL runs out unrenewed. */
        if (now_s() - l->renewed_at >= l->ttl_s)
            snprintf(l->lost, sizeof l->lost, "not renewed within its TTL of %g s (%s)", l->ttl_s,
                     err);
        return 0;
    }
    if (a.status == 200) {
        l->renewed_at = now_s();
        l->ttl_s = num_or(&a, "ttl_s", l->ttl_s);
    } else {
        struct buf e = {.max = 4096};
        answer_error(&a, &e);
        snprintf(l->lost, sizeof l->lost, "renewal refused: %s", e.p ? e.p : "");
        free(e.p);
    }
    answer_free(&a);
    return 0;
}

/* _Lease.release: runs to its end even after a SIGTERM (that is when it matters). */
static void release(const struct config *c, struct lease *l) {
    if (!l->held) return;
    l->held = 0;
    char path[256], err[512], msg[2048];
    snprintf(path, sizeof path, "/v1/leases/%s/release", l->id);
    struct answer a;
    if (agent_call(c, "POST", path, NULL, c->timeout_s, 0, &a, err, sizeof err) < 0) {
        snprintf(msg, sizeof msg, "lease %s not released (%s); the agent frees it after its TTL",
                 l->id, err);
        warn(msg);
        return;
    }
    if (a.status != 200) {
        struct buf e = {.max = 4096};
        answer_error(&a, &e);
        snprintf(msg, sizeof msg, "lease %s already gone at release: %s", l->id, e.p ? e.p : "");
        free(e.p);
        warn(msg);
    }
    answer_free(&a);
}

/* _acquire: 0 with the lease held or skipped (fail open); otherwise the CNI
 * error (code and msg) to answer with, or -2 on SIGTERM. */
static int acquire(const struct config *c, struct lease *l, int *code, char *msg, size_t msglen) {
    char holder[160], path[128], err[1024];
    snprintf(holder, sizeof holder, "cni:%.96s:%s", c->container_id, c->ifname);
    struct buf body = {.max = 4096};
    buf_s(&body, "{\"holder\": ");
    json_str(&body, holder, strlen(holder));
    buf_s(&body, ", \"wait_s\": ");
    py_float(&body, c->wait_s);
    buf_s(&body, "}");
    snprintf(path, sizeof path, "/v1/stages/%s/acquire", c->stage);
    double t0 = now_s();
    struct answer a;
    int r = agent_call(c, "POST", path, body.p, c->timeout_s + c->wait_s, 1, &a, err, sizeof err);
    free(body.p);
    if (r == -2) return -2;
    if (r < 0) {
        *code = 11;
        snprintf(msg, msglen, "no permit for stage %s: agent %s: %s", c->stage, c->url, err);
    } else {
        buf_f(&g_log.fields, ", \"permit_wait_s\": %.6f", now_s() - t0);
        if (a.status == 200) {
            int v = a.root >= 0 ? j_get(&a.j, a.root, "lease_id") : -1;
            if (v >= 0 && a.nodes[v].type == J_STR) {
                struct buf id = {.max = sizeof l->id};
                j_decode(&a.j, v, &id);
                snprintf(l->id, sizeof l->id, "%s", id.p ? id.p : "");
                free(id.p);
            } else if (v >= 0) {
                snprintf(l->id, sizeof l->id, "%.*s", a.nodes[v].len, a.body + a.nodes[v].start);
            }
            buf_s(&g_log.fields, ", \"lease\": ");
            json_str(&g_log.fields, l->id, strlen(l->id));
            l->held = 1;
            l->ttl_s = num_or(&a, "ttl_s", 30.0);
            l->renewed_at = now_s();
            answer_free(&a);
            return 0;
        }
        int transient = a.status == 408 || a.status == 429 || a.status >= 500;
        *code = transient ? 11 : 100;
        struct buf e = {.max = 4096};
        answer_error(&a, &e);
        snprintf(msg, msglen, "no permit for stage %s: agent %s answered %d: %s", c->stage, c->url,
                 a.status, e.p ? e.p : "");
        free(e.p);
        answer_free(&a);
    }
    if (c->fail_open) {
        char w[4200];
        snprintf(w, sizeof w, "failure_policy open: going ahead without a permit (%s)", msg);
        warn(w);
        buf_s(&g_log.fields, ", \"permit\": \"skipped\"");
        return 0;
    }
    return -1;
}

/* ---- the delegate ------------------------------------------------------------------ */

struct run {
    int rc; /* exit status, or -signal (Popen.returncode) */
    pid_t pid;
    struct buf out, err;
    double start_s, end_s;
    int interrupted;
    int spawn_errno;
};

static void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

/* Exec `exe` with `in` on its stdin, its stdout and stderr kept, as
 * _delegate.run_plugin: while it runs, renew the lease every tick_s seconds
 * (0: no lease). On SIGTERM it is killed and reaped. */
static void run_plugin(const struct config *c, const char *exe, char *const envp[], const char *in,
                       size_t in_len, struct lease *lease, double tick_s, struct run *r) {
    memset(r, 0, sizeof *r);
    r->out.max = MAX_OUT;
    r->err.max = MAX_ERR;
    r->start_s = now_s();
    int pin[2], pout[2], perr[2];
    if (pipe2(pin, O_CLOEXEC) < 0) goto fail0;
    if (pipe2(pout, O_CLOEXEC) < 0) goto fail1;
    if (pipe2(perr, O_CLOEXEC) < 0) goto fail2;
    /* posix_spawn: vfork-fast, and it sets the child's signal mask and
     * dispositions back (SIGTERM unblocked, SIGPIPE default) before exec. */
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
    posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
    posix_spawn_file_actions_adddup2(&fa, perr[1], 2);
    posix_spawnattr_init(&at);
    sigset_t dflt;
    sigemptyset(&dflt);
    sigaddset(&dflt, SIGPIPE);
    sigaddset(&dflt, SIGTERM);
    posix_spawnattr_setsigdefault(&at, &dflt);
    posix_spawnattr_setsigmask(&at, &g_orig_mask);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    char *argv[] = {(char *)exe, NULL};
    int e = posix_spawn(&r->pid, exe, &fa, &at, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    if (e != 0) {
        close(pin[1]);
        close(pout[0]);
        close(perr[0]);
        r->spawn_errno = e;
        r->rc = 127;
        r->end_s = now_s();
        return;
    }
    set_nonblock(pin[1]);
    set_nonblock(pout[0]);
    set_nonblock(perr[0]);
    /* A pidfd tells poll() when the child exits (it may outlive its pipes). */
    int pidfd = (int)syscall(SYS_pidfd_open, r->pid, 0);
    int fds[4] = {pin[1], pout[0], perr[0], pidfd};
    size_t sent = 0;
    if (in_len == 0) {
        close(fds[0]);
        fds[0] = -1;
    }
    int status = 0, reaped = 0;
    double next_tick = tick_s > 0 ? now_s() + tick_s : 0;
    while (!reaped) {
        if (g_term) {
            /* Cancelled: the delegate does not outlive us. */
            kill(r->pid, SIGKILL);
            while (waitpid(r->pid, &status, 0) < 0 && errno == EINTR) {}
            r->interrupted = 1;
            reaped = 1;
            break;
        }
        if (fds[1] < 0 && fds[2] < 0) {
            /* Both pipes at EOF: reap it (wait on the pidfd, or poll the pid
             * every 5 ms without one). */
            pid_t w = waitpid(r->pid, &status, WNOHANG);
            if (w == r->pid) {
                reaped = 1;
                break;
            }
        }
        struct pollfd p[4];
        int np = 0, which[4];
        for (int i = 0; i < 4; i++) {
            if (fds[i] < 0) continue;
            if (i == 3 && (fds[1] >= 0 || fds[2] >= 0)) continue; /* pipes first */
            p[np].fd = fds[i];
            p[np].events = i == 0 ? POLLOUT : POLLIN;
            p[np].revents = 0;
            which[np++] = i;
        }
        double wait = 3600;
        if (tick_s > 0) wait = next_tick - now_s();
        if (fds[1] < 0 && fds[2] < 0 && fds[3] < 0 && wait > 0.005) wait = 0.005;
        if (wait < 0) wait = 0;
        struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        int n = ppoll(p, (nfds_t)np, &ts, &g_wait_mask);
        if (n < 0 && errno != EINTR) break;
        if (tick_s > 0 && now_s() >= next_tick) {
            if (renew(c, lease) == -2) continue; /* g_term is set: killed above */
            next_tick = now_s() + tick_s;
        }
        for (int k = 0; n > 0 && k < np; k++) {
            int i = which[k];
            if (!p[k].revents) continue;
            if (i == 0) {
                ssize_t w = write(fds[0], in + sent, in_len - sent);
                if (w > 0) sent += (size_t)w;
                /* Done, or it closed its stdin (EPIPE: communicate() ignores it too). */
                if (sent == in_len || (w < 0 && errno != EAGAIN && errno != EINTR)) {
                    close(fds[0]);
                    fds[0] = -1;
                }
            } else if (i == 3) {
                /* Exited: the next turn reaps it. */
                close(fds[3]);
                fds[3] = -1;
            } else {
                char chunk[16384];
                ssize_t got = read(fds[i], chunk, sizeof chunk);
                if (got > 0) buf_add(i == 1 ? &r->out : &r->err, chunk, (size_t)got);
                else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
                    close(fds[i]);
                    fds[i] = -1;
                }
            }
        }
    }
    for (int i = 0; i < 4; i++)
        if (fds[i] >= 0) close(fds[i]);
    if (!reaped) { /* ppoll failed for good: do not leave it behind */
        kill(r->pid, SIGKILL);
        while (waitpid(r->pid, &status, 0) < 0 && errno == EINTR) {}
    }
    r->rc = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? -WTERMSIG(status) : 1;
    r->end_s = now_s();
    return;
fail2:
    close(pout[0]);
    close(pout[1]);
fail1:
    close(pin[0]);
    close(pin[1]);
fail0:
    r->spawn_errno = errno;
    r->rc = 127;
    r->end_s = now_s();
}

static void run_free(struct run *r) {
    free(r->out.p);
    free(r->err.p);
}

/* Whether the delegate speaks `version` (its VERSION's supportedVersions), as _speaks. */
static int speaks(const struct config *c, const char *version) {
    size_t n = 0;
    while (environ[n]) n++;
    char **envp = calloc(n + 2, sizeof *envp);
    if (envp == NULL) return 0;
    size_t k = 0;
    int replaced = 0;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(environ[i], "CNI_COMMAND=", 12) == 0) {
            envp[k++] = (char *)"CNI_COMMAND=VERSION";
            replaced = 1;
        } else {
            envp[k++] = environ[i];
        }
    }
    if (!replaced) envp[k++] = (char *)"CNI_COMMAND=VERSION";
    char stdin_json[64];
    snprintf(stdin_json, sizeof stdin_json, "{\"cniVersion\": \"%s\"}", version);
    struct run r;
    run_plugin(c, c->delegate_exe, envp, stdin_json, strlen(stdin_json), NULL, 0, &r);
    free(envp);
    int yes = 0;
    if (!r.interrupted && r.out.p) {
        static struct node nodes[4096];
        struct json j;
        int root = j_parse(&j, r.out.p, r.out.len, nodes, 4096, 0, 0);
        int list = root >= 0 ? j_get(&j, root, "supportedVersions") : -1;
        if (list >= 0 && nodes[list].type == J_ARR) {
            for (int v = nodes[list].child; v >= 0; v = nodes[v].next) {
                char s[32];
                if (j_plain(&j, v, s, sizeof s) == 0 && strcmp(s, version) == 0) yes = 1;
            }
        }
    }
    if (r.interrupted) yes = -1;
    run_free(&r);
    return yes;
}

/* The delegate's stdin, as _delegate.delegate_config builds it and json.dumps
 * writes it: the delegate object with the network's cniVersion and name (in
 * place if it has them, else appended), the outer prevResult, args and cni.dev/ keys
 * it lacks, and runtimeConfig's entries for the capabilities it declares. */
static void delegate_conf(const struct json *j, int root, const char *version, struct buf *out) {
    int del = j_get(j, root, "delegate");
    int name = j_get(j, root, "name");
    int runtime = j_get(j, root, "runtimeConfig");
    int caps = j_get(j, del, "capabilities");
    struct buf wanted = {.max = 64 << 20};
    int nwanted = 0;
    if (runtime >= 0 && j->nodes[runtime].type == J_OBJ && caps >= 0 &&
        j->nodes[caps].type == J_OBJ) {
        buf_s(&wanted, "{");
        for (int k = j->nodes[runtime].child; k >= 0; k = j->nodes[j->nodes[k].next].next) {
            char key[512];
            if (j_plain(j, k, key, sizeof key) < 0) continue;
            int cap = j_get(j, caps, key);
            if (cap < 0 || j->nodes[cap].type != J_TRUE) continue; /* `is True` */
            if (nwanted++) buf_s(&wanted, ", ");
            j_dump(j, k, &wanted);
            buf_s(&wanted, ": ");
            j_dump(j, j->nodes[k].next, &wanted);
        }
        buf_s(&wanted, "}");
    }
    int have_version = 0, have_name = 0, have_runtime = 0, first = 1;
    buf_s(out, "{");
#define SEP() (first ? (void)(first = 0) : buf_s(out, ", "))
    for (int k = j->nodes[del].child; k >= 0; k = j->nodes[j->nodes[k].next].next) {
        char key[512];
        int plain = j_plain(j, k, key, sizeof key) == 0;
        SEP();
        j_dump(j, k, out);
        buf_s(out, ": ");
        if (plain && strcmp(key, "cniVersion") == 0) {
            json_str(out, version, strlen(version));
            have_version = 1;
        } else if (plain && strcmp(key, "name") == 0) {
            j_dump(j, name, out);
            have_name = 1;
        } else if (plain && strcmp(key, "runtimeConfig") == 0 && nwanted) {
            buf_add(out, wanted.p, wanted.len);
            have_runtime = 1;
        } else {
            j_dump(j, j->nodes[k].next, out);
        }
    }
    if (!have_version) {
        SEP();
        buf_s(out, "\"cniVersion\": ");
        json_str(out, version, strlen(version));
    }
    if (!have_name) {
        SEP();
        buf_s(out, "\"name\": ");
        j_dump(j, name, out);
    }
    for (int k = j->nodes[root].child; k >= 0; k = j->nodes[j->nodes[k].next].next) {
        char key[512];
        if (j_plain(j, k, key, sizeof key) < 0) continue;
        int carried = strcmp(key, "prevResult") == 0 || strcmp(key, "args") == 0 ||
                      strncmp(key, "cni.dev/", 8) == 0;
        if (!carried || j_get(j, del, key) >= 0) continue;
        SEP();
        j_dump(j, k, out);
        buf_s(out, ": ");
        j_dump(j, j->nodes[k].next, out);
    }
    if (nwanted && !have_runtime) {
        SEP();
        buf_s(out, "\"runtimeConfig\": ");
        buf_add(out, wanted.p, wanted.len);
    }
#undef SEP
    buf_s(out, "}");
    free(wanted.p);
}

/* ---- validation: every rule of _config.parse_config / parse_request, else Python ---- */

static int ascii_printable(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7F) return 0;
    return 1;
}

static int abs_path(const struct json *j, int v, char *out, size_t cap) {
    /* _path: an absolute path without NUL (escapes: Python decides). */
    return j_plain(j, v, out, cap) == 0 && out[0] == '/' ? 0 : -1;
}

static int number_in(const struct json *j, int v, double dflt, double lo, double hi, double *out) {
    if (v < 0) {
        *out = dflt;
        return 0;
    }
    if (j->nodes[v].type != J_NUM) return -1; /* true/false/strings: Python's error */
    double x = strtod(j->s + j->nodes[v].start, NULL);
    if (!(x >= lo && x <= hi)) return -1;
    *out = x;
    return 0;
}

/* `http://IPv4[:port][/path]`, as _split_url splits it; hostnames, IPv6 and
 * anything odd go to Python. */
static int split_url(struct config *c) {
    const char *u = c->url;
    if (strncmp(u, "http://", 7) != 0) return -1;
    const char *rest = u + 7;
    if (strpbrk(rest, "@?#")) return -1;
    const char *slash = strchr(rest, '/');
    size_t hp_len = slash ? (size_t)(slash - rest) : strlen(rest);
    char hostport[96];
    if (hp_len == 0 || hp_len >= sizeof hostport) return -1;
    memcpy(hostport, rest, hp_len);
    hostport[hp_len] = '\0';
    char *colon = strchr(hostport, ':');
    c->port = 80;
    if (colon != NULL) {
        *colon = '\0';
        const char *pt = colon + 1;
        size_t pl = strlen(pt);
        if (pl == 0 || pl > 5) return -1;
        long port = 0;
        for (size_t i = 0; i < pl; i++) {
            if (!isdig(pt[i])) return -1;
            port = port * 10 + (pt[i] - '0');
        }
        if (port < 1 || port > 65535) return -1;
        c->port = (int)port;
    }
    struct in_addr addr;
    if (inet_pton(AF_INET, hostport, &addr) != 1) return -1;
    if (strlen(hostport) >= sizeof c->host) return -1;
    memcpy(c->host, hostport, strlen(hostport) + 1);
    c->base_path[0] = '\0';
    if (slash) {
        /* ("/" + path).rstrip("/"), URL-safe characters only */
        size_t n = strlen(slash);
        while (n > 0 && slash[n - 1] == '/') n--;
        if (n >= sizeof c->base_path) return -1;
        for (size_t i = 0; i < n; i++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~/",
                        slash[i]))
                return -1;
        memcpy(c->base_path, slash, n);
        c->base_path[n] = '\0';
    }
    return 0;
}

/* AgentConfig.token: a regular file of at most 4 KiB holding one token of
 * visible ASCII; anything else is Python's to report. */
static int read_token(struct config *c) {
    int fd = open(c->token_file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    char data[MAX_TOKEN + 2];
    ssize_t n = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= MAX_TOKEN) {
        size_t got = 0;
        while (got < MAX_TOKEN + 1) {
            ssize_t r = read(fd, data + got, MAX_TOKEN + 1 - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        n = (ssize_t)got;
    }
    close(fd);
    if (n < 0 || n > MAX_TOKEN) return -1;
    /* str.strip(): ASCII whitespace including \x1c-\x1f */
    const char *ws = " \t\n\r\v\f\x1c\x1d\x1e\x1f";
    size_t a = 0, b = (size_t)n;
    while (a < b && data[a] && strchr(ws, data[a])) a++;
    while (b > a && data[b - 1] && strchr(ws, data[b - 1])) b--;
    if (a == b) return -1;
    for (size_t i = a; i < b; i++)
        if ((unsigned char)data[i] <= 0x20 || (unsigned char)data[i] >= 0x7F) return -1;
    memcpy(c->token, data + a, b - a);
    c->token[b - a] = '\0';
    return 0;
}

/* find_plugin: the first CNI_PATH directory holding an executable file `name`. */
static int find_plugin(struct config *c, const char *cni_path) {
    const char *p = cni_path;
    while (*p) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n > 0) {
            int slash = p[n - 1] == '/';
            int w = snprintf(c->delegate_exe, sizeof c->delegate_exe, "%.*s%s%s", (int)n, p,
                             slash ? "" : "/", c->delegate_type);
            struct stat st;
            if (w > 0 && (size_t)w < sizeof c->delegate_exe && stat(c->delegate_exe, &st) == 0 &&
                S_ISREG(st.st_mode) && access(c->delegate_exe, X_OK) == 0)
                return 0;
        }
        if (!e) break;
        p = e + 1;
    }
    return -1;
}

static int validate(const struct json *j, int root, struct config *c) {
    if (root < 0 || j->nodes[root].type != J_OBJ) return -1;
    /* The runtime's environment (parse_request). */
    const char *id = getenv("CNI_CONTAINERID"), *netns = getenv("CNI_NETNS"),
               *ifname = getenv("CNI_IFNAME"), *path = getenv("CNI_PATH");
    if (!id || !*id || !ascii_printable(id) || !netns || !*netns || !ifname || !path) return -1;
    size_t il = strlen(ifname);
    if (il == 0 || il > 15 || strchr(ifname, '/') || !strcmp(ifname, ".") ||
        !strcmp(ifname, "..") || !ascii_printable(ifname))
        return -1;
    if (strspn(path, ":") == strlen(path)) return -1; /* no directory in CNI_PATH */
    c->container_id = id;
    c->ifname = ifname;
    /* Top-level keys: the spec's, ours (without pool), cni.dev/... */
    for (int k = j->nodes[root].child; k >= 0; k = j->nodes[j->nodes[k].next].next) {
        const char *s = j->s + j->nodes[k].start + 1;
        size_t n = (size_t)j->nodes[k].len - 2;
        if (!in_list(s, n, SPEC_KEYS) && !in_list(s, n, OWN_KEYS) &&
            !(n >= 8 && memcmp(s, "cni.dev/", 8) == 0))
            return -1;
    }
    char version[16];
    if (j_plain(j, j_get(j, root, "cniVersion"), version, sizeof version) < 0 ||
        !in_list(version, strlen(version), VERSIONS))
        return -1;
    snprintf(g_version, sizeof g_version, "%s", version);
    int name = j_get(j, root, "name");
    if (name < 0 || j->nodes[name].type != J_STR || j->nodes[name].len <= 2) return -1;
    int agent = j_get(j, root, "agent");
    if (agent < 0 || j->nodes[agent].type != J_OBJ) return -1;
    for (int k = j->nodes[agent].child; k >= 0; k = j->nodes[j->nodes[k].next].next)
        if (!in_list(j->s + j->nodes[k].start + 1, (size_t)j->nodes[k].len - 2, AGENT_KEYS))
            return -1; /* ca_file (https) included */
    if (j_plain(j, j_get(j, agent, "url"), c->url, sizeof c->url) < 0 || split_url(c) < 0)
        return -1;
    if (abs_path(j, j_get(j, agent, "token_file"), c->token_file, sizeof c->token_file) < 0)
        return -1;
    if (number_in(j, j_get(j, agent, "timeout_s"), 2.0, 0.01, 60.0, &c->timeout_s) < 0 ||
        number_in(j, j_get(j, agent, "wait_s"), 30.0, 0.0, 600.0, &c->wait_s) < 0)
        return -1;
    int stage = j_get(j, root, "stage");
    if (stage < 0) snprintf(c->stage, sizeof c->stage, "AddCNI");
    else if (j_plain(j, stage, c->stage, sizeof c->stage) < 0) return -1;
    size_t sl = strlen(c->stage);
    const char *alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    if (sl == 0 || sl > 64 || !strchr(alpha, c->stage[0]) ||
        strspn(c->stage, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") != sl)
        return -1;
    int policy = j_get(j, root, "failure_policy");
    if (policy < 0) snprintf(c->policy, sizeof c->policy, "closed");
    else if (j_plain(j, policy, c->policy, sizeof c->policy) < 0) return -1;
    if (strcmp(c->policy, "open") != 0 && strcmp(c->policy, "closed") != 0) return -1;
    c->fail_open = strcmp(c->policy, "open") == 0;
    int del = j_get(j, root, "delegate");
    if (del < 0 || j->nodes[del].type != J_OBJ) return -1;
    if (j_plain(j, j_get(j, del, "type"), c->delegate_type, sizeof c->delegate_type) < 0)
        return -1;
    if (!c->delegate_type[0] || strchr(c->delegate_type, '/') || c->delegate_type[0] == '.' ||
        strcmp(c->delegate_type, "bootstorm-cni") == 0)
        return -1;
    char scratch[4096];
    int log_file = j_get(j, root, "log_file");
    c->log_file[0] = '\0';
    if (log_file >= 0 && j->nodes[log_file].type != J_NULL &&
        abs_path(j, log_file, c->log_file, sizeof c->log_file) < 0)
        return -1;
    int state_dir = j_get(j, root, "state_dir");
    if (state_dir >= 0 && abs_path(j, state_dir, scratch, sizeof scratch) < 0) return -1;
    /* Before any side effect: a delegate not in CNI_PATH and an unreadable
     * token are the Python plugin's errors to report. */
    if (find_plugin(c, path) < 0 || read_token(c) < 0) return -1;
    return 0;
}

/* ---- ADD ------------------------------------------------------------------------------ */

static int finish(int rc, const char *outcome) {
    write_log(outcome);
    return rc;
}

/* A PluginError as run() answers it: the error JSON, a line on stderr. */
static int plugin_error(int code, const char *msg) {
    cni_error(code, msg);
    char w[4200];
    snprintf(w, sizeof w, "error %d: %s", code, msg);
    warn(w);
    return finish(1, "error");
}

static int interrupted(void) {
    cni_error(11, "interrupted (SIGTERM) before the call completed");
    return finish(1, "error");
}

/* _release_detached: the answer is written; the release's round trip to the
 * agent need not be the ADD's. The runtime waits for this process's exit and
 * for EOF on its stdout and stderr, so a child with its stdio on /dev/null,
 * in its own session, releases the lease (bounded by timeout_s, as inline)
 * and writes the log line; this process exits at once. 0 in the parent once
 * the child runs; -1 (nothing held, or fork failed) to release inline. */
static int release_detached(const struct config *c, struct lease *l, const char *outcome) {
    if (!l->held) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid > 0) return 0;
    setsid();
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
    }
    release(c, l);
    finish(0, outcome);
    _exit(0);
}

static int add(const struct json *j, int root, struct config *c) {
    struct lease lease = {0};
    int code = 0;
    char msg[4096];
    int a = acquire(c, &lease, &code, msg, sizeof msg);
    if (a == -2) return interrupted();
    if (a < 0) return plugin_error(code, msg);
    /* _delegate_version: a 1.1.0 network whose delegate does not speak 1.1.0
     * calls it with 1.0.0 (their results are alike). */
    const char *version = g_version;
    if (strcmp(g_version, "1.1.0") == 0) {
        int yes = speaks(c, "1.1.0");
        if (yes < 0 || g_term) {
            release(c, &lease);
            return interrupted();
        }
        if (!yes) version = "1.0.0";
    }
    struct buf conf = {.max = 64 << 20};
    delegate_conf(j, root, version, &conf);
    struct run r;
    run_plugin(c, c->delegate_exe, environ, conf.p, conf.len, &lease,
               lease.held ? (lease.ttl_s / 3.0 > 0.05 ? lease.ttl_s / 3.0 : 0.05) : 0, &r);
    free(conf.p);
    buf_f(&g_log.delegates, "{\"command\": \"ADD\", \"program\": ");
    json_str(&g_log.delegates, c->delegate_type, strlen(c->delegate_type));
    buf_f(&g_log.delegates, ", \"pid\": %d, \"rc\": %d, \"start_s\": %.9f, \"end_s\": %.9f}",
          (int)r.pid, r.rc, r.start_s, r.end_s);
    if (r.interrupted) {
        release(c, &lease);
        run_free(&r);
        return interrupted();
    }
    if (lease.held && lease.lost[0]) {
        /* The permit admitted this ADD; losing it midway may have let another
         * in, which undoing this ADD would not undo: logged, the result kept. */
        char w[2048];
        snprintf(w, sizeof w, "the permit for stage %s was lost during the ADD (%s)", c->stage,
                 lease.lost);
        warn(w);
    }
    /* _passed_through: its stderr as ours, its stdout and status as ours. */
    if (r.err.p) write_all(2, r.err.p, r.err.len);
    if (r.spawn_errno || r.out.over) release(c, &lease);
    if (r.spawn_errno) {
        code = 5;
        snprintf(msg, sizeof msg, "delegate %s: cannot exec %.2000s: %s", c->delegate_type,
                 c->delegate_exe, strerror(r.spawn_errno));
        run_free(&r);
        return plugin_error(code, msg);
    }
    if (r.out.over) {
        code = 5;
        snprintf(msg, sizeof msg, "delegate %s printed over %d bytes", c->delegate_type, MAX_OUT);
        run_free(&r);
        return plugin_error(code, msg);
    }
    int blank = 1;
    for (size_t i = 0; i < r.out.len; i++)
        if (!strchr(" \t\n\r\v\f", r.out.p[i])) blank = 0;
    if (r.rc != 0 && blank) {
        release(c, &lease);
        /* " ".join(stderr.split())[-200:] or "no output" */
        struct buf words = {.max = MAX_ERR + 1};
        for (size_t i = 0; i < r.err.len;) {
            while (i < r.err.len && strchr(" \t\n\r\v\f\x1c\x1d\x1e\x1f", r.err.p[i])) i++;
            size_t s = i;
            while (i < r.err.len && !strchr(" \t\n\r\v\f\x1c\x1d\x1e\x1f", r.err.p[i])) i++;
            if (i > s) {
                if (words.len) buf_s(&words, " ");
                buf_add(&words, r.err.p + s, i - s);
            }
        }
        const char *tail = words.len ? words.p + (words.len > 200 ? words.len - 200 : 0)
                                     : "no output";
        code = 5;
        snprintf(msg, sizeof msg, "delegate %s failed (exit %d) with no error JSON: %s",
                 c->delegate_type, r.rc, tail);
        free(words.p);
        run_free(&r);
        return plugin_error(code, msg);
    }
    if (r.out.p) write_all(1, r.out.p, r.out.len);
    int rc = r.rc > 0 ? r.rc : (r.rc ? 1 : 0);
    run_free(&r);
    const char *outcome = rc == 0 ? "ok" : "delegate_error";
    if (release_detached(c, &lease, outcome) == 0) return rc;
    release(c, &lease);
    return finish(rc, outcome);
}

int main(void) {
    g_log.start_s = now_s();
    g_log.wall = wall_s();
    g_log.pid = getpid();
    g_log.fields.max = 1 << 16;
    g_log.delegates.max = 1 << 16;
    /* SIGTERM is only ever taken inside ppoll() (see "signals"). */
    sigemptyset(&g_block_mask);
    sigaddset(&g_block_mask, SIGTERM);
    sigprocmask(SIG_BLOCK, &g_block_mask, &g_orig_mask);
    g_wait_mask = g_orig_mask;
    sigdelset(&g_wait_mask, SIGTERM);
    g_block_mask = g_orig_mask;
    sigaddset(&g_block_mask, SIGTERM);
    struct sigaction sa = {.sa_handler = on_term};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL); /* no SA_RESTART: waits return EINTR */
    signal(SIGPIPE, SIG_IGN);      /* EPIPE instead, as in Python */

    /* stdin, at most MAX_STDIN bytes, as the Python plugin reads it. */
    g_in = malloc(MAX_STDIN);
    if (g_in == NULL) fallback();
    while (g_in_len < MAX_STDIN) {
        struct pollfd p = {.fd = 0, .events = POLLIN};
        if (ppoll(&p, 1, NULL, &g_wait_mask) < 0) {
            if (errno == EINTR && g_term) {
                cni_error(11, "interrupted (SIGTERM) before the call completed");
                return 1;
            }
            if (errno == EINTR) continue;
        }
        ssize_t r = read(0, g_in + g_in_len, MAX_STDIN - g_in_len);
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (r <= 0) break;
        g_in_len += (size_t)r;
    }

    const char *cmd = getenv("CNI_COMMAND");
    if (cmd == NULL || strcmp(cmd, "ADD") != 0) fallback();
    static struct node nodes[MAX_NODES];
    static struct config cfg;
    struct json j;
    int root = j_parse(&j, g_in, g_in_len, nodes, MAX_NODES, 1, 1);
    if (validate(&j, root, &cfg) < 0) fallback();
    g_log.cfg = &cfg;
    return add(&j, root, &cfg);
}
