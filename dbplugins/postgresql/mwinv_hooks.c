/*
 * mwinv_hooks.c - planner, executor and utility hooks: one record per statement execution.
 *
 * Every hook calls the previous one (pg_stat_statements, pg_stat_kcache, auto_explain, ... in
 * any shared_preload_libraries order).  An execution in progress is an MwinvActive, found by
 * its QueryDesc (portals may interleave: cursors, extended protocol); errors end it in the
 * PG_CATCH of the hook that saw them, and transaction/subtransaction abort and process exit end
 * whatever is left, so no record leaks and no nesting level stays stale.
 *
 * A record is the execution as the client's message started it: a top-level statement of a client
 * backend starts when PostgreSQL read the message that began it (statement_timestamp(), so parse
 * analysis and the table-lock waits inside it count), and the time a portal sits idle waiting for
 * the client's next message is not the statement's: gaps between runs of one portal go to
 * client_wait_ns, and a portal closed only by a later message (the unnamed portal of the extended
 * protocol in a transaction block, a cursor) ends where its last run returned.
 *
 * The statement that ends a transaction (the last of an implicit one, or COMMIT / ROLLBACK / PREPARE
 * TRANSACTION) ends with it: the commit runs after the executor and the utility hook returned, and it
 * is work the client waits for (the WAL flush; postgres_fdw's remote COMMITs, 0.1-11.5 ms measured).
 * Its record waits for the transaction callback, which sets its end (and its rusage) there.
 */
#include "mwinv.h"

#include "access/parallel.h"
#include "access/xact.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "optimizer/planner.h"
#include "parser/analyze.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "tcop/utility.h"
#include "utils/queryjumble.h"
#include "utils/timestamp.h"

#include "mwinv_probes.h"

typedef struct MwinvActive
{
	struct MwinvActive *next;
	QueryDesc  *query_desc;		/* NULL for a utility statement */
	int			xact_level;		/* transaction nesting level at start */
	bool		in_utility;		/* its ProcessUtility is on the stack (ROLLBACK, CALL) */
	bool		closed;			/* a later client message came before its end: ends at last_return_ns */
	bool		ends_xact;		/* COMMIT, ROLLBACK, PREPARE TRANSACTION: the transaction's end follows */
	bool		ran;			/* an ExecutorRun returned */
	TimestampTz msg_ts;			/* statement_timestamp() of the message it last ran in */
	int64		last_return_ns; /* return of its last ExecutorRun (when ran) */
	bool		has_res_last;
	MwinvResources res_start;
	MwinvResources res_last;	/* CPU counters at last_return_ns (measured statements) */
	MwinvRecord rec;
} MwinvActive;

static MwinvActive *active_list = NULL;
static MwinvActive *free_list = NULL;

/* depth of ExecutorRun/ExecutorFinish/ProcessUtility/planner calls, as in pg_stat_statements */
static int	nesting_level = 0;

/* the innermost statement running now (parent of new ones; parallel workers read it) */
static int64 current_statement_id = 0;

/* planning that just happened, claimed by the ExecutorStart of the same query */
static struct
{
	int64		query_id;
	int			level;
	int64		start_ns;
	int64		plan_ns;
	bool		has_res;		/* res_start taken when planning began */
	MwinvResources res_start;
} pending_plan;

/* parse analysis of the next top-level statement, claimed by its record */
static struct
{
	bool		valid;
	int64		query_id;
	TimestampTz msg_ts;
	int64		start_ns;
	int64		end_ns;
} pending_parse;

/* end of this backend's last top-level record: a statement starts no earlier */
static int64 last_top_end_ns = 0;

/* the statement whose transaction ends next: its record is put when the transaction has ended */
static struct
{
	bool		valid;
	TimestampTz msg_ts;			/* its message's: what runs in the same message runs inside its end */
	MwinvResources res_start;
	MwinvRecord rec;
} ending;

