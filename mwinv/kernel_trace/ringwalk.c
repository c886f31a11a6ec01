/* Walk ftrace ring-buffer pages (the per-CPU data of trace.dat / trace_pipe_raw) and list the
 * records: absolute timestamp, payload offset and payload length. ring_decode (below) then reads
 * the fields that become columns; Python only handles per event type what needs strings.
 *
 * Returns the number of records written, or -(1 + byte offset) of the first corrupt header.
 * *pages_done gets the number of whole pages walked (so the caller can resume after a stop). */
#include <stdint.h>
#include <string.h>

#define COMMIT_MASK ((1u << 27) - 1)
#define MISSING_EVENTS (1ul << 31)
#define MISSING_STORED (1ul << 30)

static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

int64_t ring_walk(const uint8_t *buf, int64_t nbytes, int64_t page_size, int64_t data_off,
                  int64_t commit_size, int64_t *ts_out, int64_t *off_out, int32_t *len_out,
                  int64_t max_out, int64_t *pages_done, int64_t *lost_events)
{
    int64_t n = 0;
    *pages_done = 0;
    for (int64_t page = 0; page + page_size <= nbytes; page += page_size) {
        const uint8_t *pg = buf + page;
        uint64_t ts = rd64(pg);
        uint64_t commit_raw = commit_size == 8 ? rd64(pg + 8) : rd32(pg + 8);
        uint64_t commit = commit_raw & COMMIT_MASK;
        if (commit > (uint64_t)(page_size - data_off))
            return -(1 + page + 8);
        /* a page can hold at most commit/4 records: stop before overflowing the output */
        if (n + (int64_t)(commit / 4) + 1 > max_out)
            break;
        if ((commit_raw & MISSING_EVENTS) && (commit_raw & MISSING_STORED) &&
            data_off + (int64_t)commit + 8 <= page_size)
            *lost_events += (int64_t)rd64(pg + data_off + commit);
        else if (commit_raw & MISSING_EVENTS)
            *lost_events += 1; /* lost, count unknown */
        int64_t pos = data_off, end = data_off + (int64_t)commit;
        while (pos + 4 <= end) {
            uint32_t hdr = rd32(pg + pos);
            uint32_t type_len = hdr & 31, delta = hdr >> 5;
            int64_t data = pos + 4, len;
            if (type_len == 29) {                 /* padding */
                if (delta == 0) break;            /* rest of page is empty */
                len = rd32(pg + data);
                if (len <= 0 || data + len > end + 8) return -(1 + page + pos);
                pos = data + len;
                continue;
            } else if (type_len == 30) {          /* time extend */
                ts += ((uint64_t)rd32(pg + data) << 27) + delta;
                pos = data + 4;
                continue;
            } else if (type_len == 31) {          /* absolute time stamp */
                ts = ((uint64_t)rd32(pg + data) << 27) | delta;
                pos = data + 4;
                continue;
            } else if (type_len == 0) {
                len = (int64_t)rd32(pg + data) - 4;
                data += 4;
                len = (len + 3) & ~3;
            } else {
                len = type_len * 4;
            }
            if (len < 0 || data + len > end) return -(1 + page + pos);
            ts += delta;
            ts_out[n] = (int64_t)ts;
            off_out[n] = page + data;
            len_out[n] = (int32_t)len;
            n++;
            pos = data + len;
        }
        *pages_done += 1;
    }
    return n;
}

/* Decode the fields that become kernel_event columns, for every record of a walk, in one pass.
 *
 * spec[type * SPEC_COLS * 4 ...]: per event type and output column, (offset, size, signed, shift);
 * offset < 0 means the type has no such field. A column's value is the field shifted left by
 * `shift` (nr_sector -> bytes, page index -> sectors). Column values go to cols[col * n + i] and
 * valid[col * n + i]. Records of type stack_type (options/stacktrace, written right after their
 * event) are not decoded: the event before gets the stack's 64-bit FNV-1a hash (stack_hash), the
 * stack record's offset (stack_off) and its depth clamped to the record (stack_depth), so each
 * distinct stack is symbolised once by the caller. */
#define SPEC_COLS 10

