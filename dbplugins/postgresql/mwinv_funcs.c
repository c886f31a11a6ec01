/*
 * mwinv_funcs.c - SQL interface: mwinv_drain(), mwinv_peek(), mwinv_query_texts(), mwinv_info(),
 * mwinv_reset(), mwinv_ring_attach(), mwinv_ring_detach().
 *
 * Visibility as in pg_stat_statements: pid, leader pid, query id and query text of other users'
 * statements only for superusers and members of pg_read_all_stats.  Draining (which consumes)
 * is granted to pg_read_all_stats only; reset is superuser-only.
 */
#include "mwinv.h"

#include "catalog/pg_authid.h"
#include "commands/dbcommands.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include <signal.h>

PG_FUNCTION_INFO_V1(mwinv_drain);
PG_FUNCTION_INFO_V1(mwinv_peek);
PG_FUNCTION_INFO_V1(mwinv_query_texts);
PG_FUNCTION_INFO_V1(mwinv_info);
PG_FUNCTION_INFO_V1(mwinv_reset);
PG_FUNCTION_INFO_V1(mwinv_clock_ns);
PG_FUNCTION_INFO_V1(mwinv_drain_raw);
PG_FUNCTION_INFO_V1(mwinv_record_layout);
PG_FUNCTION_INFO_V1(mwinv_ring_attach);
PG_FUNCTION_INFO_V1(mwinv_ring_detach);

#define RECORD_COLS 27
#define RAW_DRAIN_MAX 65536		/* records per raw drain: a 15 MB bytea at most */

static void
require_preloaded(void)
{
	if (mwinv_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("mwinv must be loaded via shared_preload_libraries")));
}

static bool
sees_all(void)
{
	return superuser() || has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
}

/* Names of the last database and role looked up: records come in runs of the same ones. */
static Datum
database_name(Oid dbid, bool *isnull)
{
	static Oid	cached_oid = InvalidOid;
	static char *cached_name = NULL;

	if (dbid != cached_oid)
	{
		char	   *name = get_database_name(dbid);

		if (cached_name)
			pfree(cached_name);
		cached_name = name ? MemoryContextStrdup(TopMemoryContext, name) : NULL;
		cached_oid = dbid;
	}
	*isnull = cached_name == NULL;
	return *isnull ? (Datum) 0 : CStringGetTextDatum(cached_name);
}

static Datum
role_name(Oid userid, bool *isnull)
{
	static Oid	cached_oid = InvalidOid;
	static char *cached_name = NULL;

	if (userid != cached_oid)
	{
		char	   *name = GetUserNameFromId(userid, true);

		if (cached_name)
			pfree(cached_name);
		cached_name = name ? MemoryContextStrdup(TopMemoryContext, name) : NULL;
		cached_oid = userid;
	}
	*isnull = cached_name == NULL;
	return *isnull ? (Datum) 0 : CStringGetTextDatum(cached_name);
}

