/* The event loop of ``fast_queues.simulate`` compiled: the same events in the same order,
 * the same float operations in the same order (built with -ffp-contract=off, so that no
 * multiply-add is fused), for every replay but those with the order note (``ordered``),
 * the DES's processor sharing (``SharedCpus``) included.  ``fast_queues._compiled`` prepares
 * its arrays and raises what it returns; ``fast_queues.simulate``'s Python loop is the
 * reference, and tests/test_replay_compiled.py holds the two to the bit.
 *
 * simpy's queue is (time, scheduling order) here: a heap of later events, and the instant
 * being run as a FIFO that an event scheduled at it joins at the end (the Python loop's
 * instants with a list of events each give the same order).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Actions and events: fast_queues' numbering (the module's ROWS, the last action, is checked
 * there at import: a build older than its actions is not used). */
enum { SEND, RECV, EXCHANGE, GLOO, WAIT, ENTER, EXIT, MARK, COMPUTE, SPAWN, SIGNAL, READY,
       JOIN, TOGETHER, ALL, GHOST, ROWS };
enum { E_RESUME, E_TIMER, E_TX_GRANTED, E_RX_GRANTED, E_END, E_TX_RELEASED, E_RX_RELEASED,
       E_DELIVERED, E_DONE, E_SIGNALLED, E_ENDED, E_LATCHED };

#define NONE (-2)          /* a direction's holder: nobody */
#define EARLIER (-1)       /* an earlier collective's message */
#define STAND_IN (-2)      /* a message's host that stands in for one not replayed (a follower's) */
#define REFUSE_ASK 1       /* a request at or before the earlier collective's last there */
#define REFUSE_SETTLED 2   /* a host used before its last process left the earlier one */
#define REFUSE_WORK 3      /* the CPUs' groups visited more often than allowed (``visits``) */

static const double TOUCH_RTOL = 1e-12;
static const double EPS = 1e-15;      /* engine._EPS: residue of no work left */
static const double DUE_S = 1e-15;    /* fast_queues._DUE_S: a pool's job this close is done */

/* engine.residue: whether work left is float residue of none (the job is done). */
static inline int residue(double left) { return left <= EPS * fmax(1.0, left); }

typedef struct { double t; int64_t kind, a, b; } Event;
/* A later instant's events in the order they were pushed (their order at the instant), and the
 * heap's entry for it. */
typedef struct { double t; Event *v; int64_t n, cap; } Slot;
typedef struct { double t; int64_t slot; } Instant;
/* A row of an actions' table (``fast_queues.ROW``). */
/* A row of an actions' table (``fast_queues.ROW``, 16 bytes): its action's kind, its first
 * integer (a message or a bucket), and its second integer (an exchange's message back) or its
 * seconds, whichever its kind has. */
typedef struct { int32_t kind, a; union { int64_t b; double w; } u; } Row;
typedef struct { double w, r; int64_t k; } Job;
typedef struct { Job *v; int64_t n, cap; } Jobs;

/* ``fast_queues.SharedCpus``'s jobs: on a pool, a heap keyed by (the CPU's work done per job
 * at its end, arrival order), ``end`` and ``done0`` its work done when it came; with
 * ``per_job``, groups (below), a job ended or handed back to Python a record with its work
 * left in ``work``. */
typedef struct { double end; int64_t order, k; double threads; int compute; double work, done0; }
    Shared;
typedef struct { Shared *v; int64_t n, cap; } SharedJobs;

/* With ``per_job``, a CPU's jobs of one work left to the bit are one group: the DES takes the
 * same progress off every job at each event, so jobs once equal stay equal, and the ranks'
 * compute jobs that start together on a pool (hundreds while DDP's buckets are reduced) cost
 * one subtraction an event, not one each.  A group's jobs are a list in arrival order through
 * ``S.members`` (``next``: the next one's place, -1 after the last); free places a list too. */
typedef struct { int64_t order, k, next; double threads; int compute; } Member;
typedef struct { double work; int64_t head, tail; } Group;
typedef struct { Group *v; int64_t n, cap, jobs; } Groups;

/* A rate or a contended bandwidth, by the threads it depends on (the Python methods are asked
 * once a key: they keep their own answers too): open addressing, doubled when half full (a
 * pool of hundreds of ranks comes to thousands of keys: busy threads by talking ranks). */
#define MEMO 4096
typedef struct { double key[3]; double value; int used; } Memo;
typedef struct { Memo *v; int64_t cap, n; } Memos;

typedef struct {
    /* the later instants (``Instant``: a heap of them, their slots of events, a table from an
     * instant to its slot), and the queue of the instant being run (``now``) */
    Instant *due; int64_t due_n, due_cap;
    Slot *slots; int64_t slots_n, slots_cap;
    int64_t *spare; int64_t spare_n;
    int64_t *at; int64_t at_n, at_cap;
    Event *queue; int64_t q_head, q_tail, q_cap;
    double now;
    /* inputs */
    Py_ssize_t n, m, hosts;
    const double *lat, *busy, *threshold[2], *start;
    const int64_t *host, *tx, *rx;
    PyObject ***actions; Py_ssize_t *lengths; PyObject **fast;
    /* the actions' table that ROWS actions run rows of: kind, two integers, seconds */
    Py_buffer *chunk_views; const Row **chunk; int64_t *chunk_first; Py_ssize_t nchunks;
    const Row **rows;                   /* per process, its ROWS action's chunk */
    int64_t *sub, *sub_end;             /* per process, its next row (-1: not in a table)
                                           and its ROWS action's end */
    double gloo, compute_rate;
    int64_t pairs, together;
    int one_rate;
    /* state */
    /* (per message: 32-bit processes and messages, a replay of every rank at 65,536 ranks
     * holds millions of messages) */
    char *posted; int32_t *waiting_on; int64_t *pending; char *all_of; int64_t *pc;
    double *finish;
    int64_t *waits;                     /* key awaited, -1: none */
    int64_t *fired; int64_t fired_cap, fired_n;   /* open addressing, -1 empty */
    int64_t *spawned; int64_t sp_head, sp_tail, sp_cap;
    int64_t *latch; int64_t latch_n, latch_cap;
    Jobs *jobs; double *advanced; int64_t *timer;
    int64_t *holder[2], *head[2], *tail[2];
    int32_t *next_wait;
    double *requested[2], *newest_free[2];
    char *passed[2];
    double *quiet; char *has_quiet; int64_t quiet_n;
    PyObject *marks, *sequence;
    double *released_t; int64_t *released_order; int64_t released_n;
    /* followers (``fast_queues.simulate``'s ``lead``): per message its leader (-1: none),
     * when it started, was granted its transmit and its receive direction (or the leader's
     * in its stead), and the followers waiting on its grants (FIFO lists) */
    const int64_t *lead; double *t_start, *t_tx, *t_rx;
    int32_t *wait_head[2], *wait_tail[2], *wait_next;
    int refused;
    /* processor sharing (``SharedCpus``), where given */
    PyObject *cpus;
    int per_job, contended;
    const int64_t *cpu; const double *mult, *nbytes;
    const int64_t *src, *dst;
    double cores, threads;
    Py_ssize_t ncpu;
    double *done, *last_at, *busy_threads, *computing, *talking, *rate_c, *cap_c;
    SharedJobs *shared;
    Groups *groups; Member *members; int64_t members_n, members_cap, members_free;
    int64_t order;
    /* groups visited as the CPUs advance (a pass over a CPU's groups at each of its events:
     * the replay's cost where a pool's jobs part), and the most allowed */
    double visits, visits_max;
    double *started, *compute_s, *comm_s;
    char *has_started, *has_compute, *has_comm;
    Memos rates, caps;
    Shared *ended; int64_t ended_cap;
    Job *done_jobs; int64_t done_cap;
} S;

/* ---- heaps: the later instants by t (distinct), a pool's jobs by (end, order) ---- */
static inline int before(const Instant *x, const Instant *y) { return x->t < y->t; }

static inline int shared_before(const Shared *x, const Shared *y) {
    return x->end < y->end || (x->end == y->end && x->order < y->order);
}

/* NAME_up(v, i, x): x placed at slot i (the heap's new last) and sifted up;
 * NAME_pop(v, &n): the first taken off, the last sifted down in its place.  Four children a
 * node (ARITY): half the levels of a binary heap, its children side by side in memory.  The
 * keys are distinct (an instant has one entry; a pool's jobs' order breaks ties), so any heap
 * pops in the same order. */
#define ARITY 4
#define HEAP(NAME, TYPE, BEFORE)                                                         \
    static inline __attribute__((always_inline)) void NAME##_up(TYPE *v, int64_t i,      \
                                                                TYPE x) {                \
        while (i > 0) {                                                                  \
            int64_t p = (i - 1) / ARITY;                                                 \
            if (!BEFORE(&x, &v[p])) break;                                               \
            v[i] = v[p];                                                                 \
            i = p;                                                                       \
        }                                                                                \
        v[i] = x;                                                                        \
    }                                                                                    \
    static inline __attribute__((always_inline)) TYPE NAME##_pop(TYPE *v, int64_t *size) { \
        TYPE top = v[0], e = v[--*size];                                                 \
        int64_t i = 0, n = *size;                                                        \
        for (;;) {                                                                       \
            int64_t first = ARITY * i + 1, c = first;                                    \
            if (first >= n) break;                                                       \
            int64_t last = first + ARITY < n ? first + ARITY : n;                        \
            for (int64_t j = first + 1; j < last; j++)                                   \
                if (BEFORE(&v[j], &v[c])) c = j;                                         \
            if (!BEFORE(&v[c], &e)) break;                                               \
            v[i] = v[c];                                                                 \
            i = c;                                                                       \
        }                                                                                \
        if (n) v[i] = e;                                                                 \
        return top;                                                                      \
    }
