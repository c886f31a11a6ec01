/* The carried state of segment_walk's slices (attribution.py): every fill of a pid's state in one
 * forward pass over its rows, compiled on first use (mwinv/native.py) and called via ctypes.
 *
 * Rows are sorted by (node, pid, ts); a pid's rows are a group. A state fill at a row is the last
 * row at or before it, in its group, of some kind: an unseen row (outside every trace window) stops
 * every fill, the state after it is unknown (the fill's null) until a seen row of that kind. Backward fills (what
 * the next switch or evidence says) are resolved in the same pass: the output rows still waiting
 * take the value of the first row of that kind after them. */

#include <stdint.h>

/* attribution.POINT_KINDS, in its order */
enum { ON, OFF, WAKE, ENTER, EXIT, LOCK_START, LOCK_DONE, LWLOCK_START, LWLOCK_DONE, IO_START, IO_DONE,
       STMT_START, STMT_END, GAP, NKINDS };

/* the input columns, in attribution.WALK_INPUTS' order */
enum { I_NODE, I_PID, I_TS, I_KIND, I_INFO, I_STACK_ID, I_NR, I_RET, I_SID, I_IO_SEQ, I_IO_RAND, I_CONTEXT,
       I_SEEN };
/* the output columns, in attribution.WALK_COLUMNS' order, then the carried rows' in-flight counts */
enum { O_NODE, O_KIND, O_NR, O_RET, O_TS, O_TS_END, O_OFF_STACK, O_SYSCALL, O_LAST_IO_KIND, O_IN_LOCK,
       O_IO_SEQ, O_IO_RAND, O_SID, O_CPU_STATE, O_NEXT_EVIDENCE, O_NEXT_ONOFF, O_DISK_SLEEP, O_FILE_PATTERN,
       O_SOCKET_BLOCKED, O_CLIENT_BLOCKED, O_CARRY_IO_SEQ, O_CARRY_IO_RAND };

/* the tables a point's codes index (entry 0: code -1), and codes of the state labels */
typedef struct {
    const uint8_t *self_kind;      /* per kind: a point the task emits itself (SELF_EVIDENCE_KINDS) */
    const uint8_t *runnable_info;  /* per info: a switch-out state that leaves the task runnable */
    const uint8_t *disk_sleep_info;
    const int8_t *pattern_info;    /* per info: its FILE_PATTERNS code, -1 none */
    const int64_t *net_tx, *net_rx;
    int64_t n_net_tx, n_net_rx, eagain;
    int8_t running, runnable, sleeping, ev_on, ev_off, ev_self;
} Codes;

/* roles of a row (walk_roles' output) */
enum { TAIL = 1, CARRIED = 2 };

/* the fills whose last counted row the next slice needs as context (CARRIED rows) */
enum { F_ONOFF = 1, F_CPU = 2, F_CALL = 4, F_STMT = 8, F_OFF = 16, F_IO = 32, F_LOCK = 64, F_LWLOCK = 128,
       F_OFF_INFO = 256, F_EXIT = 512, F_UNSEEN = 1024, F_ALL = 2047 };

static inline int kind_of(const int32_t *kind, int64_t r) { return kind[r] >= 0 && kind[r] < NKINDS ? kind[r] : -1; }

static inline int is_self(const Codes *c, int k) { return c->self_kind[k + 1]; }

static unsigned fills_of(const Codes *c, void **in, int64_t r) {
    const int32_t *kind = in[I_KIND], *info = in[I_INFO];
    const int64_t *nr = in[I_NR];
    const uint8_t *seen = in[I_SEEN];
    int k = kind_of(kind, r);
    unsigned f = seen[r] ? 0 : F_UNSEEN;
    if (k == ON || k == OFF) f |= F_ONOFF;
    if (k == ON || k == OFF || k == WAKE || is_self(c, k)) f |= F_CPU;
    if (k == ENTER || k == EXIT) f |= F_CALL;
    if (k == STMT_START || k == STMT_END) f |= F_STMT;
    if (k == OFF) f |= F_OFF | (info[r] >= 0 ? F_OFF_INFO : 0);
    if (k == IO_START && nr[r] >= 0) f |= F_IO;
    if (k == LOCK_START || k == LOCK_DONE) f |= F_LOCK;
    if (k == LWLOCK_START || k == LWLOCK_DONE) f |= F_LWLOCK;
    if (k == EXIT) f |= F_EXIT;
    return f;
}

static inline int in_set(const int64_t *set, int64_t n, int64_t v) {
    for (int64_t i = 0; i < n; i++)
        if (set[i] == v) return 1;
    return 0;
}

static int64_t group_end(void **in, int64_t n, int64_t s) {
    const int32_t *node = in[I_NODE];
    const int64_t *pid = in[I_PID];
    int64_t e = s;
    while (e + 1 < n && pid[e + 1] == pid[s] && node[e + 1] == node[s]) e++;
    return e;
}