/* query ids whose text this backend has already stored (cleared when texts are reset) */
#define TEXT_CACHE_SIZE 256
static int64 text_cache[TEXT_CACHE_SIZE];
static uint64 text_cache_generation = 0;

static int	exit_callback_pid = 0;

static post_parse_analyze_hook_type prev_post_parse_analyze_hook = NULL;
static planner_hook_type prev_planner_hook = NULL;
static ExecutorStart_hook_type prev_ExecutorStart = NULL;
static ExecutorRun_hook_type prev_ExecutorRun = NULL;
static ExecutorFinish_hook_type prev_ExecutorFinish = NULL;
static ExecutorEnd_hook_type prev_ExecutorEnd = NULL;
static ProcessUtility_hook_type prev_ProcessUtility = NULL;

#define tracked_at(level) \
	(mwinv_track == MWINV_TRACK_ALL || (mwinv_track == MWINV_TRACK_TOP && (level) == 0))

static void end_statement(MwinvActive *a, bool errored, int64 rows);

/* A top-level statement of a client backend: its start is the message's, not the hook's. */
static inline bool
client_top_level(void)
{
	return nesting_level == 0 && MyBackendType == B_BACKEND && !IsParallelWorker();
}

/*
 * A statement_timestamp()-clock instant on CLOCK_MONOTONIC, measured as the distance back from now
 * on the wall clock (one vDSO read): a per-backend offset would drift with NTP's slewing.
 */
static int64
monotonic_of_timestamp(TimestampTz ts, int64 now_ns)
{
	return now_ns - (int64) (GetCurrentTimestamp() - ts) * 1000;
}

/* When this top-level statement began: the message's start, after the previous statement's end. */
static int64
statement_start_ns(int64 now_ns)
{
	int64		start = monotonic_of_timestamp(GetCurrentStatementStartTimestamp(), now_ns);

	return Min(Max(start, last_top_end_ns), now_ns);
}

static void
set_current_statement(int64 id)
{
	current_statement_id = id;
	if (MyProc != NULL)
	{
		pg_atomic_uint64 *slot = mwinv_current_statement_of(MyProc->pgprocno);

		if (slot)
			pg_atomic_write_u64(slot, (uint64) id);
	}
}

/* End every open execution started at or below transaction level min_xact_level. */
static void
end_open_statements(int min_xact_level)
{
	MwinvActive *a = active_list;

	while (a != NULL)
	{
		MwinvActive *next = a->next;

		/* a running utility (ROLLBACK, ROLLBACK TO, CALL) is ended by its own hook */
		if (a->xact_level >= min_xact_level && !a->in_utility)
			end_statement(a, true, a->rec.rows);
		a = next;
	}
}

/* Put a finished record into the ring. */
static void
put_record(MwinvRecord *rec)
{
	if (rec->nesting_level == 0 && rec->leader_pid == 0)
		last_top_end_ns = rec->end_ns;
	if (MWINV_STATEMENT_DONE_ENABLED())
		MWINV_STATEMENT_DONE(rec->statement_id, rec->query_id);
	mwinv_ring_put(rec);
}

/* The statement whose transaction ended (at_end), or that no transaction end followed: put it. */
static void
put_ending(bool at_end)
{
	MwinvRecord *rec = &ending.rec;

	if (!ending.valid)
		return;
	ending.valid = false;
	if (at_end)
	{
		rec->end_ns = Max(rec->end_ns, mwinv_monotonic_ns());
		if (rec->has_resources)
		{
			mwinv_resources_read(&rec->res);
			mwinv_resources_delta(&rec->res, &ending.res_start);
		}
	}
	put_record(rec);
}

static void
mwinv_xact_callback(XactEvent event, void *arg)
{
	/* after the local commit and the pre-commit callbacks (postgres_fdw's remote COMMITs) */
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PREPARE || event == XACT_EVENT_ABORT)
		put_ending(true);
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
	{
		end_open_statements(0);
		nesting_level = 0;
		set_current_statement(0);
		pending_plan.query_id = 0;
		pending_parse.valid = false;
	}
}

