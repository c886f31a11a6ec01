/* A slice of the segment walk's points in the walk's order (attribution._read_slice): the runs of
 * points read for it (the kernel's per row group, those of derived tables) sorted by (node, pid, ts,
 * ord), ties in the runs' order, into the walk's input columns, each point marked seen where a trace
 * window of its node covers it. A stable counting sort by pid, then a natural merge sort of each
 * pid's rows by (ts, ord): the runs are in time order, so each pid's rows are a few sorted runs. Compiled
 * on first use (mwinv/native.py), called via ctypes. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* a run's columns, in attribution.SLICE_COLUMNS' order (NULL: the column's default on every row) */
enum { R_NODE, R_PID, R_TS, R_ORD, R_KIND, R_INFO, R_STACK_ID, R_NR, R_RET, R_SID, R_IO_SEQ, R_IO_RAND, NRUNCOLS };
/* the output columns, in attribution.WALK_INPUTS' order */
enum { O_NODE, O_PID, O_TS, O_KIND, O_INFO, O_STACK_ID, O_NR, O_RET, O_SID, O_IO_SEQ, O_IO_RAND, O_CONTEXT,
       O_SEEN };

typedef struct {
    int64_t n;
    void *cols[NRUNCOLS];
} Run;

/* the trace windows of each node code: sorted, disjoint [lo, hi] */
typedef struct {
    const int64_t *lo, *hi;
    int64_t n;
} Windows;

static const int64_t DEFAULTS[NRUNCOLS] = {0, 0, 0, 0, 0, -1, -1, -1, 0, -1, 0, 0};

static inline int64_t get(const Run *r, int c, int64_t i) {
    if (!r->cols[c]) return DEFAULTS[c];
    if (c == R_NODE || c == R_KIND || c == R_INFO) return ((const int32_t *)r->cols[c])[i];
    return ((const int64_t *)r->cols[c])[i];
}

static int64_t find(const int64_t *sorted, int64_t n, int64_t v) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < v) lo = mid + 1; else hi = mid;
    }
    return lo;
}

static int seen_at(const Windows *w, int32_t node, int64_t n_nodes, int64_t ts) {
    if (node < 0 || node >= n_nodes) return 0;
    const Windows *nw = &w[node];
    int64_t at = find(nw->lo, nw->n, ts + 1) - 1;   /* the last window starting at or before ts */
    return at >= 0 && ts <= nw->hi[at];
}

/* a before b: by (ts, ord), ties by position (stability) */
static inline int before(const int64_t *ts, const int64_t *ord, int64_t a, int64_t b) {
    if (ts[a] != ts[b]) return ts[a] < ts[b];
    if (ord[a] != ord[b]) return ord[a] < ord[b];
    return a < b;
}

/* sorts idx[0..n) by (ts, ord): merges of its sorted runs, pairwise until one is left */
static void merge_sort(int64_t *idx, int64_t *tmp, int64_t n, const int64_t *ts, const int64_t *ord) {
    int64_t runs = 1;
    for (int64_t i = 1; i < n; i++) runs += before(ts, ord, idx[i], idx[i - 1]);
    while (runs > 1) {
        int64_t out = 0, merged = 0;
        for (int64_t a = 0; a < n; ) {
            int64_t b = a + 1;
            while (b < n && !before(ts, ord, idx[b], idx[b - 1])) b++;
            int64_t c = b < n ? b + 1 : b;
            while (c < n && !before(ts, ord, idx[c], idx[c - 1])) c++;
            int64_t i = a, j = b;
            while (i < b && j < c) tmp[out++] = before(ts, ord, idx[j], idx[i]) ? idx[j++] : idx[i++];
            while (i < b) tmp[out++] = idx[i++];
            while (j < c) tmp[out++] = idx[j++];
            merged++;
            a = c;
        }
        memcpy(idx, tmp, n * sizeof *idx);
        runs = merged;
    }
}

/* The n points of the runs into out (n rows each) in the walk's order; pids: the DBMS pids' keys
 * (node code << 32 | pid), sorted. Returns 0; -1 out of memory, -2 a point of another pid. */
int slice_points(const Run *runs, int64_t n_runs, const int64_t *pids, int64_t n_pids, const Windows *windows,
                 int64_t n_nodes, int32_t gap_kind, void **out) {
    int64_t n = 0;
    for (int64_t r = 0; r < n_runs; r++) n += runs[r].n;
    int64_t *ts = malloc(n * sizeof *ts), *ord = malloc(n * sizeof *ord), *idx = malloc(n * sizeof *idx),
            *tmp = malloc(n * sizeof *tmp), *start = calloc(n_pids + 1, sizeof *start),
            *fill = malloc((n_pids + 1) * sizeof *fill);
    int32_t *grp = malloc(n * sizeof *grp);
    int rc = 0;
    if ((n && (!ts || !ord || !idx || !tmp || !grp)) || !start || !fill) {
        rc = -1;
        goto done;
    }
    /* each point's pid group; the groups' sizes */
    for (int64_t r = 0, k = 0; r < n_runs; r++)
        for (int64_t i = 0; i < runs[r].n; i++, k++) {
            int64_t key = get(&runs[r], R_NODE, i) << 32 | (get(&runs[r], R_PID, i) & 0xffffffff);
            int64_t g = find(pids, n_pids, key);
            if (g == n_pids || pids[g] != key) {
                rc = -2;
                goto done;
            }
            grp[k] = (int32_t)g;
            ts[k] = get(&runs[r], R_TS, i);
            ord[k] = get(&runs[r], R_ORD, i);
            start[g + 1]++;
        }
    for (int64_t g = 0; g < n_pids; g++) start[g + 1] += start[g];
    /* a stable counting sort by group, then each group by (ts, ord) */
    memcpy(fill, start, (n_pids + 1) * sizeof *fill);
    for (int64_t k = 0; k < n; k++) idx[fill[grp[k]]++] = k;
    for (int64_t g = 0; g < n_pids; g++)
        merge_sort(idx + start[g], tmp + start[g], start[g + 1] - start[g], ts, ord);
    for (int64_t k = 0; k < n; k++) {
        int64_t r = 0, i = idx[k];
        while (i >= runs[r].n) i -= runs[r++].n;
        const Run *run = &runs[r];
        int32_t node = (int32_t)get(run, R_NODE, i), kind = (int32_t)get(run, R_KIND, i);
        ((int32_t *)out[O_NODE])[k] = node;
        ((int64_t *)out[O_PID])[k] = get(run, R_PID, i);
        ((int64_t *)out[O_TS])[k] = ts[idx[k]];
        ((int32_t *)out[O_KIND])[k] = kind;
        ((int32_t *)out[O_INFO])[k] = (int32_t)get(run, R_INFO, i);
        ((int64_t *)out[O_STACK_ID])[k] = get(run, R_STACK_ID, i);
        ((int64_t *)out[O_NR])[k] = get(run, R_NR, i);
        ((int64_t *)out[O_RET])[k] = get(run, R_RET, i);
        ((int64_t *)out[O_SID])[k] = get(run, R_SID, i);
        ((int64_t *)out[O_IO_SEQ])[k] = get(run, R_IO_SEQ, i);
        ((int64_t *)out[O_IO_RAND])[k] = get(run, R_IO_RAND, i);
        ((uint8_t *)out[O_CONTEXT])[k] = 0;
        ((uint8_t *)out[O_SEEN])[k] = kind != gap_kind && seen_at(windows, node, n_nodes, ts[idx[k]]);
    }
done:
    free(ts); free(ord); free(idx); free(tmp); free(start); free(fill); free(grp);
    return rc;
}