/* the statement a row lies in: its last boundary's (-1 after an end, -2 before any) */
static inline int64_t next_sid(void **in, int64_t r, int64_t sid) {
    const int32_t *kind = in[I_KIND];
    const int64_t *sid_in = in[I_SID];
    if (kind[r] == STMT_START) return sid_in[r];
    if (kind[r] == STMT_END) return -1;
    return sid;
}

static int has(const int64_t *sorted, int64_t n, int64_t v) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < v) lo = mid + 1; else hi = mid;
    }
    return lo < n && sorted[lo] == v;
}

/* Per row its roles: TAIL, the pid's rows from its last switch on, which wait for the next slice
 * (what the task did after the switch is told by the next one); CARRIED, the last counted row of
 * each kind a fill looks back for, the context the next slice needs. Returns how many rows are
 * counted within a statement (walk_columns' rows) and sets *n_carried. traced: the sorted ids of
 * the statements a trace window covers whole (n_traced < 0: every statement may be). */
int64_t walk_roles(void **in, int64_t n, const Codes *c, const int64_t *traced, int64_t n_traced, int last_slice,
                   int64_t max_carry, uint8_t *role, int64_t *n_carried) {
    const int32_t *kind = in[I_KIND];
    const uint8_t *context = in[I_CONTEXT];
    int64_t counted = 0, carried = 0;
    for (int64_t s = 0; s < n; ) {
        int64_t e = group_end(in, n, s);
        for (int64_t r = s; r <= e; r++) role[r] = 0;
        if (!last_slice) {
            int64_t from = s;
            for (int64_t r = e; r >= s; r--)
                if (kind[r] == ON || kind[r] == OFF) { from = r; break; }
            if (n_traced >= 0) {
                /* the next switch classifies only a traced statement's stretches: a pid with none
                 * since its last switch waits with its last row only */
                int waits = 0, found = 0;
                int64_t sid = -2, looked = INT64_MIN;
                for (int64_t r = s; r <= e && !waits; r++) {
                    sid = next_sid(in, r, sid);
                    if (r < from) continue;
                    if (sid != looked) { looked = sid; found = has(traced, n_traced, sid); }
                    waits = found;
                }
                if (!waits) from = e;
            }
            if (e - from < max_carry)   /* else (it never switches) its tail is counted now */
                for (int64_t r = from; r <= e; r++) role[r] = context[r] ? 0 : TAIL;
            unsigned found = 0;
            for (int64_t r = e; r >= s && found != F_ALL; r--) {
                if (role[r] & TAIL) continue;
                unsigned f = fills_of(c, in, r);
                if (f & ~found) { role[r] |= CARRIED; carried++; }
                found |= f;
            }
        }
        int64_t sid = -2;
        for (int64_t r = s; r <= e; r++) {
            sid = next_sid(in, r, sid);
            counted += !context[r] && !(role[r] & TAIL) && sid > 0;
        }
        s = e + 1;
    }
    *n_carried = carried;
    return counted;
}

/* The state of each row walk_roles counted, the stretch from it to its pid's next row, into the
 * output columns (out, walk_roles' count of rows each: 13 % of a duty-cycled pgbench capture's
 * points, the others lie between statements); and per CARRIED row the pid's running
 * in-flight request counts at its last counted row, on its first carried row (0 on the others). */