static void
mwinv_subxact_callback(SubXactEvent event, SubTransactionId mySubid, SubTransactionId parentSubid,
					   void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		end_open_statements(GetCurrentTransactionNestLevel());
}

static void
mwinv_before_shmem_exit(int code, Datum arg)
{
	/* FATAL or backend exit in the middle of a statement: still emit its record */
	put_ending(false);
	end_open_statements(0);
}

static void
remember_text(int64 query_id, const char *source, int location, int len)
{
	uint64		generation = pg_atomic_read_u64(&mwinv_shared->text_generation);
	int			slot = (int) (((uint64) query_id * UINT64CONST(0x9E3779B97F4A7C15)) >> 56);
	const char *text;

	if (generation != text_cache_generation)
	{
		memset(text_cache, 0, sizeof(text_cache));
		text_cache_generation = generation;
	}
	if (text_cache[slot] == query_id || source == NULL)
		return;
	text = CleanQuerytext(source, &location, &len);
	mwinv_store_text(query_id, text, len);
	text_cache[slot] = query_id;
}

/*
 * Open a record.  measure: take rusage and /proc/self/io deltas (only for statements expensive
 * enough that two syscalls do not matter, see mwinv.resource_min_cost).
 */
static MwinvActive *
begin_statement(QueryDesc *query_desc, int64 query_id, const char *source, int location, int len,
				bool measure, bool utility)
{
	MwinvActive *a;
	MwinvRecord *rec;
	bool		res_from_plan = false;

	if (exit_callback_pid != MyProcPid)
	{
		before_shmem_exit(mwinv_before_shmem_exit, 0);
		exit_callback_pid = MyProcPid;
	}
	/*
	 * A later message's statement: the transaction did not end after it (a Sync still to come), it
	 * ended where its run did.  One of the same message (a deferred trigger's, at the commit) runs
	 * inside its end.
	 */
	if (nesting_level == 0 && ending.valid && GetCurrentStatementStartTimestamp() != ending.msg_ts)
		put_ending(false);
	if (free_list != NULL)
	{
		a = free_list;
		free_list = a->next;
	}
	else
		a = MemoryContextAlloc(TopMemoryContext, sizeof(MwinvActive));

	rec = &a->rec;
	rec->statement_id = mwinv_next_statement_id();
	rec->query_id = query_id;
	rec->pid = MyProcPid;
	rec->dbid = MyDatabaseId;
	rec->userid = GetUserId();
	rec->nesting_level = nesting_level;
	rec->errored = false;
	rec->utility = utility;
	rec->rows = 0;
	if (IsParallelWorker() && MyProc->lockGroupLeader != NULL)
	{
		PGPROC	   *leader = MyProc->lockGroupLeader;
		pg_atomic_uint64 *slot = mwinv_current_statement_of(leader->pgprocno);

		rec->leader_pid = leader->pid;
		rec->parent_statement_id = slot ? (int64) pg_atomic_read_u64(slot) : 0;
	}
	else
	{
		rec->leader_pid = 0;
		rec->parent_statement_id = current_statement_id;
	}

	rec->start_ns = mwinv_monotonic_ns();
	rec->plan_ns = -1;
	rec->parse_ns = -1;
	rec->client_wait_ns = 0;
	rec->has_resources = measure;
	if (client_top_level())
	{
		/*
		 * Parsed in this message, or in the Parse message before this Bind: the record starts where
		 * that message started; otherwise where this one did (Bind revalidating a cached plan waits
		 * for the same locks).
		 */
		if (pending_parse.valid &&
			((query_id != 0 && pending_parse.query_id == query_id) ||
			 pending_parse.msg_ts == GetCurrentStatementStartTimestamp()))
		{
			rec->parse_ns = pending_parse.end_ns - pending_parse.start_ns;
			rec->start_ns = pending_parse.start_ns;
		}
		else
			rec->start_ns = statement_start_ns(rec->start_ns);
		pending_parse.valid = false;
	}
	if (pending_plan.query_id != 0 && pending_plan.query_id == query_id && pending_plan.level == nesting_level)
	{
		/*
		 * Planned just before: the execution starts no later than its planning started, and so does
		 * its CPU (planning a first statement in a fresh backend, catalogs not yet cached, can take
		 * longer than executing it).  /proc/self/io starts from now: planning reads catalogs only.
		 */
		rec->plan_ns = pending_plan.plan_ns;
		rec->start_ns = Min(rec->start_ns, pending_plan.start_ns);
		res_from_plan = measure && pending_plan.has_res;
		if (res_from_plan)
		{
			a->res_start = pending_plan.res_start;
			mwinv_resources_read_io(&a->res_start);
		}
	}
	if (measure && !res_from_plan)
		mwinv_resources_read(&a->res_start);
	pending_plan.query_id = 0;
	rec->start_wall_ns = mwinv_wall_ns_from_monotonic(rec->start_ns);
	if (query_id != 0)
		remember_text(query_id, source, location, len);

	a->query_desc = query_desc;
	a->in_utility = utility;
	a->closed = false;
	a->ends_xact = false;
	a->ran = false;
	a->msg_ts = GetCurrentStatementStartTimestamp();
	a->last_return_ns = 0;
	a->has_res_last = false;
	a->xact_level = GetCurrentTransactionNestLevel();
	a->next = active_list;
	active_list = a;

	if (MWINV_STATEMENT_START_ENABLED())
		MWINV_STATEMENT_START(rec->statement_id, rec->query_id);
	return a;
}