static void
put_records(ReturnSetInfo *rsinfo, MwinvRecord *recs, int n)
{
	bool		all = sees_all();
	Oid			me = GetUserId();

	for (int i = 0; i < n; i++)
	{
		MwinvRecord *r = &recs[i];
		Datum		values[RECORD_COLS];
		bool		nulls[RECORD_COLS];
		bool		visible = all || r->userid == me;
		bool		res = r->has_resources;
		bool		io = res && r->res.read_bytes >= 0;
		int			c = 0;

		memset(nulls, 0, sizeof(nulls));
		values[c++] = Int64GetDatum(r->statement_id);
		nulls[c] = r->parent_statement_id == 0;
		values[c++] = Int64GetDatum(r->parent_statement_id);
		nulls[c] = !visible || r->query_id == 0;
		values[c++] = Int64GetDatum(r->query_id);
		nulls[c] = !visible;
		values[c++] = Int32GetDatum(r->pid);
		nulls[c] = !visible || r->leader_pid == 0;
		values[c++] = Int32GetDatum(r->leader_pid);
		values[c] = database_name(r->dbid, &nulls[c]);
		c++;
		values[c] = role_name(r->userid, &nulls[c]);
		c++;
		values[c++] = Int64GetDatum(r->start_ns);
		values[c++] = Int64GetDatum(r->end_ns);
		values[c++] = Int64GetDatum(r->start_wall_ns);
		nulls[c] = r->plan_ns < 0;
		values[c++] = Int64GetDatum(r->plan_ns);
		nulls[c] = r->parse_ns < 0;
		values[c++] = Int64GetDatum(r->parse_ns);
		values[c++] = Int64GetDatum(r->client_wait_ns);
		nulls[c] = !res;
		values[c++] = Int64GetDatum(r->res.cpu_user_ns);
		nulls[c] = !res;
		values[c++] = Int64GetDatum(r->res.cpu_sys_ns);
		nulls[c] = !io;
		values[c++] = Int64GetDatum(r->res.read_bytes);
		nulls[c] = !io;
		values[c++] = Int64GetDatum(r->res.write_bytes);
		nulls[c] = !res;
		values[c++] = Int64GetDatum(r->res.minflt);
		nulls[c] = !res;
		values[c++] = Int64GetDatum(r->res.majflt);
		nulls[c] = !res;
		values[c++] = Int64GetDatum(r->res.inblock);
		nulls[c] = !res;
		values[c++] = Int64GetDatum(r->res.oublock);
		nulls[c] = !res;
		values[c++] = Int64GetDatum(r->res.nvcsw);
		nulls[c] = !res;
		values[c++] = Int64GetDatum(r->res.nivcsw);
		values[c++] = Int64GetDatum(r->rows);
		values[c++] = Int32GetDatum(r->nesting_level);
		values[c++] = BoolGetDatum(r->errored);
		values[c++] = BoolGetDatum(r->utility);
		Assert(c == RECORD_COLS);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

/*
 * Records are copied out under the reader lock in chunks and turned into tuples between chunks:
 * an error while building tuples cannot leave the ring locked, and memory stays bounded.
 */
#define CHUNK 4096

static Datum
records(FunctionCallInfo fcinfo, bool consume, int max)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MwinvRecord *recs;
	uint64		pos;

	require_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	if (!consume)
		max = Min(max, (int) mwinv_shared->nslots);	/* one lap at most */
	recs = palloc(sizeof(MwinvRecord) * CHUNK);
	pos = pg_atomic_read_u64(&mwinv_shared->ring->tail);
	while (max > 0)
	{
		int			chunk = Min(max, CHUNK);
		int			n;

		LWLockAcquire(mwinv_shared->reader_lock, consume ? LW_EXCLUSIVE : LW_SHARED);
		if (consume)
			mwinv_ring_check_consumer();
		n = consume ? mwinv_ring_take(recs, chunk) : mwinv_ring_peek(recs, chunk, &pos);
		LWLockRelease(mwinv_shared->reader_lock);
		put_records(rsinfo, recs, n);
		max -= n;
		if (n < chunk)
			break;
	}
	pfree(recs);
	return (Datum) 0;
}

Datum
mwinv_drain(PG_FUNCTION_ARGS)
{
	return records(fcinfo, true, PG_ARGISNULL(0) ? INT_MAX : PG_GETARG_INT32(0));
}

/*
 * The records as they are in the ring, back to back in one bytea (decoded by the reader with the
 * layout of mwinv_record_layout()): no tuple per record, no text formatting of 27 columns.  Under
 * pgbench -S the CSV drain formatted ~90,000 records/s in a backend of the server it measures.
 */
Datum
mwinv_drain_raw(PG_FUNCTION_ARGS)
{
	int			max = PG_ARGISNULL(0) ? RAW_DRAIN_MAX : Min(Max(PG_GETARG_INT32(0), 0), RAW_DRAIN_MAX);
	bytea	   *out;
	MwinvRecord *recs;
	int			n;
	uint64		pending;

	require_preloaded();
	/* room for what is there now (drains come every ~0.2 s: not a 15 MB buffer each time) */
	pending = pg_atomic_read_u64(&mwinv_shared->ring->head) - pg_atomic_read_u64(&mwinv_shared->ring->tail);
	max = (int) Min((uint64) max, Min(pending, mwinv_shared->nslots));	/* a lap at most, whatever the header */
	out = palloc(VARHDRSZ + (Size) max * sizeof(MwinvRecord));
	recs = (MwinvRecord *) VARDATA(out);
	LWLockAcquire(mwinv_shared->reader_lock, LW_EXCLUSIVE);
	mwinv_ring_check_consumer();
	n = mwinv_ring_take(recs, max);
	LWLockRelease(mwinv_shared->reader_lock);
	SET_VARSIZE(out, VARHDRSZ + (Size) n * sizeof(MwinvRecord));
	PG_RETURN_BYTEA_P(out);
}

/*
 * Process reader_pid (on this host) maps the ring file and is its one consumer until it detaches or
 * exits: returns the file (NULL: the ring is not in a file) and the token written in its header.
 */
Datum
mwinv_ring_attach(PG_FUNCTION_ARGS)
{
	int32		pid = PG_GETARG_INT32(0);
	TupleDesc	tupdesc;
	Datum		values[2];
	bool		nulls[2] = {false, false};
	MwinvRing  *ring;

	require_preloaded();
	ring = mwinv_shared->ring;
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("mwinv: no process %d on this host to read the ring", pid)));
	if (mwinv_shared->ring_file[0] == '\0')
		nulls[0] = true;
	else
	{
		LWLockAcquire(mwinv_shared->reader_lock, LW_EXCLUSIVE);
		if (ring->reader_pid != pid)
			mwinv_ring_check_consumer();
		ring->reader_pid = pid;
		LWLockRelease(mwinv_shared->reader_lock);
		values[0] = CStringGetTextDatum(mwinv_shared->ring_file);
	}
	values[1] = Int64GetDatum((int64) mwinv_shared->ring_token);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