HEAP(instants, Instant, before)
HEAP(jobs, Shared, shared_before)

/* NAME_finished(v, &n, out): ``engine.finished_jobs`` on the n jobs v (in arrival order, WORK
 * their work left): those within residue of none, in their order, else the one closest to
 * done, moved to out (room for n); their count. */
#define FINISHED(NAME, TYPE, WORK)                                                       \
    static int64_t NAME##_finished(TYPE *v, int64_t *n, TYPE *out) {                     \
        int64_t count = 0, kept = 0;                                                     \
        for (int64_t j = 0; j < *n; j++) {                                               \
            if (residue(v[j].WORK)) out[count++] = v[j];                                 \
            else v[kept++] = v[j];                                                       \
        }                                                                                \
        *n = kept;                                                                       \
        if (count || !kept) return count;                                                \
        int64_t best = 0;                                                                \
        for (int64_t j = 1; j < kept; j++)                                               \
            if (v[j].WORK < v[best].WORK) best = j;                                      \
        out[0] = v[best];                                                                \
        memmove(v + best, v + best + 1, (kept - best - 1) * sizeof(TYPE));               \
        --*n;                                                                            \
        return 1;                                                                        \
    }
FINISHED(fixed, Job, w)

/* Room for one more after array v's n items where it is full (n == cap): its capacity
 * doubled (first, the first time); else ``fail`` with MemoryError set. */
#define GROW(v, n, cap, first, fail)                                                     \
    do {                                                                                 \
        if ((n) == (cap)) {                                                              \
            int64_t more_ = (cap) ? 2 * (cap) : (first);                                 \
            void *grown_ = realloc((v), (size_t)more_ * sizeof *(v));                    \
            if (!grown_) { PyErr_NoMemory(); fail; }                                     \
            (v) = grown_; (cap) = more_;                                                 \
        }                                                                                \
    } while (0)

/* The instant's queue with room for one more (what was taken from its front let go). */
static int queue_room(S *s) {
    if (s->q_tail < s->q_cap) return 0;
    if (2 * s->q_head >= s->q_cap) {     /* (half of it taken: slide; else grow, as the
                                           instant's array may come full from its slot) */
        memmove(s->queue, s->queue + s->q_head, (s->q_tail - s->q_head) * sizeof(Event));
        s->q_tail -= s->q_head; s->q_head = 0;
        if (s->q_tail < s->q_cap) return 0;
    }
    GROW(s->queue, s->q_tail, s->q_cap, 1024, return -1);
    return 0;
}

static inline uint64_t mix(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; return x;
}

/* ---- later instants ----
 * Events run in the order of their instants and, at one instant, in the order they were
 * pushed (simpy's).  Each later instant holds its events in a slot in that order; the heap
 * holds an entry an instant, not an event, and a table finds an instant's slot.  Thousands
 * of alike ranks act at one instant in a replay of every rank (a straggler's classes at
 * 65,536 ranks), and the instant's events then move to the queue as one array. */
static inline uint64_t home(S *s, double t) {
    uint64_t u;
    if (t == 0.0) t = 0.0;                 /* (-0.0 is the instant 0.0) */
    memcpy(&u, &t, sizeof u);
    return mix(u) & (uint64_t)(s->at_cap - 1);
}

/* The table's place for instant t: its slot's, or the empty place where it would go. */
static inline uint64_t place(S *s, double t) {
    uint64_t mask = s->at_cap - 1, i = home(s, t);
    while (s->at[i] >= 0 && s->slots[s->at[i]].t != t) i = (i + 1) & mask;
    return i;
}

static int at_grow(S *s) {
    int64_t cap = s->at_cap ? 2 * s->at_cap : 1024, *old = s->at, oldcap = s->at_cap;
    int64_t *at = malloc(cap * sizeof(int64_t));
    if (!at) { PyErr_NoMemory(); return -1; }
    memset(at, 0xff, cap * sizeof(int64_t));
    s->at = at; s->at_cap = cap;
    for (int64_t j = 0; j < oldcap; j++)
        if (old[j] >= 0) s->at[place(s, s->slots[old[j]].t)] = old[j];
    free(old);
    return 0;
}

/* Instant t's place emptied (linear probing: the entries after it that may move up do). */
static void at_remove(S *s, uint64_t i) {
    uint64_t mask = s->at_cap - 1, j = i;
    s->at[i] = -1;
    s->at_n--;
    for (;;) {
        j = (j + 1) & mask;
        int64_t k = s->at[j];
        if (k < 0) return;
        uint64_t h = home(s, s->slots[k].t);
        /* (k stays unless its home lies cyclically outside (i, j]) */
        if (i <= j ? (h <= i || h > j) : (h <= i && h > j)) {
            s->at[i] = k; s->at[j] = -1; i = j;
        }
    }
}

/* A slot for a new later instant t, on the heap and in the table: its index. */
static int64_t new_instant(S *s, double t) {
    if (2 * (s->at_n + 1) > s->at_cap && at_grow(s) < 0) return -1;
    int64_t k;
    if (s->spare_n) {
        k = s->spare[--s->spare_n];
    } else {
        if (s->slots_n == s->slots_cap) {
            int64_t cap = s->slots_cap ? 2 * s->slots_cap : 1024;
            Slot *v = realloc(s->slots, cap * sizeof(Slot));
            int64_t *w = realloc(s->spare, cap * sizeof(int64_t));
            if (v) s->slots = v;
            if (w) s->spare = w;
            if (!v || !w) { PyErr_NoMemory(); return -1; }
            s->slots_cap = cap;
        }
        k = s->slots_n++;
        s->slots[k].v = NULL; s->slots[k].cap = 0;
    }
    s->slots[k].t = t; s->slots[k].n = 0;
    s->at[place(s, t)] = k;
    s->at_n++;
    GROW(s->due, s->due_n, s->due_cap, 1024, return -1);
    Instant entry = {t, k};
    instants_up(s->due, s->due_n++, entry);
    return k;
}

/* An event at the instant being run joins the end of that instant's queue; a later one the
 * end of its instant's slot. */
static inline __attribute__((always_inline)) int push(S *s, double t, int kind, int64_t a,
                                                      int64_t b) {
    Event e = {t, kind, a, b};
    if (t == s->now) {
        if (s->q_tail == s->q_cap && queue_room(s) < 0) return -1;
        s->queue[s->q_tail++] = e;
        return 0;
    }
    int64_t k = s->at_cap ? s->at[place(s, t)] : -1;
    if (k < 0 && (k = new_instant(s, t)) < 0) return -1;
    Slot *slot = &s->slots[k];
    GROW(slot->v, slot->n, slot->cap, 8, return -1);
    slot->v[slot->n++] = e;
    return 0;
}

/* ---- signals and ends fired: a set of keys ---- */

static int fired_has(S *s, int64_t key) {
    uint64_t mask = s->fired_cap - 1, i = mix(key) & mask;
    while (s->fired[i] != -1) {
        if (s->fired[i] == key) return 1;
        i = (i + 1) & mask;
    }
    return 0;
}

static int fired_add(S *s, int64_t key) {
    if (2 * (s->fired_n + 1) > s->fired_cap) {
        int64_t cap = s->fired_cap * 2, *old = s->fired, oldcap = s->fired_cap;
        s->fired = malloc(cap * sizeof(int64_t));
        if (!s->fired) { s->fired = old; PyErr_NoMemory(); return -1; }
        memset(s->fired, 0xff, cap * sizeof(int64_t));
        s->fired_cap = cap; s->fired_n = 0;
        for (int64_t j = 0; j < oldcap; j++)
            if (old[j] != -1) fired_add(s, old[j]);
        free(old);
    }
    uint64_t mask = s->fired_cap - 1, i = mix(key) & mask;
    while (s->fired[i] != -1) {
        if (s->fired[i] == key) return 0;
        i = (i + 1) & mask;
    }
    s->fired[i] = key; s->fired_n++;
    return 0;
}

/* A signal (process, i) and a process's end (process, None) as one key. */
static inline int64_t key_of(int64_t process, int64_t signal) {
    return process * ((int64_t)1 << 24) + (signal + 1);
}

static int grow(int64_t **v, int64_t *cap, int64_t need) {
    if (need <= *cap) return 0;
    int64_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    int64_t *w = realloc(*v, c * sizeof(int64_t));
    if (!w) { PyErr_NoMemory(); return -1; }
    *v = w; *cap = c;
    return 0;
}

static int spawn(S *s, int64_t k) {
    if (s->sp_tail == s->sp_cap) {
        if (s->sp_head > 0) {      /* (slide the queue back to the front) */
            memmove(s->spawned, s->spawned + s->sp_head,
                    (s->sp_tail - s->sp_head) * sizeof(int64_t));
            s->sp_tail -= s->sp_head; s->sp_head = 0;
        }
        if (grow(&s->spawned, &s->sp_cap, s->sp_tail + 1) < 0) return -1;
    }
    s->spawned[s->sp_tail++] = k;
    return 0;
}

