-- cpu_split: a summed statement's CPU time and its user part, one rule for summed_statement's two paths
-- (a statement's pieces, and a statement all on a CPU). Its rusage is exact for its CPU total and the
-- scheduler places it in time: on_cpu (on-CPU stretches plus runnable ones whose switch-in was not
-- recorded) up to the rusage total, the rest waited for a CPU; without rusage, or for a statement too
-- short for it (rusage_min_wall_ns, which the modules that call it declare), all of on_cpu is CPU. The
-- user part follows the rusage's user/sys ratio (a floor; sys is what it leaves: whole ns in all).
--
-- builds:  statement_cpu_ns, user_part_ns
-- inputs:  (none)
-- columns: (scalar macros: BIGINT)
CREATE MACRO statement_cpu_ns(has_rusage, wall_ns, u, k, on_cpu) AS
    CASE WHEN has_rusage AND wall_ns >= getvariable('rusage_min_wall_ns') THEN least(u + k, on_cpu) ELSE on_cpu END;
CREATE MACRO user_part_ns(cpu_ns, u, k) AS CASE WHEN u + k > 0 THEN floor(cpu_ns * u / (u + k)) ELSE cpu_ns END;