static void
end_statement(MwinvActive *a, bool errored, int64 rows)
{
	MwinvRecord *rec = &a->rec;
	MwinvActive **link;

	rec->end_ns = mwinv_monotonic_ns();
	if (!a->closed && GetCurrentStatementStartTimestamp() != a->msg_ts)
		a->closed = true;
	/* closed before any run returned (a Bind never executed): it ended when the next message began */
	if (a->closed)
		rec->end_ns = a->ran ? a->last_return_ns :
			Max(rec->start_ns, monotonic_of_timestamp(GetCurrentStatementStartTimestamp(), rec->end_ns));
	rec->errored = errored;
	rec->rows = rows;
	if (rec->has_resources)
	{
		if (a->closed && a->has_res_last)
		{
			rec->res = a->res_last;
			mwinv_resources_read_io(&rec->res);
		}
		else
			mwinv_resources_read(&rec->res);
		mwinv_resources_delta(&rec->res, &a->res_start);
	}
	if (!errored && !a->closed && rec->nesting_level == 0 && rec->leader_pid == 0 &&
		MyBackendType == B_BACKEND && !IsParallelWorker() && (a->ends_xact || !IsTransactionBlock()) &&
		!(ending.valid && ending.msg_ts == a->msg_ts))
	{
		/* the transaction ends next (finish_xact_command): the callback puts it */
		put_ending(false);
		ending.rec = *rec;
		ending.msg_ts = a->msg_ts;
		ending.res_start = a->res_start;
		ending.valid = true;
	}
	else
		put_record(rec);

	for (link = &active_list; *link != NULL; link = &(*link)->next)
	{
		if (*link == a)
		{
			*link = a->next;
			break;
		}
	}
	a->next = free_list;
	free_list = a;
}

static MwinvActive *
find_active(QueryDesc *query_desc)
{
	for (MwinvActive *a = active_list; a != NULL; a = a->next)
		if (a->query_desc == query_desc)
			return a;
	return NULL;
}