/* ---- NIC directions ---- */
static int grant(S *s, int d, int64_t h, double t) {
    if (s->holder[d][h] == NONE && s->head[d][h] >= 0) {
        int64_t m = s->head[d][h];
        s->head[d][h] = s->next_wait[m];          /* (-1: none) */
        if (s->head[d][h] < 0) s->tail[d][h] = -1;
        s->holder[d][h] = m;
        return push(s, t, d == 0 ? E_TX_GRANTED : E_RX_GRANTED, m, 0);
    }
    return 0;
}

static int settled(S *s, int64_t h, double t) {
    double q = s->quiet[h];
    s->has_quiet[h] = 0; s->quiet_n--;
    if (t <= q + TOUCH_RTOL * fmax(1.0, fabs(t))) { s->refused = REFUSE_SETTLED; return -1; }
    return 0;
}

static int request(S *s, int d, int64_t h, int64_t m, double t) {
    if (!s->passed[d][h]) {
        if (t <= s->threshold[d][h] + TOUCH_RTOL * fmax(1.0, fabs(t))) {
            s->refused = REFUSE_ASK;
            return -1;
        }
        if (s->has_quiet[h] && settled(s, h, t) < 0) return -1;
        s->passed[d][h] = 1;
    }
    int free = s->holder[d][h] == NONE && s->head[d][h] < 0;
    s->requested[d][h] = t;
    if (free) {
        s->holder[d][h] = m;
        return push(s, t, d == 0 ? E_TX_GRANTED : E_RX_GRANTED, m, 0);
    }
    if (s->holder[d][h] == NONE && grant(s, d, h, t) < 0) return -1;
    s->next_wait[m] = -1;
    if (s->tail[d][h] >= 0) s->next_wait[s->tail[d][h]] = m;
    else s->head[d][h] = m;
    s->tail[d][h] = m;
    return 0;
}

static int cpu_message_s(S *s, int64_t what, double *out);

/* A follower waits for its leader's grant of direction d (0: transmit, 1: receive). */
static void follow(S *s, int d, int64_t f) {
    int64_t l = s->lead[f];
    s->wait_next[f] = -1;
    if (s->wait_tail[d][l] >= 0) s->wait_next[s->wait_tail[d][l]] = (int32_t)f;
    else s->wait_head[d][l] = (int32_t)f;
    s->wait_tail[d][l] = (int32_t)f;
}

static inline int transmit(S *s, int64_t m, double t) {
    double wire = s->busy[m];
    if (s->cpus && cpu_message_s(s, m, &wire) < 0) return -1;
    return push(s, t + wire, E_END, m, 0);
}

static int post(S *s, int64_t m, double t) {
    if (++s->posted[m] < 2) return 0;
    if (s->lead) s->t_start[m] = t;
    if (s->tx[m] == -1) return push(s, t + (s->lat[m] + s->busy[m]), E_DELIVERED, m, 0);
    if (s->tx[m] == STAND_IN) {         /* its sender's direction is its leader's */
        if (isnan(s->t_tx[s->lead[m]])) { follow(s, 0, m); return 0; }
        s->t_tx[m] = t;
        return request(s, 1, s->rx[m], m, t);
    }
    return request(s, 0, s->tx[m], m, t);
}

/* ---- a host's CPU: ``engine.ProcessorSharingCPU`` at fixed rates ---- */
static void advance(S *s, int64_t h, double t) {
    Jobs *running = &s->jobs[h];
    if (running->n && t > s->advanced[h]) {
        double elapsed = t - s->advanced[h];
        for (int64_t j = 0; j < running->n; j++) running->v[j].w -= elapsed * running->v[j].r;
    }
    s->advanced[h] = t;
}

static double soonest(S *s, Jobs *running) {
    if (s->one_rate) {
        double w = running->v[0].w;
        for (int64_t j = 1; j < running->n; j++)
            if (running->v[j].w < w) w = running->v[j].w;
        return w / running->v[0].r;
    }
    double best = running->v[0].w / running->v[0].r;
    for (int64_t j = 1; j < running->n; j++) {
        double x = running->v[j].w / running->v[j].r;
        if (x < best) best = x;
    }
    return best;
}

static inline double nonnegative(double x) { return x > 0.0 ? x : 0.0; }

static int reschedule(S *s, int64_t h, double t) {
    int64_t version = ++s->timer[h];
    Jobs *running = &s->jobs[h];
    if (running->n) return push(s, t + nonnegative(soonest(s, running)), E_TIMER, h, version);
    return 0;
}

static int add_job(S *s, int64_t h, double w, double r, int64_t k) {
    Jobs *running = &s->jobs[h];
    GROW(running->v, running->n, running->cap, 4, return -1);
    running->v[running->n++] = (Job){w, r, k};
    return 0;
}

/* ---- ``SharedCpus``: the DES's processor sharing ---- */
static inline uint64_t memo_slot(const double key[3], int64_t cap) {
    uint64_t bits[3];
    memcpy(bits, key, sizeof bits);
    return mix(bits[0] ^ mix(bits[1] ^ mix(bits[2]))) & (uint64_t)(cap - 1);
}

/* The table's entry for key: its own, or the empty one where it would go. */
static Memo *memo_find(Memos *memo, const double key[3]) {
    uint64_t i = memo_slot(key, memo->cap);
    for (;; i = (i + 1) & (uint64_t)(memo->cap - 1)) {   /* (never full: at most half) */
        Memo *e = &memo->v[i];
        if (!e->used || !memcmp(e->key, key, 3 * sizeof(double))) return e;
    }
}

static int memo_get(S *s, Memos *memo, const char *method, int count, double a, double b,
                    double c, double *out) {
    double key[3] = {a, b, count == 3 ? c : 0.0};
    Memo *e = memo_find(memo, key);
    if (e->used) { *out = e->value; return 0; }
    PyObject *r = count == 3 ? PyObject_CallMethod(s->cpus, method, "ddd", a, b, c)
                             : PyObject_CallMethod(s->cpus, method, "dd", a, b);
    if (!r) return -1;
    double v = PyFloat_AsDouble(r);
    Py_DECREF(r);
    if (v == -1.0 && PyErr_Occurred()) return -1;
    if (2 * (memo->n + 1) > memo->cap) {
        Memos bigger = {calloc(2 * memo->cap, sizeof(Memo)), 2 * memo->cap, memo->n};
        if (!bigger.v) { PyErr_NoMemory(); return -1; }
        for (int64_t j = 0; j < memo->cap; j++)
            if (memo->v[j].used) *memo_find(&bigger, memo->v[j].key) = memo->v[j];
        free(memo->v);
        *memo = bigger;
        e = memo_find(memo, key);
    }
    memcpy(e->key, key, sizeof key); e->value = v; e->used = 1;
    memo->n++;
    *out = v;
    return 0;
}

static int cpu_rate(S *s, int64_t c, double *out) {
    if (isnan(s->rate_c[c]) && memo_get(s, &s->rates, "rate_at", 3, s->busy_threads[c],
                                        s->computing[c], s->talking[c], &s->rate_c[c]) < 0)
        return -1;
    *out = s->rate_c[c];
    return 0;
}

static int cpu_cap(S *s, int64_t c, double *out) {
    if (isnan(s->cap_c[c]) && memo_get(s, &s->caps, "cap_at", 2, s->computing[c],
                                       s->talking[c], 0.0, &s->cap_c[c]) < 0)
        return -1;
    *out = s->cap_c[c];
    return 0;
}

/* Jobs on CPU c. */
static inline int64_t cpu_jobs(S *s, int64_t c) {
    return s->per_job ? s->groups[c].jobs : s->shared[c].n;
}

static int cpu_advance(S *s, int64_t c, double t) {
    double last = s->last_at[c];
    if (t > last && cpu_jobs(s, c)) {
        double rate;
        if (cpu_rate(s, c, &rate) < 0) return -1;
        double progress = (t - last) * rate;
        if (s->per_job) {
            Groups *gs = &s->groups[c];
            s->visits += (double)gs->n;
            if (s->visits > s->visits_max) { s->refused = REFUSE_WORK; return -1; }
            for (int64_t g = 0; g < gs->n; g++) gs->v[g].work -= progress;
        } else {
            s->done[c] += progress;
        }
    }
    s->last_at[c] = t;
    return 0;
}

/* A job come to a CPU with ``per_job``: its group's last, a group of its own if no group's
 * work left is its work. */
static int group_add(S *s, int64_t c, double work, Member job) {
    if (s->members_free < 0) {
        GROW(s->members, s->members_n, s->members_cap, 64, return -1);
        s->members[s->members_n].next = -1;
        s->members_free = s->members_n++;
    }
    int64_t m = s->members_free;
    s->members_free = s->members[m].next;
    job.next = -1;
    s->members[m] = job;
    Groups *gs = &s->groups[c];
    gs->jobs++;
    for (int64_t g = 0; g < gs->n; g++)
        if (gs->v[g].work == work) {
            s->members[gs->v[g].tail].next = m;
            gs->v[g].tail = m;
            return 0;
        }
    GROW(gs->v, gs->n, gs->cap, 8, return -1);
    gs->v[gs->n++] = (Group){work, m, m};
    return 0;
}

