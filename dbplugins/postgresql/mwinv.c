/*
 * mwinv.c - module entry: GUCs, shared memory hooks, hook installation, USDT semaphores.
 *
 * Split by concern like pg_stat_statements/pg_stat_kcache:
 *   mwinv_hooks.c     planner/executor/utility hooks, one record per statement execution
 *   mwinv_ring.c      the lock-free shared-memory ring, query texts, statement ids
 *   mwinv_resource.c  clocks, getrusage, /proc/self/io
 *   mwinv_funcs.c     SQL functions (drain, peek, texts, info, reset)
 */
#include "mwinv.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/guc.h"
#include "utils/queryjumble.h"

#include "mwinv_probes.h"

PG_MODULE_MAGIC;

#ifdef HAVE_SDT
/* USDT semaphores: a tracer attaching to a probe increments its semaphore */
__extension__ unsigned short mwinv_statement__start_semaphore
__attribute__((unused)) __attribute__((section(".probes")));
__extension__ unsigned short mwinv_statement__done_semaphore
__attribute__((unused)) __attribute__((section(".probes")));
#endif

int			mwinv_track = MWINV_TRACK_TOP;
bool		mwinv_track_utility = true;
bool		mwinv_track_planning = true;
double		mwinv_resource_min_cost = 1000.0;
bool		mwinv_track_io = true;
int			mwinv_buffer_size = 65536;
int			mwinv_max_texts = 5000;
int			mwinv_max_text_length = 4096;
char	   *mwinv_node_name = NULL;

static const struct config_enum_entry track_options[] = {
	{"none", MWINV_TRACK_NONE, false},
	{"top", MWINV_TRACK_TOP, false},
	{"all", MWINV_TRACK_ALL, false},
	{NULL, 0, false}
};

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

void		_PG_init(void);

static void
mwinv_shmem_request_hook(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	mwinv_shmem_request();
}

static void
mwinv_shmem_startup_hook(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	mwinv_shmem_startup();
}

static void
define_gucs(void)
{
	DefineCustomEnumVariable("mwinv.track", "Which statements mwinv records.",
							 "top: top-level statements; all: nested ones too (functions, DO); none.",
							 &mwinv_track, MWINV_TRACK_TOP, track_options,
							 PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("mwinv.track_utility", "Records utility statements too.", NULL,
							 &mwinv_track_utility, true, PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("mwinv.track_planning", "Records planning time (plan_ns).", NULL,
							 &mwinv_track_planning, true, PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomRealVariable("mwinv.resource_min_cost",
							 "Plan cost from which rusage and /proc/self/io deltas are taken.",
							 "Two getrusage calls cost about 1 % of a 25 us statement, so cheap "
							 "statements get only times. 0: every statement; -1: none.",
							 &mwinv_resource_min_cost, 1000.0, -1.0, 1e12,
							 PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("mwinv.track_io", "Reads /proc/self/io read/write bytes for measured statements.",
							 NULL, &mwinv_track_io, true, PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("mwinv.buffer_size", "Records the shared ring holds (full: dropped and counted).",
							NULL, &mwinv_buffer_size, 65536, 16, 16 * 1024 * 1024,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("mwinv.max_texts", "Distinct query texts kept (one per query id).",
							NULL, &mwinv_max_texts, 5000, 16, 1000000, PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("mwinv.max_text_length", "Bytes of a query text kept.",
							NULL, &mwinv_max_text_length, 4096, 64, 1024 * 1024,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("mwinv.node_name", "Node name the reader writes into captures.",
							   "Empty: the reader's host name.", &mwinv_node_name, "",
							   PGC_SIGHUP, 0, NULL, NULL, NULL);
	MarkGUCPrefixReserved("mwinv");
}

void
_PG_init(void)
{
	define_gucs();
	if (!process_shared_preload_libraries_in_progress)
		return;					/* SQL functions report that the module is not preloaded */

	EnableQueryId();
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = mwinv_shmem_request_hook;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = mwinv_shmem_startup_hook;
	mwinv_install_hooks();
}
