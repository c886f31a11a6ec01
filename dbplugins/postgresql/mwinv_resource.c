/*
 * mwinv_resource.c - clocks and per-backend resource counters.
 *
 * Costs measured on the project's VM (2 vCPU, see README.md): clock_gettime via vDSO ~20 ns,
 * getrusage(RUSAGE_THREAD) ~150 ns, getrusage(RUSAGE_SELF) ~2 us, pread of /proc/self/io ~4 us.
 * So clocks are read for every statement, rusage and /proc/self/io only for statements whose
 * plan cost reaches mwinv.resource_min_cost, plus one getrusage when planning starts (the cost is
 * not known yet, and a statement's CPU includes its planning, as pg_stat_kcache's does).
 */

#include "mwinv.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "miscadmin.h"

/* CLOCK_REALTIME - CLOCK_MONOTONIC, taken once per backend: one clock read per timestamp. */
static int64 wall_offset_ns;
static int	wall_offset_pid;

/* /proc/self/io kept open per process: pread() at offset 0 re-generates it, no open/close. */
static int	proc_io_fd = -1;
static int	proc_io_pid;

static inline int64
timespec_ns(const struct timespec *ts)
{
	return (int64) ts->tv_sec * 1000000000 + ts->tv_nsec;
}

int64
mwinv_monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return timespec_ns(&ts);
}

int64
mwinv_wall_ns_from_monotonic(int64 mono_ns)
{
	if (wall_offset_pid != MyProcPid)
	{
		struct timespec wall,
					mono;

		clock_gettime(CLOCK_REALTIME, &wall);
		clock_gettime(CLOCK_MONOTONIC, &mono);
		wall_offset_ns = timespec_ns(&wall) - timespec_ns(&mono);
		wall_offset_pid = MyProcPid;
	}
	return mono_ns + wall_offset_ns;
}

static int64
parse_io_field(const char *buf, const char *name)
{
	const char *p = strstr(buf, name);

	return p ? strtoll(p + strlen(name), NULL, 10) : -1;
}

void
mwinv_resources_read_io(MwinvResources *r)
{
	char		buf[512];
	ssize_t		n;

	r->read_bytes = r->write_bytes = -1;
	if (!mwinv_track_io)
		return;
	if (proc_io_pid != MyProcPid)
	{
		/* a forked child must not use its parent's /proc/<pid>/io */
		if (proc_io_fd >= 0)
			close(proc_io_fd);
		proc_io_fd = open("/proc/self/io", O_RDONLY | O_CLOEXEC);
		proc_io_pid = MyProcPid;
	}
	if (proc_io_fd < 0)
		return;
	n = pread(proc_io_fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return;
	buf[n] = '\0';
	/* storage-level bytes, as pg_stat_kcache reports them */
	r->read_bytes = parse_io_field(buf, "\nread_bytes: ");
	r->write_bytes = parse_io_field(buf, "\nwrite_bytes: ");
}

void
mwinv_resources_read(MwinvResources *r)
{
	mwinv_resources_read_cpu(r);
	mwinv_resources_read_io(r);
}

/* getrusage only (no /proc/self/io): read_bytes/write_bytes are left unset */
void
mwinv_resources_read_cpu(MwinvResources *r)
{
	struct rusage ru;

	/* RUSAGE_THREAD: backends are single-threaded, and RUSAGE_SELF costs ~15x more here */
	getrusage(RUSAGE_THREAD, &ru);
	r->cpu_user_ns = (int64) ru.ru_utime.tv_sec * 1000000000 + (int64) ru.ru_utime.tv_usec * 1000;
	r->cpu_sys_ns = (int64) ru.ru_stime.tv_sec * 1000000000 + (int64) ru.ru_stime.tv_usec * 1000;
	r->minflt = ru.ru_minflt;
	r->majflt = ru.ru_majflt;
	r->inblock = ru.ru_inblock;
	r->oublock = ru.ru_oublock;
	r->nvcsw = ru.ru_nvcsw;
	r->nivcsw = ru.ru_nivcsw;
}

void
mwinv_resources_delta(MwinvResources *end, const MwinvResources *start)
{
	end->cpu_user_ns -= start->cpu_user_ns;
	end->cpu_sys_ns -= start->cpu_sys_ns;
	end->minflt -= start->minflt;
	end->majflt -= start->majflt;
	end->inblock -= start->inblock;
	end->oublock -= start->oublock;
	end->nvcsw -= start->nvcsw;
	end->nivcsw -= start->nivcsw;
	if (end->read_bytes >= 0 && start->read_bytes >= 0)
	{
		end->read_bytes -= start->read_bytes;
		end->write_bytes -= start->write_bytes;
	}
	else
		end->read_bytes = end->write_bytes = -1;
}