/* The first job of group g on CPU c taken off (and the group, if it was its last) into out. */
static void group_take(S *s, int64_t c, int64_t g, Shared *out) {
    Groups *gs = &s->groups[c];
    Group *grp = &gs->v[g];
    int64_t m = grp->head;
    Member *x = &s->members[m];
    *out = (Shared){0.0, x->order, x->k, x->threads, x->compute, grp->work, 0.0};
    grp->head = x->next;
    x->next = s->members_free;
    s->members_free = m;
    gs->jobs--;
    if (grp->head < 0) gs->v[g] = gs->v[--gs->n];
}

/* ``engine.finished_jobs`` on CPU c's groups: the jobs of every group within residue of no
 * work left, else the one closest to done (the first come of those), moved to out (room for
 * every job); their count. */
static int64_t group_finished(S *s, int64_t c, Shared *out) {
    Groups *gs = &s->groups[c];
    int64_t count = 0;
    for (int64_t g = 0; g < gs->n;) {
        if (!residue(gs->v[g].work)) { g++; continue; }
        int64_t n = gs->n;
        while (gs->n == n) group_take(s, c, g, &out[count++]);   /* (then g holds the last) */
    }
    if (count || !gs->n) return count;
    int64_t best = 0;
    for (int64_t g = 1; g < gs->n; g++) {
        double w = gs->v[g].work, b = gs->v[best].work;
        if (w < b || (w == b && s->members[gs->v[g].head].order
                                < s->members[gs->v[best].head].order))
            best = g;
    }
    group_take(s, c, best, &out[0]);
    return 1;
}

static int shared_add(S *s, SharedJobs *jobs, Shared job) {
    GROW(jobs->v, jobs->n, jobs->cap, 8, return -1);
    jobs_up(jobs->v, jobs->n++, job);
    return 0;
}

/* ``S.ended`` with room for every one of CPU c's jobs: 0, or -1 with MemoryError set. */
static int ended_room(S *s, int64_t c) {
    int64_t n = cpu_jobs(s, c);
    if (s->ended_cap < n) {
        Shared *v = realloc(s->ended, n * sizeof(Shared));
        if (!v) { PyErr_NoMemory(); return -1; }
        s->ended = v; s->ended_cap = n;
    }
    return 0;
}

static int by_order(const void *x, const void *y) {
    int64_t a = ((const Shared *)x)->order, b = ((const Shared *)y)->order;
    return (a > b) - (a < b);
}

static int64_t cpu_arrive(S *s, int64_t k, double t, double work, int compute) {
    int64_t c = s->cpu[k];
    if (cpu_advance(s, c, t) < 0) return -1;
    double threads = (compute ? s->threads : 1.0) * s->mult[k];
    if (s->per_job) {
        if (group_add(s, c, work, (Member){s->order, k, -1, threads, compute}) < 0) return -1;
    } else {
        Shared job = {s->done[c] + work, s->order, k, threads, compute, work, s->done[c]};
        if (shared_add(s, &s->shared[c], job) < 0) return -1;
    }
    s->order++;
    s->busy_threads[c] += threads;
    s->rate_c[c] = s->cap_c[c] = NAN;
    if (compute) s->computing[c] += threads;
    s->started[k] = t; s->has_started[k] = 1;
    return c;
}

static int64_t cpu_communicating(S *s, int64_t k, double t, int delta) {
    int64_t c = s->cpu[k];
    if (cpu_advance(s, c, t) < 0) return -1;
    s->talking[c] += delta * s->mult[k];
    s->rate_c[c] = s->cap_c[c] = NAN;
    s->comm_s[k] = s->comm_s[k] - delta * t; s->has_comm[k] = 1;
    return c;
}

/* When the CPU's first job ends at its current rate; 1 if it has one. */
static int cpu_next_end(S *s, int64_t c, double t, double *end) {
    SharedJobs *jobs = &s->shared[c];
    if (!cpu_jobs(s, c)) return 0;
    double rate;
    if (cpu_rate(s, c, &rate) < 0) return -1;
    if (s->per_job) {
        Groups *gs = &s->groups[c];
        double w = gs->v[0].work;
        for (int64_t g = 1; g < gs->n; g++)
            if (gs->v[g].work < w) w = gs->v[g].work;
        *end = t + nonnegative(w / rate);
    } else {
        double left = jobs->v[0].work - (s->done[c] - jobs->v[0].done0);
        *end = t + nonnegative(left) / rate;
    }
    return 1;
}

static int cpu_reschedule(S *s, int64_t c, double t) {
    int64_t version = ++s->timer[c];
    double end;
    int has = cpu_next_end(s, c, t, &end);
    if (has < 0) return -1;
    return has ? push(s, end, E_TIMER, c, version) : 0;
}

/* ``SharedCpus.finish_due``: the jobs ending now resumed in arrival order. */
static int cpu_finish_due(S *s, int64_t c, double t) {
    if (cpu_advance(s, c, t) < 0) return -1;
    SharedJobs *jobs = &s->shared[c];
    int64_t count = 0;
    if (ended_room(s, c) < 0) return -1;
    if (s->per_job) {
        count = group_finished(s, c, s->ended);
    } else {
        s->ended[count++] = jobs_pop(jobs->v, &jobs->n);
        while (jobs->n) {
            double left = jobs->v[0].work - (s->done[c] - jobs->v[0].done0);
            if (left > DUE_S * fmax(1.0, left)) break;
            s->ended[count++] = jobs_pop(jobs->v, &jobs->n);
        }
    }
    if (!cpu_jobs(s, c)) s->done[c] = 0.0;
    if (count > 1) qsort(s->ended, count, sizeof(Shared), by_order);   /* (by arrival) */
    s->rate_c[c] = s->cap_c[c] = NAN;
    for (int64_t i = 0; i < count; i++) {
        Shared *job = &s->ended[i];
        s->busy_threads[c] -= job->threads;
        if (job->compute) {
            s->computing[c] -= job->threads;
            /* (a job's seconds, then added: the DES's sum) */
            s->compute_s[job->k] = s->compute_s[job->k] + (t - s->started[job->k]);
            s->has_compute[job->k] = 1;
        }
    }
    for (int64_t i = 0; i < count; i++)
        if (push(s, t, E_RESUME, s->ended[i].k, 0) < 0) return -1;
    return 0;
}

/* ``SharedCpus.message_s``: the wire time, or the contended bandwidth's at the busier end. */
static int cpu_message_s(S *s, int64_t what, double *out) {
    double busy = s->busy[what];
    if (!s->contended) { *out = busy; return 0; }
    int64_t c = s->cpu[s->src[what]], d = s->cpu[s->dst[what]];
    double cap, other;
    if (cpu_cap(s, c, &cap) < 0) return -1;
    if (d != c) {
        if (cpu_cap(s, d, &other) < 0) return -1;
        if (other < cap) cap = other;
    }
    double x = s->nbytes[what] * (1.0 / cap);    /* (``fast_queues.capped_s``) */
    *out = x > busy ? x : busy;
    return 0;
}

/* ---- a process's program ---- */
static inline PyObject *item(PyObject *action, Py_ssize_t i) {
    return PyTuple_Check(action) ? PyTuple_GET_ITEM(action, i) : PyList_GET_ITEM(action, i);
}

static int64_t as_index(PyObject *x) {
    return PyLong_CheckExact(x) ? PyLong_AsLongLong(x) : PyNumber_AsSsize_t(x, NULL);
}

static int sequence_append(S *s, int64_t k) {
    if (s->sequence == Py_None) return 0;
    PyObject *x = PyLong_FromLongLong(k);
    if (!x) return -1;
    int r = PyList_Append(s->sequence, x);
    Py_DECREF(x);
    return r;
}

static int each_message(S *s, PyObject *seq, int64_t k, int side, int post_them, double t) {
    PyObject *f = PySequence_Fast(seq, "a message list");
    if (!f) return -1;
    Py_ssize_t c = PySequence_Fast_GET_SIZE(f);
    PyObject **xs = PySequence_Fast_ITEMS(f);
    for (Py_ssize_t j = 0; j < c; j++) {
        int64_t m = as_index(xs[j]);
        if (m == -1 && PyErr_Occurred()) { Py_DECREF(f); return -1; }
        if (side >= 0) s->waiting_on[2 * m + side] = k;
        if (post_them && post(s, m, t) < 0) { Py_DECREF(f); return -1; }
    }
    Py_DECREF(f);
    return 0;
}

/* One action of process k at t, its arguments decoded (``action``: the tuple, for the
 * message lists of ALL and GHOST): 1 where the process now waits, 0 where it goes on, -1 on
 * an error.  The caller has set where the process goes on once it resumes (the next
 * action, or its next row). */