void ring_decode(const uint8_t *buf, const int64_t *off, const int32_t *len, int64_t n,
                 const int32_t *spec, int64_t max_type, int64_t stack_type,
                 int64_t stack_depth_off, int64_t stack_addr_off,
                 int32_t *types, int32_t *pids, int64_t *cols, uint8_t *valid,
                 uint64_t *stack_hash, int64_t *stack_off, int32_t *stack_depth)
{
    memset(valid, 0, (size_t)(n * SPEC_COLS));
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *rec = buf + off[i];
        uint16_t type;
        int32_t pid;
        memcpy(&type, rec, 2);
        memcpy(&pid, rec + 4, 4);
        types[i] = type;
        pids[i] = pid;
        stack_off[i] = -1;
        stack_hash[i] = 0;
        stack_depth[i] = 0;
        if (type == stack_type) {
            if (i == 0 || types[i - 1] == stack_type)
                continue;   /* its event was in the previous chunk (rare): the link is lost */
            int32_t depth;
            memcpy(&depth, rec + stack_depth_off, 4);
            int64_t room = (len[i] - stack_addr_off) / 8;
            if (depth < 0) depth = 0;
            if (depth > room) depth = (int32_t)room;
            uint64_t h = 1469598103934665603ull;
            const uint8_t *a = rec + stack_addr_off;
            for (int64_t b = 0; b < (int64_t)depth * 8; b++) {
                h ^= a[b];
                h *= 1099511628211ull;
            }
            stack_hash[i - 1] = h ^ (uint64_t)depth;
            stack_off[i - 1] = off[i];
            stack_depth[i - 1] = depth;
            continue;
        }
        if (type > max_type)
            continue;
        const int32_t *s = spec + (int64_t)type * SPEC_COLS * 4;
        for (int c = 0; c < SPEC_COLS; c++, s += 4) {
            int32_t fo = s[0], size = s[1], sgn = s[2], shift = s[3];
            if (fo < 0 || fo + size > len[i])
                continue;
            const uint8_t *p = rec + fo;
            int64_t v;
            switch (size) {
            case 1: v = sgn ? (int64_t)(int8_t)p[0] : (int64_t)p[0]; break;
            case 2: { uint16_t x; memcpy(&x, p, 2); v = sgn ? (int64_t)(int16_t)x : (int64_t)x; break; }
            case 4: { uint32_t x; memcpy(&x, p, 4); v = sgn ? (int64_t)(int32_t)x : (int64_t)x; break; }
            case 8: { uint64_t x; memcpy(&x, p, 8); v = (int64_t)x; break; }
            default: continue;
            }
            cols[c * n + i] = v << shift;
            valid[c * n + i] = 1;
        }
    }
}

/* `name=value name=value ...` of integer fields, for every record: the `fields` text of event types
 * whose fields are all integers (syscall entries: most records of a trace), as an Arrow string
 * column (out: the text bytes, offsets: n + 1 int32). spec: per field (offset, size, signed);
 * names: the field names joined by '\0'. Returns the bytes written, or -1 if out_cap is too small. */
static char *put_u64(char *o, uint64_t v)
{
    char tmp[20];
    int k = 0;
    do { tmp[k++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (k) *o++ = tmp[--k];
    return o;
}

int64_t format_int_fields(const uint8_t *buf, int64_t buf_len, const int64_t *off, int64_t n,
                          const int32_t *spec, int64_t nfields, const char *names,
                          char *out, int64_t out_cap, int32_t *offsets)
{
    const char *name_at[64];
    size_t name_len[64];
    if (nfields > 64) return -1;
    const char *p = names;
    for (int64_t f = 0; f < nfields; f++) {
        name_at[f] = p;
        name_len[f] = strlen(p);
        p += name_len[f] + 1;
    }
    char *o = out, *end = out + out_cap;
    offsets[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        for (int64_t f = 0; f < nfields; f++) {
            if (end - o < (int64_t)name_len[f] + 23) return -1;   /* " name=-" and 20 digits */
            if (f) *o++ = ' ';
            memcpy(o, name_at[f], name_len[f]);
            o += name_len[f];
            *o++ = '=';
            int32_t fo = spec[f * 3], size = spec[f * 3 + 1], sgn = spec[f * 3 + 2];
            uint64_t u = 0;
            int64_t v = 0;
            if (off[i] + fo + size <= buf_len) {
                const uint8_t *q = buf + off[i] + fo;
                switch (size) {
                case 1: u = q[0]; v = (int8_t)q[0]; break;
                case 2: { uint16_t x; memcpy(&x, q, 2); u = x; v = (int16_t)x; break; }
                case 4: { uint32_t x; memcpy(&x, q, 4); u = x; v = (int32_t)x; break; }
                case 8: { uint64_t x; memcpy(&x, q, 8); u = x; v = (int64_t)x; break; }
                }
            }
            if (sgn && v < 0) {
                *o++ = '-';
                o = put_u64(o, (uint64_t)0 - (uint64_t)v);
            } else {
                o = put_u64(o, sgn ? (uint64_t)v : u);
            }
        }
        if (o - out > INT32_MAX) return -1;
        offsets[i + 1] = (int32_t)(o - out);
    }
    return o - out;
}