void walk_columns(void **in, int64_t n, const Codes *c, const uint8_t *role, void **out) {
    const int32_t *node = in[I_NODE], *kind = in[I_KIND], *info = in[I_INFO];
    const int64_t *ts = in[I_TS], *stack_id = in[I_STACK_ID], *nr = in[I_NR], *ret = in[I_RET];
    const int64_t *io_seq = in[I_IO_SEQ], *io_rand = in[I_IO_RAND];
    const uint8_t *context = in[I_CONTEXT], *seen = in[I_SEEN];
    int16_t *o_node = out[O_NODE];
    int8_t *o_kind = out[O_KIND], *o_cpu = out[O_CPU_STATE], *o_next_ev = out[O_NEXT_EVIDENCE],
           *o_next_onoff = out[O_NEXT_ONOFF], *o_pattern = out[O_FILE_PATTERN];
    int64_t *o_nr = out[O_NR], *o_ret = out[O_RET], *o_ts = out[O_TS], *o_ts_end = out[O_TS_END],
            *o_stack = out[O_OFF_STACK], *o_syscall = out[O_SYSCALL], *o_io_kind = out[O_LAST_IO_KIND],
            *o_seq = out[O_IO_SEQ], *o_rand = out[O_IO_RAND], *o_sid = out[O_SID],
            *o_carry_seq = out[O_CARRY_IO_SEQ], *o_carry_rand = out[O_CARRY_IO_RAND];
    uint8_t *o_lock = out[O_IN_LOCK], *o_disk = out[O_DISK_SLEEP], *o_socket = out[O_SOCKET_BLOCKED],
            *o_client = out[O_CLIENT_BLOCKED];
    int64_t k = 0, kc = 0;
    for (int64_t s = 0; s < n; ) {
        int64_t e = group_end(in, n, s);
        /* each fill's value at the row (-1 or -2: none, or unknown since an unseen row) */
        int onoff = -1, cpu = -1, pattern = -1, eagain = 0, lock = 0, lwlock = 0, disk = 0;
        int64_t syscall = -2, exit_nr = -1, stack = -2, io_kind = -2, sid = -2, seq = 0, rand = 0;
        int64_t counted_seq = 0, counted_rand = 0, first_carried = -1;
        int64_t wait_ev = k, wait_onoff = k;   /* output rows waiting for the next evidence, switch */
        for (int64_t r = s; r <= e; r++) {
            int kd = kind_of(kind, r);
            int ev = kd == ON ? c->ev_on : kd == OFF ? c->ev_off : is_self(c, kd) ? c->ev_self : -1;
            if (!seen[r]) {
                onoff = cpu = pattern = -1;
                eagain = lock = lwlock = disk = 0;
                syscall = stack = io_kind = -2;
                exit_nr = -1;
            } else {
                if (kd == ON || kd == OFF) onoff = kd;
                if (kd == ENTER || kd == EXIT) {
                    syscall = kd == ENTER ? nr[r] : -1;
                    /* an entry's access pattern (from file_read), none after an exit or a plain entry */
                    pattern = kd == ENTER ? c->pattern_info[info[r] + 1] : -1;
                }
                /* a socket call that would have blocked: the wait that follows (epoll) is for the network
                 * to take a result, or for the client to send its next message */
                if (kd == EXIT) { eagain = ret[r] == -c->eagain; exit_nr = nr[r]; }
                if (kd == OFF) stack = stack_id[r];
                if (kd == OFF && info[r] >= 0) disk = c->disk_sleep_info[info[r] + 1];
                if (kd == IO_START && nr[r] >= 0) io_kind = nr[r];
                /* heavyweight and LWLock waits apart: a deadlock check inside the one may wait for the other */
                if (kd == LOCK_START || kd == LOCK_DONE) lock = kd == LOCK_START;
                if (kd == LWLOCK_START || kd == LWLOCK_DONE) lwlock = kd == LWLOCK_START;
                int state = kd == WAKE ? (onoff == ON ? c->running : c->runnable)
                          : kd == OFF ? (c->runnable_info[info[r] + 1] ? c->runnable : c->sleeping)
                          : kd == ON || is_self(c, kd) ? c->running : -1;
                if (state >= 0) cpu = state;
            }
            sid = next_sid(in, r, sid);
            seq += io_seq[r];
            rand += io_rand[r];
            if (ev >= 0 || !seen[r]) {
                for (; wait_ev < k; wait_ev++) o_next_ev[wait_ev] = seen[r] ? ev : -1;
            }
            if (!context[r] && !(role[r] & TAIL) && sid > 0) {
                o_node[k] = node[r]; o_kind[k] = kind[r]; o_nr[k] = nr[r]; o_ret[k] = ret[r]; o_ts[k] = ts[r];
                o_ts_end[k] = r < e ? ts[r + 1] : -1;
                o_stack[k] = stack; o_syscall[k] = syscall; o_io_kind[k] = io_kind; o_lock[k] = lock || lwlock;
                o_seq[k] = seq; o_rand[k] = rand; o_sid[k] = sid; o_cpu[k] = cpu; o_disk[k] = disk;
                o_pattern[k] = pattern;
                o_socket[k] = eagain && in_set(c->net_tx, c->n_net_tx, exit_nr);
                o_client[k] = eagain && in_set(c->net_rx, c->n_net_rx, exit_nr);
                k++;
            }
            if (kd == ON || kd == OFF || !seen[r]) {
                int v = !seen[r] ? -1 : kd == ON ? c->ev_on : c->ev_off;
                for (; wait_onoff < k; wait_onoff++) o_next_onoff[wait_onoff] = v;
            }
            if (!(role[r] & TAIL)) { counted_seq = seq; counted_rand = rand; }
            if (role[r] & CARRIED) {
                if (first_carried < 0) first_carried = kc;
                o_carry_seq[kc] = o_carry_rand[kc] = 0;
                kc++;
            }
        }
        for (; wait_ev < k; wait_ev++) o_next_ev[wait_ev] = -1;
        for (; wait_onoff < k; wait_onoff++) o_next_onoff[wait_onoff] = -1;
        if (first_carried >= 0) {
            o_carry_seq[first_carried] = counted_seq;
            o_carry_rand[first_carried] = counted_rand;
        }
        s = e + 1;
    }
}