static int act(S *s, int64_t k, long kind, int64_t a, int64_t b, double w, PyObject *action,
               double t) {
    if (kind == GLOO || kind == COMPUTE) {
        if (w > 0) {
            int64_t h = s->host[k];
            if (s->quiet_n && s->has_quiet[h] && settled(s, h, t) < 0) return -1;
            if (s->cpus) {
                int64_t c = cpu_arrive(s, k, t, w, kind == COMPUTE);
                return c < 0 || cpu_reschedule(s, c, t) < 0 ? -1 : 1;
            }
            advance(s, h, t);
            double rate = kind == GLOO ? s->gloo : s->compute_rate;
            if (add_job(s, h, w, rate, k) < 0) return -1;
            int64_t version = ++s->timer[h];
            Jobs *running = &s->jobs[h];
            double due = running->n == 1 ? w / rate : soonest(s, running);
            return push(s, t + nonnegative(due), E_TIMER, h, version) < 0 ? -1 : 1;
        }
        return push(s, t, E_RESUME, k, 0) < 0 ? -1 : 1;
    }
    if ((kind == EXCHANGE || kind == SEND || kind == RECV)
            && (a < 0 || a >= s->m || (kind == EXCHANGE && (b < 0 || b >= s->m)))) {
        PyErr_SetString(PyExc_ValueError, "an action's message is past the messages");
        return -1;
    }
    if (kind == EXCHANGE) {
        s->pending[k] = 2; s->all_of[k] = 1;
        s->waiting_on[2 * a] = k; s->waiting_on[2 * b + 1] = k;
        if (post(s, a, t) < 0) return -1;
        return post(s, b, t) < 0 ? -1 : 1;
    }
    if (kind == SEND || kind == RECV) {
        s->pending[k] = 1; s->all_of[k] = 0;
        s->waiting_on[2 * a + (kind == RECV)] = k;
        return post(s, a, t) < 0 ? -1 : 1;
    }
    if (kind == ALL) {
        PyObject *sent = item(action, 1), *got = item(action, 2);
        Py_ssize_t ns = PyObject_Length(sent), ng = PyObject_Length(got);
        if (ns < 0 || ng < 0) return -1;
        s->pending[k] = ns + ng; s->all_of[k] = 1;
        if (each_message(s, sent, k, 0, 0, t) < 0 || each_message(s, got, k, 1, 0, t) < 0
                || each_message(s, sent, k, -1, 1, t) < 0
                || each_message(s, got, k, -1, 1, t) < 0)
            return -1;
        return 1;
    }
    if (kind == WAIT) {
        if (w > 0) return push(s, t + w, E_RESUME, k, 0) < 0 ? -1 : 1;
    } else if (kind == MARK) {
        PyObject *x = PyFloat_FromDouble(t);
        if (!x) return -1;
        int r = PyList_Append(PyList_GET_ITEM(s->marks, k), x);
        Py_DECREF(x);
        if (r < 0 || sequence_append(s, k) < 0) return -1;
    } else if (kind == GHOST) {
        if (each_message(s, item(action, 1), k, -1, 1, t) < 0) return -1;
    } else if (kind == TOGETHER) {
        if (grow(&s->latch, &s->latch_cap, s->latch_n + 1) < 0) return -1;
        s->latch[s->latch_n++] = k;
        if (s->latch_n == s->together && push(s, t, E_LATCHED, 0, 0) < 0) return -1;
        return 1;
    } else if (kind == SPAWN) {
        if (spawn(s, k - s->pairs) < 0) return -1;
    } else if (kind == SIGNAL) {
        if (push(s, t, E_SIGNALLED, k - s->pairs, a) < 0) return -1;
    } else if (kind == READY || kind == JOIN) {
        int64_t key = kind == READY ? key_of(k, a) : key_of(k - s->pairs, -1);
        if (!fired_has(s, key)) { s->waits[k] = key; return 1; }
    } else if ((kind == ENTER || kind == EXIT) && s->cpus) {
        int64_t c = cpu_communicating(s, k, t, kind == ENTER ? 1 : -1);
        if (c < 0 || cpu_reschedule(s, c, t) < 0) return -1;
    } else if (kind == ENTER || kind == EXIT) {
        advance(s, s->host[k], t);
        if (reschedule(s, s->host[k], t) < 0) return -1;
    } else {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "unknown action %ld", kind);
        return -1;
    }
    return 0;
}

/* Process k's rows from its next one (``sub``) to the end of its ROWS action
 * (``sub_end``), the action after that one being ``after``: 1 where the process waits in
 * them, 0 where they are done, -1 on an error.  A process waiting in them keeps its place at
 * the ROWS action and its next row, so that it goes on there without reading the action
 * again; waiting at the last row, it goes on after the action. */
static int run_rows(S *s, int64_t k, Py_ssize_t after, double t) {
    int64_t end = s->sub_end[k];
    for (int64_t r = s->sub[k]; r < end; r++) {
        const Row *row = &s->rows[k][r];
        long kind = (long)row->kind;
        if (kind == ALL || kind == ROWS) {
            PyErr_Format(PyExc_ValueError, "action %ld in the actions' table", kind);
            return -1;
        }
        if (kind == GHOST) {            /* (a row posts one side: ``row->a``'s) */
            if (row->a < 0 || row->a >= s->m) {
                PyErr_SetString(PyExc_ValueError, "an action's message is past the messages");
                return -1;
            }
            if (post(s, row->a, t) < 0) return -1;
            continue;
        }
        int more = r + 1 < end;
        s->pc[k] = more ? after - 1 : after;
        s->sub[k] = more ? r + 1 : -1;
        int x = act(s, k, kind, row->a, row->u.b, row->u.w, NULL, t);
        if (x) return x;
    }
    s->sub[k] = -1;
    return 0;
}

/* Process k runs its program from its place at t until it waits or ends.  A ROWS action
 * (ROWS, first, end) runs the rows first .. end - 1 of the actions' table (``run_rows``). */
static int run_rank(S *s, int64_t k, double t) {
    PyObject **program = s->actions[k];
    Py_ssize_t i = s->pc[k], last = s->lengths[k];
    if (s->sub[k] >= 0) {               /* (waiting in a ROWS action's rows) */
        int x = run_rows(s, k, i + 1, t);
        if (x) return x < 0 ? -1 : 0;
        i++;
    }
    while (i < last) {
        PyObject *action = program[i++];
        long kind = PyLong_AsLong(item(action, 0));
        int64_t a = 0, b = 0;
        double w = 0.0;
        if (kind == ROWS) {
            int64_t r = as_index(item(action, 1)), end = as_index(item(action, 2));
            if ((r == -1 || end == -1) && PyErr_Occurred()) return -1;
            /* (the chunk that holds them: the last that begins at or before the first) */
            Py_ssize_t lo = 0, hi = s->nchunks;
            while (hi - lo > 1) {
                Py_ssize_t mid = (lo + hi) / 2;
                if (s->chunk_first[mid] <= r) lo = mid; else hi = mid;
            }
            if (r < 0 || r > end || !s->nchunks || end > s->chunk_first[lo + 1]) {
                PyErr_SetString(PyExc_ValueError, "a ROWS action past its chunk of the table");
                return -1;
            }
            s->rows[k] = s->chunk[lo];
            s->sub[k] = r - s->chunk_first[lo]; s->sub_end[k] = end - s->chunk_first[lo];
            int x = run_rows(s, k, i, t);
            if (x) return x < 0 ? -1 : 0;
            continue;
        }
        if (kind == GLOO || kind == COMPUTE || kind == WAIT) {
            w = PyFloat_AsDouble(item(action, 1));
            if (w == -1.0 && PyErr_Occurred()) return -1;
        } else if (kind == EXCHANGE) {
            a = as_index(item(action, 1)); b = as_index(item(action, 2));
            if ((a == -1 || b == -1) && PyErr_Occurred()) return -1;
        } else if (kind == SEND || kind == RECV || kind == SIGNAL || kind == READY) {
            a = as_index(item(action, 1));
            if (a == -1 && PyErr_Occurred()) return -1;
        }
        s->pc[k] = i;
        int x = act(s, k, kind, a, b, w, action, t);
        if (x) return x < 0 ? -1 : 0;
    }
    s->pc[k] = i;
    s->finish[k] = t;
    if (sequence_append(s, k) < 0) return -1;
    if (k < s->pairs) return push(s, t, E_ENDED, k, 0);
    return 0;
}

static int run_spawned(S *s, double t) {
    while (s->sp_head < s->sp_tail) {
        int64_t k = s->spawned[s->sp_head++];
        if (run_rank(s, k, t) < 0) return -1;
    }
    s->sp_head = s->sp_tail = 0;
    return 0;
}

/* The jobs done at a timer (``engine.finished_jobs``), resumed in arrival order. */
static int on_timer(S *s, int64_t h, int64_t version, double t) {
    if (version != s->timer[h]) return 0;
    if (s->cpus) {                    /* (h is a CPU's index) */
        if (cpu_finish_due(s, h, t) < 0) return -1;
        return cpu_reschedule(s, h, t);
    }
    advance(s, h, t);
    Jobs *running = &s->jobs[h];
    if (running->n == 1) {            /* (done, by residue or as the closest) */
        running->n = 0;
        s->timer[h] = version + 1;
        return push(s, t, E_RESUME, running->v[0].k, 0);
    }
    if (s->done_cap < running->n) {
        Job *v = realloc(s->done_jobs, running->n * sizeof(Job));
        if (!v) { PyErr_NoMemory(); return -1; }
        s->done_jobs = v; s->done_cap = running->n;
    }
    int64_t count = fixed_finished(running->v, &running->n, s->done_jobs);
    for (int64_t i = 0; i < count; i++)
        if (push(s, t, E_RESUME, s->done_jobs[i].k, 0) < 0) return -1;
    return reschedule(s, h, t);
}

/* The next event: the instant's queue first; else the first later instant's, its slot's
 * events becoming the queue (the slot keeps the queue's room, for another instant). */
static inline int next(S *s, Event *e) {
    if (s->q_head == s->q_tail) {
        if (!s->due_n) return 0;
        Instant first = instants_pop(s->due, &s->due_n);
        Slot *slot = &s->slots[first.slot];
        at_remove(s, place(s, first.t));
        s->now = first.t;
        Event *v = s->queue;
        int64_t cap = s->q_cap;
        s->queue = slot->v; s->q_cap = slot->cap;
        s->q_head = 0; s->q_tail = slot->n;
        slot->v = v; slot->cap = cap; slot->n = 0;
        s->spare[s->spare_n++] = first.slot;
    }
    *e = s->queue[s->q_head++];
    return 1;
}