Datum
mwinv_ring_detach(PG_FUNCTION_ARGS)
{
	int32		pid = PG_GETARG_INT32(0);
	bool		was;

	require_preloaded();
	LWLockAcquire(mwinv_shared->reader_lock, LW_EXCLUSIVE);
	was = mwinv_shared->ring->reader_pid == pid;
	if (was)
		mwinv_shared->ring->reader_pid = 0;
	LWLockRelease(mwinv_shared->reader_lock);
	PG_RETURN_BOOL(was);
}

/* Offset and size of each field of a raw record (sizeof the record: the row named '') */
Datum
mwinv_record_layout(PG_FUNCTION_ARGS)
{
#define FIELD(name, member) {name, offsetof(MwinvRecord, member), sizeof(((MwinvRecord *) 0)->member)}
	static const struct
	{
		const char *name;
		size_t		offset;
		size_t		size;
	}			fields[] = {
		FIELD("statement_id", statement_id), FIELD("parent_statement_id", parent_statement_id),
		FIELD("query_id", query_id), FIELD("start_ns", start_ns), FIELD("end_ns", end_ns),
		FIELD("start_wall_ns", start_wall_ns), FIELD("plan_ns", plan_ns), FIELD("parse_ns", parse_ns),
		FIELD("client_wait_ns", client_wait_ns), FIELD("rows", rows),
		FIELD("cpu_user_ns", res.cpu_user_ns), FIELD("cpu_sys_ns", res.cpu_sys_ns),
		FIELD("minflt", res.minflt), FIELD("majflt", res.majflt), FIELD("inblock", res.inblock),
		FIELD("oublock", res.oublock), FIELD("nvcsw", res.nvcsw), FIELD("nivcsw", res.nivcsw),
		FIELD("read_bytes", res.read_bytes), FIELD("write_bytes", res.write_bytes),
		FIELD("pid", pid), FIELD("leader_pid", leader_pid), FIELD("dbid", dbid), FIELD("userid", userid),
		FIELD("nesting_level", nesting_level), FIELD("errored", errored),
		FIELD("has_resources", has_resources), FIELD("utility", utility),
		{"", 0, sizeof(MwinvRecord)},
	};
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < lengthof(fields); i++)
	{
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		values[0] = CStringGetTextDatum(fields[i].name);
		values[1] = Int32GetDatum((int32) fields[i].offset);
		values[2] = Int32GetDatum((int32) fields[i].size);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

Datum
mwinv_peek(PG_FUNCTION_ARGS)
{
	return records(fcinfo, false, INT_MAX);
}

Datum
mwinv_query_texts(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS status;
	MwinvTextEntry *entry;
	bool		all;
	Oid			me = GetUserId();

	require_preloaded();
	all = sees_all();
	InitMaterializedSRF(fcinfo, 0);
	LWLockAcquire(mwinv_shared->text_lock, LW_SHARED);
	hash_seq_init(&status, mwinv_texts);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		Datum		values[4];
		bool		nulls[4] = {false, false, false, false};

		values[0] = Int64GetDatum(entry->query_id);
		values[1] = role_name(entry->userid, &nulls[1]);
		values[2] = database_name(entry->dbid, &nulls[2]);
		if (all || entry->userid == me)
			values[3] = CStringGetTextDatum(entry->text);
		else
			nulls[3] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(mwinv_shared->text_lock);
	return (Datum) 0;
}

Datum
mwinv_info(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[8];
	bool		nulls[8] = {false};
	uint64		head,
				tail;
	long		texts;

	require_preloaded();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tail = pg_atomic_read_u64(&mwinv_shared->ring->tail);
	head = pg_atomic_read_u64(&mwinv_shared->ring->head);
	LWLockAcquire(mwinv_shared->text_lock, LW_SHARED);
	texts = hash_get_num_entries(mwinv_texts);
	LWLockRelease(mwinv_shared->text_lock);

	values[0] = Int64GetDatum(mwinv_shared->nslots);
	values[1] = Int64GetDatum((int64) head);
	values[2] = Int64GetDatum((int64) tail);
	values[3] = Int64GetDatum((int64) (head - tail));
	values[4] = Int64GetDatum((int64) pg_atomic_read_u64(&mwinv_shared->ring->dropped));
	values[5] = Int64GetDatum((int64) texts);
	values[6] = Int64GetDatum((int64) pg_atomic_read_u64(&mwinv_shared->texts_dropped));
	values[7] = TimestampTzGetDatum(mwinv_shared->stats_reset);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

Datum
mwinv_reset(PG_FUNCTION_ARGS)
{
	require_preloaded();
	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only superusers may reset mwinv")));
	mwinv_ring_reset();
	PG_RETURN_VOID();
}

/*
 * CLOCK_MONOTONIC now, the clock of the records and of the kernel trace: read over a node's link
 * around two clock reads of the reader, it gives the node's clock offset (cluster captures).
 */
Datum
mwinv_clock_ns(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(mwinv_monotonic_ns());
}
