/*
 * mwinv.h - shared declarations of the mwinv extension.
 *
 * One record per statement execution goes into a lock-free ring in shared memory; a reader
 * (SQL function mwinv_drain()) takes them out.  See README.md for the design and its costs.
 */
#ifndef MWINV_H
#define MWINV_H

#include "postgres.h"

#include "port/atomics.h"
#include "storage/lwlock.h"
#include "datatype/timestamp.h"

/* ---- GUCs (mwinv.c) */
typedef enum
{
	MWINV_TRACK_NONE,
	MWINV_TRACK_TOP,
	MWINV_TRACK_ALL
} MwinvTrackLevel;

extern int	mwinv_track;
extern bool mwinv_track_utility;
extern bool mwinv_track_planning;
extern double mwinv_resource_min_cost;
extern bool mwinv_track_io;
extern int	mwinv_buffer_size;
extern int	mwinv_max_texts;
extern int	mwinv_max_text_length;
extern char *mwinv_node_name;

/* ---- resource counters (mwinv_resource.c) */
typedef struct MwinvResources
{
	int64		cpu_user_ns;
	int64		cpu_sys_ns;
	int64		minflt;
	int64		majflt;
	int64		inblock;
	int64		oublock;
	int64		nvcsw;
	int64		nivcsw;
	int64		read_bytes;		/* -1: /proc/self/io not read */
	int64		write_bytes;
} MwinvResources;

extern int64 mwinv_monotonic_ns(void);
extern int64 mwinv_wall_ns_from_monotonic(int64 mono_ns);
extern void mwinv_resources_read(MwinvResources *r);
extern void mwinv_resources_read_cpu(MwinvResources *r);
extern void mwinv_resources_read_io(MwinvResources *r);
extern void mwinv_resources_delta(MwinvResources *end, const MwinvResources *start);

/* ---- one record in the ring (mwinv_ring.c) */
typedef struct MwinvRecord
{
	int64		statement_id;
	int64		parent_statement_id;	/* 0: none */
	int64		query_id;
	int64		start_ns;		/* CLOCK_MONOTONIC */
	int64		end_ns;
	int64		start_wall_ns;	/* CLOCK_REALTIME */
	int64		plan_ns;		/* -1: not planned for this execution */
	int64		parse_ns;		/* parse analysis, from start_ns; -1: not parsed for this execution */
	int64		client_wait_ns; /* idle gaps between the portal's runs, waiting for the client */
	int64		rows;
	MwinvResources res;
	int32		pid;
	int32		leader_pid;		/* 0: not a parallel worker */
	Oid			dbid;
	Oid			userid;
	int32		nesting_level;
	bool		errored;
	bool		has_resources;	/* false: below mwinv.resource_min_cost */
	bool		utility;
} MwinvRecord;

typedef struct MwinvSlot
{
	pg_atomic_uint64 seq;		/* == position: free for the writer; position+1: filled */
	MwinvRecord rec;
} MwinvSlot;

/*
 * The ring's header, at the start of its own shared mapping: a file in /dev/shm (mode 0600, the
 * server's OS user) that a capture maps to take records without a backend working for it.  The
 * offsets are fixed (the reader reads them by number); the slots follow at header_size.
 */
#define MWINV_RING_MAGIC "MWINVRNG"
#define MWINV_RING_VERSION 1

typedef struct MwinvRing
{
	char		magic[8];		/* 0: MWINV_RING_MAGIC */
	uint32		version;		/* 8 */
	uint32		header_size;	/* 12: offset of the first slot */
	uint32		slot_size;		/* 16 */
	uint32		record_offset;	/* 20: of the record in a slot */
	uint32		nslots;			/* 24 */
	int32		reader_pid;		/* 28: a process that maps the ring and consumes; 0: none */
	uint64		token;			/* 32: random, also returned by mwinv_ring_attach() */
	char		pad0[24];
	pg_atomic_uint64 head;		/* 64: next position to write */
	char		pad1[56];
	pg_atomic_uint64 tail;		/* 128: next position to read (by one consumer at a time) */
	char		pad2[56];
	pg_atomic_uint64 dropped;	/* 192: records lost because the ring was full */
	char		pad3[56];
} MwinvRing;

/* A query text, stored once per query id. */
typedef struct MwinvTextEntry
{
	int64		query_id;		/* hash key */
	Oid			userid;			/* who ran it first (visibility) */
	Oid			dbid;
	int			len;
	char		text[FLEXIBLE_ARRAY_MEMBER];
} MwinvTextEntry;

typedef struct MwinvShared
{
	LWLock	   *reader_lock;	/* serializes readers only; writers never take it */
	LWLock	   *text_lock;		/* taken only the first time a backend sees a query id */
	pg_atomic_uint64 texts_dropped; /* texts lost because the text table was full */
	pg_atomic_uint64 text_generation;	/* bumped by reset: backends forget their text cache */
	pg_atomic_uint64 next_statement_id; /* blocks of ids are handed to backends */
	TimestampTz stats_reset;
	int			nprocs;
	/* per PGPROC: the statement id currently running (parallel workers link to it) */
	pg_atomic_uint64 *current_statement;
	/* mapped by the postmaster before any fork: the same address in every backend */
	MwinvRing  *ring;
	MwinvSlot  *slots;
	/* what backends trust: copies of the header's fields (the file is writable by its reader) */
	uint32		nslots;
	uint64		ring_token;
	char		ring_file[64];	/* "/dev/shm/mwinv.<postmaster pid>[.<random>]"; "": anonymous */
} MwinvShared;

extern MwinvShared *mwinv_shared;
extern struct HTAB *mwinv_texts;

extern Size mwinv_shmem_size(void);
extern void mwinv_shmem_request(void);
extern void mwinv_shmem_startup(void);
extern bool mwinv_ring_put(const MwinvRecord *rec);
extern void mwinv_store_text(int64 query_id, const char *text, int len);
extern int64 mwinv_next_statement_id(void);

/* ---- hooks (mwinv_hooks.c) */
extern void mwinv_install_hooks(void);



/* more of mwinv_ring.c */
extern pg_atomic_uint64 *mwinv_current_statement_of(int pgprocno);
extern int	mwinv_ring_take(MwinvRecord *out, int max);
extern void mwinv_ring_reset(void);
extern int	mwinv_ring_peek(MwinvRecord *out, int max, uint64 *pos);
extern void mwinv_ring_check_consumer(void);
#endif /* MWINV_H */