static int loop(S *s) {
    Event e;
    int more;
    while ((more = next(s, &e)) > 0) {
        double t = s->now;            /* (the instant's first time, as Python's key for it) */
        int64_t what = e.a;
        switch (e.kind) {
        case E_DONE:
            for (int side = 0; side < 2; side++) {
                int64_t k = s->waiting_on[2 * what + side];
                if (k < 0) continue;          /* a ghost's side */
                if (--s->pending[k] == 0) {
                    if (s->all_of[k]) {
                        if (push(s, t, E_RESUME, k, 0) < 0) return -1;
                    } else if (run_rank(s, k, t) < 0) {
                        return -1;
                    }
                }
                if (run_spawned(s, t) < 0) return -1;
            }
            break;
        case E_RESUME:
            if (run_rank(s, what, t) < 0) return -1;
            break;
        case E_TIMER:
            if (on_timer(s, what, e.b, t) < 0) return -1;
            continue;
        case E_TX_GRANTED:
            if (!s->lead) {
                if (request(s, 1, s->rx[what], what, t) < 0) return -1;
                break;
            }
            s->t_tx[what] = t;
            if (s->rx[what] != STAND_IN) {
                if (request(s, 1, s->rx[what], what, t) < 0) return -1;
            } else if (isnan(s->t_rx[s->lead[what]])) {   /* its receiver's is its leader's */
                follow(s, 1, what);
            } else {
                s->t_rx[what] = t;
                if (transmit(s, what, t) < 0) return -1;
            }
            for (int32_t f = s->wait_head[0][what]; f >= 0; f = s->wait_next[f]) {
                s->t_tx[f] = t;
                if (request(s, 1, s->rx[f], f, t) < 0) return -1;
            }
            s->wait_head[0][what] = s->wait_tail[0][what] = -1;
            break;
        case E_RX_GRANTED:
            if (transmit(s, what, t) < 0) return -1;
            if (!s->lead) break;
            s->t_rx[what] = t;
            for (int32_t f = s->wait_head[1][what]; f >= 0; f = s->wait_next[f]) {
                s->t_rx[f] = t;
                if (transmit(s, f, t) < 0) return -1;
            }
            s->wait_head[1][what] = s->wait_tail[1][what] = -1;
            break;
        case E_DELIVERED:
            if (push(s, t, E_DONE, what, 0) < 0) return -1;
            break;
        case E_END: {
            /* release receive, then transmit; a release with nobody waiting is not an event */
            /* (a follower holds only its own side's direction) */
            int64_t h = s->rx[what];
            if (h >= 0) {
                s->holder[1][h] = NONE;
                s->newest_free[1][h] = t;
                if (s->head[1][h] >= 0 && push(s, t, E_RX_RELEASED, h, 0) < 0) return -1;
            }
            h = s->tx[what];
            if (h >= 0) {
                s->holder[0][h] = NONE;
                s->newest_free[0][h] = t;
                if (s->head[0][h] >= 0 && push(s, t, E_TX_RELEASED, h, 0) < 0) return -1;
            }
            if (s->released_t) {
                if (isnan(s->released_t[what])) s->released_order[s->released_n++] = what;
                s->released_t[what] = t;
            }
            if (push(s, t + s->lat[what], E_DELIVERED, what, 0) < 0) return -1;
            break;
        }
        case E_TX_RELEASED:
        case E_RX_RELEASED: {
            int d = e.kind == E_TX_RELEASED ? 0 : 1;
            if (s->holder[d][what] == EARLIER) s->holder[d][what] = NONE;
            if (s->head[d][what] >= 0 && s->holder[d][what] == NONE
                    && grant(s, d, what, t) < 0)
                return -1;
            break;
        }
        case E_LATCHED:
            for (int64_t j = 0; j < s->latch_n; j++)
                if (run_rank(s, s->latch[j], t) < 0) return -1;
            break;
        default: {                     /* a signal, or a process's end */
            int64_t key, k;
            if (e.kind == E_SIGNALLED) { key = key_of(what, e.b); k = what; }
            else { key = key_of(what, -1); k = what + s->pairs; }
            if (fired_add(s, key) < 0) return -1;
            if (s->waits[k] == key) {
                s->waits[k] = -1;
                if (run_rank(s, k, t) < 0) return -1;
            }
        }
        }
        if (run_spawned(s, t) < 0) return -1;
    }
    return more;
}

static void release(S *s) {
    for (int64_t k = 0; k < s->slots_n; k++) free(s->slots[k].v);
    free(s->slots); free(s->spare); free(s->at); free(s->due); free(s->queue); free(s->posted); free(s->waiting_on); free(s->pending); free(s->all_of);
    free(s->pc); free(s->sub); free(s->sub_end); free(s->finish); free(s->waits);
    free(s->fired); free(s->spawned);
    free(s->latch); free(s->advanced); free(s->timer); free(s->next_wait);
    if (s->jobs) {
        for (Py_ssize_t h = 0; h < s->hosts; h++) free(s->jobs[h].v);
        free(s->jobs);
    }
    for (int d = 0; d < 2; d++) {
        free(s->holder[d]); free(s->head[d]); free(s->tail[d]); free(s->passed[d]);
    }
    free(s->has_quiet); free(s->released_order);
    for (int d = 0; d < 2; d++) { free(s->wait_head[d]); free(s->wait_tail[d]); }
    free(s->wait_next);
    for (Py_ssize_t j = 0; j < s->nchunks; j++) PyBuffer_Release(&s->chunk_views[j]);
    free(s->chunk_views); free(s->chunk); free(s->chunk_first); free(s->rows);
    if (s->fast) {
        for (Py_ssize_t k = 0; k < s->n; k++) Py_XDECREF(s->fast[k]);
        free(s->fast);
    }
    free(s->actions); free(s->lengths);
    if (s->shared) {
        for (Py_ssize_t c = 0; c < s->ncpu; c++) free(s->shared[c].v);
        free(s->shared);
    }
    if (s->groups) {
        for (Py_ssize_t c = 0; c < s->ncpu; c++) free(s->groups[c].v);
        free(s->groups);
    }
    free(s->members);
    free(s->done); free(s->last_at); free(s->busy_threads); free(s->computing);
    free(s->talking); free(s->rate_c); free(s->cap_c); free(s->started); free(s->compute_s);
    free(s->comm_s); free(s->has_started); free(s->has_compute); free(s->has_comm);
    free(s->rates.v); free(s->caps.v); free(s->ended); free(s->done_jobs);
}

static PyObject *floats(const double *x, Py_ssize_t count) {
    PyObject *list = PyList_New(count);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *v = PyFloat_FromDouble(x[i]);
        if (!v) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, i, v);
    }
    return list;
}

static PyObject *some(const double *x, const char *has, Py_ssize_t count) {
    PyObject *dict = PyDict_New();
    if (!dict) return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!has[i]) continue;
        PyObject *k = PyLong_FromSsize_t(i), *v = PyFloat_FromDouble(x[i]);
        int r = k && v ? PyDict_SetItem(dict, k, v) : -1;
        Py_XDECREF(k); Py_XDECREF(v);
        if (r < 0) { Py_DECREF(dict); return NULL; }
    }
    return dict;
}

/* What SharedCpus holds after the replay, as its Python loop leaves it: (done, last, busy,
 * computing, talking, jobs, started, compute_s, comm_s, order). */
static PyObject *cpus_state(S *s) {
    PyObject *jobs = PyList_New(s->ncpu);
    if (!jobs) return NULL;
    for (Py_ssize_t c = 0; c < s->ncpu; c++) {
        SharedJobs *js = &s->shared[c];
        if (s->per_job) {                       /* (the groups' jobs, in arrival order) */
            int64_t n = 0;
            if (ended_room(s, c) < 0) { Py_DECREF(jobs); return NULL; }
            Groups *gs = &s->groups[c];
            for (int64_t g = 0; g < gs->n; g++)
                for (int64_t m = gs->v[g].head; m >= 0; m = s->members[m].next) {
                    Member *x = &s->members[m];
                    s->ended[n++] = (Shared){0.0, x->order, x->k, x->threads, x->compute,
                                             gs->v[g].work, 0.0};
                }
            qsort(s->ended, n, sizeof(Shared), by_order);
        }
        int64_t count = s->per_job ? s->groups[c].jobs : js->n;
        PyObject *list = PyList_New(count);
        if (!list) { Py_DECREF(jobs); return NULL; }
        PyList_SET_ITEM(jobs, c, list);
        for (int64_t j = 0; j < count; j++) {
            Shared *x = s->per_job ? &s->ended[j] : &js->v[j];
            PyObject *job = s->per_job
                ? Py_BuildValue("[dLLdO]", x->work, (long long)x->order, (long long)x->k,
                                x->threads, x->compute ? Py_True : Py_False)
                : Py_BuildValue("(dLLdOdd)", x->end, (long long)x->order, (long long)x->k,
                                x->threads, x->compute ? Py_True : Py_False, x->work,
                                x->done0);
            if (!job) { Py_DECREF(jobs); return NULL; }
            PyList_SET_ITEM(list, j, job);
        }
    }
    return Py_BuildValue("(NNNNNNNNNL)", floats(s->done, s->ncpu), floats(s->last_at, s->ncpu),
                         floats(s->busy_threads, s->ncpu), floats(s->computing, s->ncpu),
                         floats(s->talking, s->ncpu), jobs,
                         some(s->started, s->has_started, s->n),
                         some(s->compute_s, s->has_compute, s->n),
                         some(s->comm_s, s->has_comm, s->n), (long long)s->order);
}