/* Leave the planner's nesting level; its time waits for the execution record of the same query. */
static void
planning_done(int64 query_id, int64 start_ns, const MwinvResources *res_start)
{
	nesting_level--;
	pending_plan.query_id = query_id;
	pending_plan.level = nesting_level;
	pending_plan.start_ns = start_ns;
	pending_plan.plan_ns = mwinv_monotonic_ns() - start_ns;
	pending_plan.has_res = res_start != NULL;
	if (res_start != NULL)
		pending_plan.res_start = *res_start;
}

/* Parse analysis of a top-level statement ends: it began when its message did. */
static void
mwinv_post_parse_analyze(ParseState *pstate, Query *query, JumbleState *jstate)
{
	if (prev_post_parse_analyze_hook)
		prev_post_parse_analyze_hook(pstate, query, jstate);
	if (mwinv_track != MWINV_TRACK_NONE && client_top_level())
	{
		int64		now = mwinv_monotonic_ns();

		pending_parse.valid = true;
		pending_parse.query_id = (int64) query->queryId;
		pending_parse.msg_ts = GetCurrentStatementStartTimestamp();
		pending_parse.start_ns = statement_start_ns(now);
		pending_parse.end_ns = now;
	}
}

/*
 * Back from a run of the portal: the statement is idle from here until its next run or its end.  Only
 * runs are timed here (one vDSO read): ExecutorStart is followed by a run in the same message (or the
 * portal ends at the next message's start), ExecutorFinish by ExecutorEnd.
 */
static void
executor_returned(MwinvActive *a)
{
	if (a->closed)
		return;
	a->last_return_ns = mwinv_monotonic_ns();
	if (a->rec.has_resources)
	{
		mwinv_resources_read_cpu(&a->res_last);
		a->has_res_last = true;
	}
}

/*
 * A run of the portal after a later client message (Execute of a suspended portal, FETCH) continues
 * the statement: the time until that message arrived was the client's.  The first run's Execute
 * follows its Bind in the same packet (libpq, JDBC): that gap is the protocol's work, counted as
 * execution.  ExecutorFinish/End in a later message (the portal dropped by a Bind, CLOSE, COMMIT)
 * only clean up after it: end_statement ends the record where the last run returned.
 */
static void
run_resumed(MwinvActive *a)
{
	TimestampTz ts = GetCurrentStatementStartTimestamp();
	int64		now_ns,
				msg_ns;

	if (a->closed || ts == a->msg_ts)
		return;
	a->msg_ts = ts;
	if (!a->ran)
		return;
	now_ns = mwinv_monotonic_ns();
	msg_ns = monotonic_of_timestamp(ts, now_ns);
	if (msg_ns > a->last_return_ns)
		a->rec.client_wait_ns += msg_ns - a->last_return_ns;
}

static PlannedStmt *
mwinv_planner(Query *parse, const char *query_string, int cursorOptions, ParamListInfo boundParams)
{
	PlannedStmt *result;
	int64		start_ns;
	MwinvResources res_start;
	bool		measure = mwinv_resource_min_cost >= 0;

	if (!mwinv_track_planning || !tracked_at(nesting_level) || IsParallelWorker())
	{
		if (prev_planner_hook)
			return prev_planner_hook(parse, query_string, cursorOptions, boundParams);
		return standard_planner(parse, query_string, cursorOptions, boundParams);
	}

	/* the plan's cost is not known yet: CPU counters (one cheap getrusage) for every planned statement */
	if (measure)
		mwinv_resources_read_cpu(&res_start);
	start_ns = mwinv_monotonic_ns();
	nesting_level++;
	PG_TRY();
	{
		if (prev_planner_hook)
			result = prev_planner_hook(parse, query_string, cursorOptions, boundParams);
		else
			result = standard_planner(parse, query_string, cursorOptions, boundParams);
	}
	PG_CATCH();
	{
		/* an error while planning (e.g. 1/0 folded as a constant) still makes a record */
		planning_done((int64) parse->queryId, start_ns, NULL);
		end_statement(begin_statement(NULL, (int64) parse->queryId, query_string, parse->stmt_location,
									  parse->stmt_len, false, false), true, 0);
		PG_RE_THROW();
	}
	PG_END_TRY();
	planning_done((int64) parse->queryId, start_ns, measure ? &res_start : NULL);
	return result;
}

