/* The segment walk's points of one row group of kernel events (kernel_points.py), read straight from
 * the Arrow buffers of its columns, in one pass: compiled on first use (mwinv/native.py), called via
 * ctypes. Nulls are read from the validity bitmaps, labels through a lookup table per dictionary. */

#include <stddef.h>
#include <stdint.h>

/* an Arrow integer column (or a dictionary's indices): values of `width` bytes from `offset`, a
 * validity bitmap or NULL, and what a null reads as */
typedef struct {
    const void *values;
    const uint8_t *valid;
    int64_t offset;
    int64_t width;
    int64_t null_value;
} Column;

/* a label column: its indices, and per dictionary entry the label's code (-1: none) */
typedef struct {
    Column idx;
    const int32_t *codes;
} Labels;

/* the event columns, in kernel_points.COLUMNS' order, then the labels in LABELS' order */
enum { C_TS, C_PID, C_PREV_PID, C_NEXT_PID, C_TARGET_PID, C_STACK_ID, C_NR, C_RET, NCOLS };
enum { L_NODE, L_EVENT, L_PREV_STATE, NLABELS };
/* the output columns, in kernel_points.POINT_COLUMNS' order */
enum { O_NODE, O_PID, O_TS, O_ORD, O_KIND, O_INFO, O_STACK_ID, O_NR, O_RET };

/* the point kinds' codes (attribution.POINT_KINDS) the placing needs, and event_kind's 'switch' */
typedef struct {
    int32_t on, off, wake, enter, exit, sw;
    const int64_t *ords;      /* per point kind */
    const int64_t *pids;      /* the DBMS pids' keys (node code << 32 | pid), sorted */
    int64_t n_pids;
} Kinds;

static inline int is_null(const Column *c, int64_t r) {
    int64_t i = c->offset + r;
    return c->valid && !(c->valid[i >> 3] >> (i & 7) & 1);
}

static inline int64_t value(const Column *c, int64_t r) {
    int64_t i = c->offset + r;
    if (is_null(c, r)) return c->null_value;
    switch (c->width) {
    case 1: return ((const int8_t *)c->values)[i];
    case 2: return ((const int16_t *)c->values)[i];
    case 4: return ((const int32_t *)c->values)[i];
    default: return ((const int64_t *)c->values)[i];
    }
}

static inline int32_t label(const Labels *l, int64_t r) {
    int64_t i = value(&l->idx, r);
    return i < 0 ? -1 : l->codes[i];
}

static int is_dbms(const Kinds *k, int32_t node, int64_t pid) {
    int64_t key = (int64_t)node << 32 | (pid & 0xffffffff), lo = 0, hi = k->n_pids;
    if (pid < 0) return 0;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (k->pids[mid] < key) lo = mid + 1; else hi = mid;
    }
    return lo < k->n_pids && k->pids[lo] == key;
}

/* Writes the points of the n events (out NULL: only counts them) and returns how many there are: per
 * event of a DBMS pid's its point, a switch's two (the task switched out, then the one switched in),
 * in the events' order; an event without a time has none. */
int64_t kernel_points(int64_t n, const Column *col, const Labels *lab, const Kinds *k, void **out) {
    int64_t m = 0;
    for (int64_t r = 0; r < n; r++) {
        int32_t kind = label(&lab[L_EVENT], r), node = label(&lab[L_NODE], r);
        if (kind < 0 || node < 0 || is_null(&col[C_TS], r)) continue;
        for (int half = 0; half < (kind == k->sw ? 2 : 1); half++) {
            int32_t pk = kind == k->sw ? (half ? k->on : k->off) : kind;
            int64_t pid = value(&col[kind == k->sw ? (half ? C_NEXT_PID : C_PREV_PID)
                                     : kind == k->wake ? C_TARGET_PID : C_PID], r);
            if (!is_dbms(k, node, pid)) continue;
            if (out) {
                int off = pk == k->off, call = pk == k->enter || pk == k->exit;
                ((int32_t *)out[O_NODE])[m] = node;
                ((int64_t *)out[O_PID])[m] = pid;
                ((int64_t *)out[O_TS])[m] = value(&col[C_TS], r);
                ((int64_t *)out[O_ORD])[m] = k->ords[pk];
                ((int32_t *)out[O_KIND])[m] = pk;
                ((int32_t *)out[O_INFO])[m] = off ? label(&lab[L_PREV_STATE], r) : -1;
                ((int64_t *)out[O_STACK_ID])[m] = off ? value(&col[C_STACK_ID], r) : -1;
                ((int64_t *)out[O_NR])[m] = call ? value(&col[C_NR], r) : -1;
                ((int64_t *)out[O_RET])[m] = pk == k->exit ? value(&col[C_RET], r) : 0;
            }
            m++;
        }
    }
    return m;
}