static int need(Py_buffer *b, Py_ssize_t count, Py_ssize_t size, const char *name) {
    if (b->len < count * size) {
        PyErr_Format(PyExc_ValueError, "%s: %zd items wanted", name, count);
        return -1;
    }
    return 0;
}

#define ZALLOC(p, count) \
    do { (p) = calloc((count) > 0 ? (size_t)(count) : 1, sizeof(*(p))); if (!(p)) goto nomem; } while (0)

/* run(start, host, firsts, programs, lat, busy, tx, rx, gloo, compute_rate, pairs, together,
 *     threshold_tx, threshold_rx, quiet, releases_d, releases_h, releases_t,
 *     requested_tx, requested_rx, freed_tx, freed_rx, released_t, released_order, sequence,
 *     shared, the actions' table's chunks)
 * -> (finish, marks, released count, refusal, the CPUs' state) */
static PyObject *run(PyObject *self, PyObject *args) {
    Py_buffer b_start, b_host, b_firsts, b_lat, b_busy, b_tx, b_rx, b_thr0, b_thr1, b_quiet,
        b_rd, b_rh, b_rt, b_req0, b_req1, b_free0, b_free1, b_rel, b_relo;
    Py_buffer b_lead = {0}, b_tstart = {0}, b_ttx = {0}, b_trx = {0};
    PyObject *programs, *sequence, *shared, *chunks, *followers = Py_None;
    double gloo, compute_rate;
    long long pairs, together;
    if (!PyArg_ParseTuple(args, "y*y*y*Oy*y*y*y*ddLLy*y*y*y*y*y*w*w*w*w*w*w*OOO|O",
                          &b_start, &b_host, &b_firsts, &programs, &b_lat, &b_busy, &b_tx,
                          &b_rx, &gloo, &compute_rate, &pairs, &together, &b_thr0, &b_thr1,
                          &b_quiet, &b_rd, &b_rh, &b_rt, &b_req0, &b_req1, &b_free0,
                          &b_free1, &b_rel, &b_relo, &sequence, &shared, &chunks, &followers))
        return NULL;
    S st;
    memset(&st, 0, sizeof st);
    S *s = &st;
    s->now = -INFINITY;           /* (the first events go to later instants) */
    PyObject *result = NULL;
    /* processor sharing: (SharedCpus, cpu, multiplicity, cores, threads, per_job, contended,
     * src, dst, bytes, done, last, busy, computing, talking, order, most visits) */
    Py_buffer b_cpu = {0}, b_mult = {0}, b_src = {0}, b_dst = {0}, b_bytes = {0},
        b_done = {0}, b_last = {0}, b_bthr = {0}, b_comp = {0}, b_talk = {0};
    long long order0 = 0;
    if (shared != Py_None) {
        if (!PyArg_ParseTuple(shared, "Oy*y*ddiiy*y*y*y*y*y*y*y*Ld", &s->cpus, &b_cpu, &b_mult,
                              &s->cores, &s->threads, &s->per_job, &s->contended, &b_src,
                              &b_dst, &b_bytes, &b_done, &b_last, &b_bthr, &b_comp, &b_talk,
                              &order0, &s->visits_max)) {
            s->cpus = NULL;
            goto done;
        }
        s->order = order0;
    }
    Py_ssize_t n = b_start.len / sizeof(double), m = b_lat.len / sizeof(double);
    Py_ssize_t hosts = b_thr0.len / sizeof(double);
    s->n = n; s->m = m; s->hosts = hosts;
    if (m >= INT32_MAX || n >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "a replay of 2^31 messages or processes or more");
        goto done;
    }
    if (need(&b_host, n, 8, "host") < 0 || need(&b_busy, m, 8, "busy") < 0
            || need(&b_tx, m, 8, "tx") < 0 || need(&b_rx, m, 8, "rx") < 0
            || need(&b_thr1, hosts, 8, "threshold") < 0 || need(&b_quiet, hosts, 8, "quiet") < 0
            || need(&b_req0, hosts, 8, "requested") < 0 || need(&b_req1, hosts, 8, "requested") < 0
            || need(&b_free0, hosts, 8, "freed") < 0 || need(&b_free1, hosts, 8, "freed") < 0)
        goto done;
    {   /* the actions' table, in chunks (each ROWS action's rows lie in one) */
        PyObject *f = PySequence_Fast(chunks, "the actions' table");
        if (!f) goto done;
        Py_ssize_t c = PySequence_Fast_GET_SIZE(f);
        s->chunk_views = calloc(c > 0 ? c : 1, sizeof(Py_buffer));
        s->chunk = calloc(c > 0 ? c : 1, sizeof(Row *));
        s->chunk_first = calloc(c + 1, sizeof(int64_t));
        if (!s->chunk_views || !s->chunk || !s->chunk_first) { Py_DECREF(f); goto nomem; }
        for (Py_ssize_t j = 0; j < c; j++) {
            if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(f, j), &s->chunk_views[j],
                                   PyBUF_SIMPLE) < 0) { Py_DECREF(f); goto done; }
            s->nchunks = j + 1;
            s->chunk[j] = s->chunk_views[j].buf;
            s->chunk_first[j + 1] = s->chunk_first[j] + s->chunk_views[j].len / sizeof(Row);
        }
        Py_DECREF(f);
    }
    s->start = b_start.buf; s->host = b_host.buf; s->lat = b_lat.buf; s->busy = b_busy.buf;
    s->tx = b_tx.buf; s->rx = b_rx.buf;
    s->threshold[0] = b_thr0.buf; s->threshold[1] = b_thr1.buf;
    s->requested[0] = b_req0.buf; s->requested[1] = b_req1.buf;
    s->newest_free[0] = b_free0.buf; s->newest_free[1] = b_free1.buf;
    s->gloo = gloo; s->compute_rate = compute_rate; s->pairs = pairs; s->together = together;
    s->one_rate = gloo == compute_rate;
    s->sequence = sequence;
    if (b_rel.len >= m * (Py_ssize_t)sizeof(double) && m > 0) {
        s->released_t = b_rel.buf;
        ZALLOC(s->released_order, m);
    }
    /* followers: (lead, started, tx granted, rx granted), one each a message */
    if (followers != Py_None) {
        if (s->cpus) {
            PyErr_SetString(PyExc_ValueError, "followers beside shared CPUs");
            goto done;
        }
        if (!PyArg_ParseTuple(followers, "y*w*w*w*", &b_lead, &b_tstart, &b_ttx, &b_trx)) {
            followers = Py_None;
            goto done;
        }
        if (need(&b_lead, m, 8, "lead") < 0 || need(&b_tstart, m, 8, "started") < 0
                || need(&b_ttx, m, 8, "granted") < 0 || need(&b_trx, m, 8, "granted") < 0)
            goto done;
        s->lead = b_lead.buf; s->t_start = b_tstart.buf; s->t_tx = b_ttx.buf;
        s->t_rx = b_trx.buf;
        for (Py_ssize_t j = 0; j < m; j++) {
            int stands = s->tx[j] == STAND_IN || s->rx[j] == STAND_IN;
            if (s->lead[j] >= m || (s->lead[j] >= 0) != stands
                    || (s->tx[j] == STAND_IN && s->rx[j] == STAND_IN)) {
                PyErr_SetString(PyExc_ValueError, "a follower without one stand-in side");
                goto done;
            }
        }
        for (int d = 0; d < 2; d++) {
            ZALLOC(s->wait_head[d], m); ZALLOC(s->wait_tail[d], m);
            for (Py_ssize_t j = 0; j < m; j++) s->wait_head[d][j] = s->wait_tail[d][j] = -1;
        }
        ZALLOC(s->wait_next, m);
    }
    /* every host index must be within the NIC arrays */
    for (Py_ssize_t k = 0; k < n; k++)
        if (s->host[k] < 0 || s->host[k] >= hosts) {
            PyErr_SetString(PyExc_ValueError, "a process's host is past the NIC arrays");
            goto done;
        }
    for (Py_ssize_t j = 0; j < m; j++)
        if (s->tx[j] >= hosts || s->rx[j] >= hosts || s->tx[j] < STAND_IN || s->rx[j] < STAND_IN
                || (s->tx[j] == -1) != (s->rx[j] == -1)
                || (!s->lead && (s->tx[j] == STAND_IN || s->rx[j] == STAND_IN))) {
            PyErr_SetString(PyExc_ValueError, "a message's host is past the NIC arrays");
            goto done;
        }
    ZALLOC(s->fast, n); ZALLOC(s->actions, n); ZALLOC(s->lengths, n);
    {
        PyObject *pf = PySequence_Fast(programs, "programs");
        if (!pf) goto done;
        if (PySequence_Fast_GET_SIZE(pf) != n) {
            Py_DECREF(pf);
            PyErr_SetString(PyExc_ValueError, "one program a process");
            goto done;
        }
        for (Py_ssize_t k = 0; k < n; k++) {
            PyObject *f = PySequence_Fast(PySequence_Fast_GET_ITEM(pf, k), "a program");
            if (!f) { Py_DECREF(pf); goto done; }
            s->fast[k] = f;
            s->actions[k] = PySequence_Fast_ITEMS(f);
            s->lengths[k] = PySequence_Fast_GET_SIZE(f);
            for (Py_ssize_t i = 0; i < s->lengths[k]; i++) {
                PyObject *a = s->actions[k][i];
                if (!(PyTuple_Check(a) || PyList_Check(a)) || PyObject_Length(a) < 1) {
                    Py_DECREF(pf);
                    PyErr_SetString(PyExc_TypeError, "an action is a tuple");
                    goto done;
                }
            }
        }
        Py_DECREF(pf);
    }
    ZALLOC(s->posted, m); ZALLOC(s->waiting_on, 2 * m); ZALLOC(s->next_wait, m);
    for (Py_ssize_t j = 0; j < 2 * m; j++) s->waiting_on[j] = -1;
    ZALLOC(s->pending, n); ZALLOC(s->all_of, n); ZALLOC(s->pc, n); ZALLOC(s->finish, n);
    ZALLOC(s->sub, n); ZALLOC(s->sub_end, n); ZALLOC(s->rows, n);
    for (Py_ssize_t k = 0; k < n; k++) s->sub[k] = -1;
    ZALLOC(s->waits, n);
    for (Py_ssize_t k = 0; k < n; k++) { s->waits[k] = -1; s->finish[k] = s->start[k]; }
    s->fired_cap = 64;
    ZALLOC(s->fired, s->fired_cap);
    memset(s->fired, 0xff, s->fired_cap * sizeof(int64_t));
    ZALLOC(s->jobs, hosts); ZALLOC(s->advanced, hosts);
    if (s->cpus) {
        Py_ssize_t ncpu = b_done.len / sizeof(double);
        s->ncpu = ncpu;
        if (need(&b_cpu, n, 8, "cpu") < 0 || need(&b_mult, n, 8, "multiplicity") < 0
                || need(&b_src, m, 8, "src") < 0 || need(&b_dst, m, 8, "dst") < 0
                || need(&b_bytes, m, 8, "bytes") < 0 || need(&b_last, ncpu, 8, "last") < 0
                || need(&b_bthr, ncpu, 8, "busy") < 0 || need(&b_comp, ncpu, 8, "computing") < 0
                || need(&b_talk, ncpu, 8, "talking") < 0)
            goto done;
        s->cpu = b_cpu.buf; s->mult = b_mult.buf; s->src = b_src.buf; s->dst = b_dst.buf;
        s->nbytes = b_bytes.buf;
        for (Py_ssize_t k = 0; k < n; k++)
            if (s->cpu[k] < 0 || s->cpu[k] >= ncpu) {
                PyErr_SetString(PyExc_ValueError, "a process's CPU is past the CPUs");
                goto done;
            }
        for (Py_ssize_t j = 0; j < m; j++)
            if (s->src[j] < 0 || s->src[j] >= n || s->dst[j] < 0 || s->dst[j] >= n) {
                PyErr_SetString(PyExc_ValueError, "a message's process is past the processes");
                goto done;
            }
        ZALLOC(s->done, ncpu); ZALLOC(s->last_at, ncpu); ZALLOC(s->busy_threads, ncpu);
        ZALLOC(s->computing, ncpu); ZALLOC(s->talking, ncpu); ZALLOC(s->rate_c, ncpu);
        ZALLOC(s->cap_c, ncpu); ZALLOC(s->shared, ncpu); ZALLOC(s->groups, ncpu);
        s->members_free = -1;
        memcpy(s->done, b_done.buf, ncpu * sizeof(double));
        memcpy(s->last_at, b_last.buf, ncpu * sizeof(double));
        memcpy(s->busy_threads, b_bthr.buf, ncpu * sizeof(double));
        memcpy(s->computing, b_comp.buf, ncpu * sizeof(double));
        memcpy(s->talking, b_talk.buf, ncpu * sizeof(double));
        for (Py_ssize_t c = 0; c < ncpu; c++) s->rate_c[c] = s->cap_c[c] = NAN;
        ZALLOC(s->started, n); ZALLOC(s->compute_s, n); ZALLOC(s->comm_s, n);
        ZALLOC(s->has_started, n); ZALLOC(s->has_compute, n); ZALLOC(s->has_comm, n);
        ZALLOC(s->rates.v, MEMO); ZALLOC(s->caps.v, MEMO);
        s->rates.cap = s->caps.cap = MEMO;
    }
    ZALLOC(s->timer, hosts > s->ncpu ? hosts : s->ncpu);
    for (int d = 0; d < 2; d++) {
        ZALLOC(s->holder[d], hosts); ZALLOC(s->head[d], hosts); ZALLOC(s->tail[d], hosts);
        ZALLOC(s->passed[d], hosts);
        for (Py_ssize_t h = 0; h < hosts; h++) {
            s->holder[d][h] = NONE; s->head[d][h] = -1; s->tail[d][h] = -1;
        }
    }
    s->quiet = b_quiet.buf;
    ZALLOC(s->has_quiet, hosts);
    for (Py_ssize_t h = 0; h < hosts; h++)
        if (s->quiet[h] > -INFINITY) { s->has_quiet[h] = 1; s->quiet_n++; }
    s->marks = PyList_New(n);
    if (!s->marks) goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *x = PyList_New(0);
        if (!x) goto done;
        PyList_SET_ITEM(s->marks, k, x);
    }
    /* directions an earlier collective holds past the first start: released then */
    {
        Py_ssize_t r = b_rd.len / sizeof(int64_t);
        const int64_t *rd = b_rd.buf, *rh = b_rh.buf;
        const double *rt = b_rt.buf;
        for (Py_ssize_t j = 0; j < r; j++) {
            s->holder[rd[j]][rh[j]] = EARLIER;
            if (push(s, rt[j], rd[j] == 0 ? E_TX_RELEASED : E_RX_RELEASED, rh[j], 0) < 0)
                goto done;
        }
    }
    {
        Py_ssize_t f = b_firsts.len / sizeof(int64_t);
        const int64_t *firsts = b_firsts.buf;
        for (Py_ssize_t j = 0; j < f; j++)
            if (push(s, s->start[firsts[j]], E_RESUME, firsts[j], 0) < 0) goto done;
    }
    if (loop(s) < 0 && !s->refused) goto done;
    {
        PyObject *finish = PyList_New(n);
        if (!finish) goto done;
        for (Py_ssize_t k = 0; k < n; k++) {
            PyObject *x = PyFloat_FromDouble(s->finish[k]);
            if (!x) { Py_DECREF(finish); goto done; }
            PyList_SET_ITEM(finish, k, x);
        }
        if (s->released_order)
            memcpy(b_relo.buf, s->released_order,
                   s->released_n * sizeof(int64_t) <= (size_t)b_relo.len
                   ? s->released_n * sizeof(int64_t) : (size_t)b_relo.len);
        PyObject *state = Py_None;
        Py_INCREF(state);
        if (s->cpus && !s->refused) {
            Py_DECREF(state);
            state = cpus_state(s);
            if (!state) { Py_DECREF(finish); goto done; }
        }
        result = Py_BuildValue("(NOniN)", finish, s->marks, (Py_ssize_t)s->released_n,
                               s->refused, state);
    }
    goto done;