static void
mwinv_ExecutorStart(QueryDesc *queryDesc, int eflags)
{
	bool		track;

	if (IsParallelWorker())
	{
		/* follow the leader: a worker records when its leader's statement is recorded */
		PGPROC	   *leader = MyProc->lockGroupLeader;
		pg_atomic_uint64 *slot = leader ? mwinv_current_statement_of(leader->pgprocno) : NULL;

		track = mwinv_track != MWINV_TRACK_NONE && slot != NULL && pg_atomic_read_u64(slot) != 0;
	}
	else
		track = tracked_at(nesting_level);

	if (track)
	{
		PlannedStmt *ps = queryDesc->plannedstmt;
		bool		measure = mwinv_resource_min_cost >= 0 &&
			(IsParallelWorker() || ps->planTree->total_cost >= mwinv_resource_min_cost);

		/* errors in ExecutorStart end the record in the (sub)transaction abort callback */
		begin_statement(queryDesc, (int64) ps->queryId, queryDesc->sourceText, ps->stmt_location,
						ps->stmt_len, measure, false);
	}

	if (prev_ExecutorStart)
		prev_ExecutorStart(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);
}

typedef struct RunArgs
{
	ScanDirection direction;
	uint64		count;
	bool		execute_once;
} RunArgs;

static void
call_executor_run(QueryDesc *queryDesc, void *arg)
{
	RunArgs    *run = (RunArgs *) arg;

	if (prev_ExecutorRun)
		prev_ExecutorRun(queryDesc, run->direction, run->count, run->execute_once);
	else
		standard_ExecutorRun(queryDesc, run->direction, run->count, run->execute_once);
}

static void
call_executor_finish(QueryDesc *queryDesc, void *arg)
{
	if (prev_ExecutorFinish)
		prev_ExecutorFinish(queryDesc);
	else
		standard_ExecutorFinish(queryDesc);
}

/*
 * ExecutorRun and ExecutorFinish: one nesting level deeper, this statement is the running one
 * (parent of nested statements, link target of parallel workers); an error ends its record.
 */
static void
executor_nested(QueryDesc *queryDesc, void (*call) (QueryDesc *, void *), void *arg, bool run)
{
	int64		outer_statement = current_statement_id;
	MwinvActive *a = active_list ? find_active(queryDesc) : NULL;

	if (a)
	{
		if (run)
			run_resumed(a);
		set_current_statement(a->rec.statement_id);
	}
	nesting_level++;
	PG_TRY();
	{
		call(queryDesc, arg);
	}
	PG_CATCH();
	{
		nesting_level--;
		if (a)
		{
			set_current_statement(outer_statement);
			end_statement(a, true, a->rec.rows + (run && queryDesc->estate ? (int64) queryDesc->estate->es_processed : 0));
		}
		PG_RE_THROW();
	}
	PG_END_TRY();
	nesting_level--;
	if (a)
	{
		/* ExecutorRun counts from zero each call: a cursor's rows are the sum of its fetches */
		if (run && queryDesc->estate)
			a->rec.rows += (int64) queryDesc->estate->es_processed;
		if (run)
		{
			a->ran = true;
			executor_returned(a);
		}
		set_current_statement(outer_statement);
	}
}

static void
mwinv_ExecutorRun(QueryDesc *queryDesc, ScanDirection direction, uint64 count, bool execute_once)
{
	RunArgs		run = {direction, count, execute_once};

	executor_nested(queryDesc, call_executor_run, &run, true);
}

static void
mwinv_ExecutorFinish(QueryDesc *queryDesc)
{
	executor_nested(queryDesc, call_executor_finish, NULL, false);
}

