/*
 * USDT probes of provider "mwinv", with semaphores: a probe site costs one load and a
 * not-taken branch unless a tracer (uprobe with ref_ctr, bpftrace usdt:) is attached.
 */
#ifndef MWINV_PROBES_H
#define MWINV_PROBES_H

#ifdef HAVE_SDT
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

extern unsigned short mwinv_statement__start_semaphore;
extern unsigned short mwinv_statement__done_semaphore;

#define MWINV_STATEMENT_START_ENABLED() __builtin_expect(mwinv_statement__start_semaphore, 0)
#define MWINV_STATEMENT_START(statement_id, query_id) \
	STAP_PROBE2(mwinv, statement__start, statement_id, query_id)
#define MWINV_STATEMENT_DONE_ENABLED() __builtin_expect(mwinv_statement__done_semaphore, 0)
#define MWINV_STATEMENT_DONE(statement_id, query_id) \
	STAP_PROBE2(mwinv, statement__done, statement_id, query_id)
#else
#define MWINV_STATEMENT_START_ENABLED() (0)
#define MWINV_STATEMENT_START(statement_id, query_id) do {} while (0)
#define MWINV_STATEMENT_DONE_ENABLED() (0)
#define MWINV_STATEMENT_DONE(statement_id, query_id) do {} while (0)
#endif

#endif							/* MWINV_PROBES_H */