nomem:
    PyErr_NoMemory();
done:
    Py_XDECREF(s->marks);
    release(s);
    PyBuffer_Release(&b_start); PyBuffer_Release(&b_host); PyBuffer_Release(&b_firsts);
    PyBuffer_Release(&b_lat); PyBuffer_Release(&b_busy); PyBuffer_Release(&b_tx);
    PyBuffer_Release(&b_rx); PyBuffer_Release(&b_thr0); PyBuffer_Release(&b_thr1);
    PyBuffer_Release(&b_quiet); PyBuffer_Release(&b_rd); PyBuffer_Release(&b_rh);
    PyBuffer_Release(&b_rt); PyBuffer_Release(&b_req0); PyBuffer_Release(&b_req1);
    PyBuffer_Release(&b_free0); PyBuffer_Release(&b_free1); PyBuffer_Release(&b_rel);
    PyBuffer_Release(&b_relo);
    if (followers != Py_None) {
        PyBuffer_Release(&b_lead); PyBuffer_Release(&b_tstart); PyBuffer_Release(&b_ttx);
        PyBuffer_Release(&b_trx);
    }
    if (shared != Py_None) {
        PyBuffer_Release(&b_cpu); PyBuffer_Release(&b_mult); PyBuffer_Release(&b_src);
        PyBuffer_Release(&b_dst); PyBuffer_Release(&b_bytes); PyBuffer_Release(&b_done);
        PyBuffer_Release(&b_last); PyBuffer_Release(&b_bthr); PyBuffer_Release(&b_comp);
        PyBuffer_Release(&b_talk);
    }
    return result;
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS, "fast_queues.simulate's event loop (see fast_queues._compiled)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_replay",
    "fast_queues.simulate's event loop compiled, for replays at fixed CPU rates.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__replay(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "ROWS", ROWS) < 0) { Py_DECREF(m); return NULL; }
    if (m && PyModule_AddIntConstant(m, "STAND_IN", STAND_IN) < 0) { Py_DECREF(m); return NULL; }
    if (m && PyModule_AddIntConstant(m, "ROW_BYTES", (long)sizeof(Row)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