static void
mwinv_ExecutorEnd(QueryDesc *queryDesc)
{
	MwinvActive *a = active_list ? find_active(queryDesc) : NULL;

	if (prev_ExecutorEnd)
		prev_ExecutorEnd(queryDesc);
	else
		standard_ExecutorEnd(queryDesc);
	if (a)
		end_statement(a, false, a->rec.rows);
}

/* Utility statements whose cost is always tiny: no resource syscalls for them. */
static bool
utility_is_cheap(Node *parsetree)
{
	return IsA(parsetree, TransactionStmt) || IsA(parsetree, VariableSetStmt) ||
		IsA(parsetree, VariableShowStmt) || IsA(parsetree, DeallocateStmt) ||
		IsA(parsetree, DiscardStmt);
}

static void
mwinv_ProcessUtility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
					 ProcessUtilityContext context, ParamListInfo params, QueryEnvironment *queryEnv,
					 DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	MwinvActive *a = NULL;
	int64		outer_statement = current_statement_id;

	/*
	 * EXECUTE runs its plan as this level's statement (recorded by the executor hooks), as
	 * pg_stat_statements does; PREPARE and DEALLOCATE run nothing.
	 */
	if (IsA(parsetree, ExecuteStmt) || IsA(parsetree, PrepareStmt) || IsA(parsetree, DeallocateStmt))
	{
		if (prev_ProcessUtility)
			prev_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
		else
			standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
		return;
	}

	if (mwinv_track_utility && tracked_at(nesting_level) && !IsParallelWorker())
	{
		bool		measure = mwinv_resource_min_cost >= 0 && !utility_is_cheap(parsetree);

		a = begin_statement(NULL, (int64) pstmt->queryId, queryString, pstmt->stmt_location,
							pstmt->stmt_len, measure, true);
		/* in a failed block, COMMIT and ROLLBACK only clean up: no transaction callback follows */
		a->ends_xact = IsA(parsetree, TransactionStmt) && !IsAbortedTransactionBlockState() &&
			(((TransactionStmt *) parsetree)->kind == TRANS_STMT_COMMIT ||
			 ((TransactionStmt *) parsetree)->kind == TRANS_STMT_ROLLBACK ||
			 ((TransactionStmt *) parsetree)->kind == TRANS_STMT_PREPARE);
		set_current_statement(a->rec.statement_id);
	}

	nesting_level++;
	PG_TRY();
	{
		if (prev_ProcessUtility)
			prev_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
		else
			standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
	}
	PG_CATCH();
	{
		nesting_level--;
		if (a)
		{
			set_current_statement(outer_statement);
			a->in_utility = false;
			end_statement(a, true, 0);
		}
		PG_RE_THROW();
	}
	PG_END_TRY();
	nesting_level--;
	if (a)
	{
		set_current_statement(outer_statement);
		a->in_utility = false;
		end_statement(a, false, qc ? (int64) qc->nprocessed : 0);
	}
}

void
mwinv_install_hooks(void)
{
	prev_post_parse_analyze_hook = post_parse_analyze_hook;
	post_parse_analyze_hook = mwinv_post_parse_analyze;
	prev_planner_hook = planner_hook;
	planner_hook = mwinv_planner;
	prev_ExecutorStart = ExecutorStart_hook;
	ExecutorStart_hook = mwinv_ExecutorStart;
	prev_ExecutorRun = ExecutorRun_hook;
	ExecutorRun_hook = mwinv_ExecutorRun;
	prev_ExecutorFinish = ExecutorFinish_hook;
	ExecutorFinish_hook = mwinv_ExecutorFinish;
	prev_ExecutorEnd = ExecutorEnd_hook;
	ExecutorEnd_hook = mwinv_ExecutorEnd;
	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = mwinv_ProcessUtility;
	RegisterXactCallback(mwinv_xact_callback, NULL);
	RegisterSubXactCallback(mwinv_subxact_callback, NULL);
}
