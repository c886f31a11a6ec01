/*
 * mwinv_ring.c - shared memory: the record ring, the query text table, statement ids.
 *
 * The ring is a bounded multi-producer queue (D. Vyukov's design): every slot carries a
 * sequence number; a writer claims a position with one compare-and-swap on the head, copies
 * its record and publishes it by storing position+1 into the slot.  Writers never wait: when the
 * slot at the head still holds an unread record the ring is full and the record is dropped and
 * counted.  Only readers take a lock (reader_lock), to serialize among themselves; a capture that
 * maps the ring itself (mwinv_ring_attach()) is the one consumer while it is attached.
 *
 * The ring is its own shared mapping, a file in /dev/shm created by the postmaster, so that a
 * capture on the same host reads records straight from memory: under pgbench -S a backend that
 * copied ~90,000 records/s into a bytea for the reader, and the socket between them, cost more
 * throughput than the records' writers.
 */
#include "mwinv.h"

#include "access/twophase.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

MwinvShared *mwinv_shared = NULL;
HTAB	   *mwinv_texts = NULL;

/* per-PGPROC "current statement" entries padded to a cache line: no false sharing */
typedef union MwinvPaddedId
{
	pg_atomic_uint64 id;
	char		pad[PG_CACHE_LINE_SIZE];
} MwinvPaddedId;

#define STATEMENT_ID_BLOCK 1024

static int
mwinv_nprocs(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

static Size
text_entry_size(void)
{
	return MAXALIGN(offsetof(MwinvTextEntry, text) + mwinv_max_text_length + 1);
}

Size
mwinv_shmem_size(void)
{
	Size		size = MAXALIGN(sizeof(MwinvShared));

	size = add_size(size, mul_size(mwinv_nprocs(), sizeof(MwinvPaddedId)));
	size = add_size(size, PG_CACHE_LINE_SIZE);
	size = add_size(size, hash_estimate_size(mwinv_max_texts, text_entry_size()));
	return size;
}

void
mwinv_shmem_request(void)
{
	RequestAddinShmemSpace(mwinv_shmem_size());
	RequestNamedLWLockTranche("mwinv", 2);
}

static Size
ring_size(void)
{
	return add_size(sizeof(MwinvRing), mul_size(mwinv_buffer_size, sizeof(MwinvSlot)));
}

/* Postmaster exit (and crash restart, which maps a new one): the file goes, readers keep their map. */
static void
ring_unmap(int code, Datum arg)
{
	if (MyProcPid != PostmasterPid || mwinv_shared == NULL || mwinv_shared->ring == NULL)
		return;
	if (mwinv_shared->ring_file[0])
		unlink(mwinv_shared->ring_file);
	munmap(mwinv_shared->ring, ring_size());
	mwinv_shared->ring = NULL;
}

/*
 * The ring's file, always a new one: O_EXCL and O_NOFOLLOW, 0600 whatever the umask, checked with
 * fstat.  /dev/shm is writable by every local user, who may have made the name first (a file of
 * theirs, mode 0666, would give them the ring; a symlink would point it elsewhere): such a name is
 * never opened and does not stop the server, the file gets a random suffix instead and readers
 * learn its name from mwinv_ring_attach().  Returns the descriptor, or -1 with errno set.
 */
static int
ring_create(char *path, size_t len, Size size)
{
	struct stat st;
	int			fd = -1;

	snprintf(path, len, "/dev/shm/mwinv.%d", (int) MyProcPid);
	for (int attempt = 0; attempt < 4; attempt++)
	{
		uint64		suffix;

		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, S_IRUSR | S_IWUSR);
		if (fd >= 0)
			break;
		if (errno != EEXIST)
			return -1;
		if (attempt == 0)
		{
			bool		found = lstat(path, &st) == 0;
			/* of this OS user: most likely left by a server killed with -9 whose pid we now have */
			bool		ours = found && S_ISREG(st.st_mode) && st.st_uid == geteuid();

			ereport(ours ? LOG : WARNING,
					(errmsg("mwinv: %s exists already (%s, owner uid %d): not opened, the ring goes to a file "
							"of a random name", path, ours ? "a file of this OS user" :
							found && S_ISLNK(st.st_mode) ? "a symbolic link" : "not made by this server",
							found ? (int) st.st_uid : -1)));
		}
		if (!pg_strong_random(&suffix, sizeof(suffix)))
			return -1;
		snprintf(path, len, "/dev/shm/mwinv.%d.%016llx", (int) MyProcPid, (unsigned long long) suffix);
	}
	if (fd < 0)
		return -1;
	if (fchmod(fd, S_IRUSR | S_IWUSR) != 0 || ftruncate(fd, size) != 0 || fstat(fd, &st) != 0)
		goto fail;
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 07777) != (S_IRUSR | S_IWUSR) ||
		st.st_nlink != 1 || (Size) st.st_size != size)
	{
		errno = EPERM;
		goto fail;
	}
	return fd;
fail:
	{
		int			save = errno;

		unlink(path);
		close(fd);
		errno = save;
	}
	return -1;
}

/*
 * The ring's mapping, made by the postmaster before it forks any backend.  A file that cannot be
 * made leaves the ring readable through SQL only (an anonymous shared mapping).  Backends use the
 * header's sizes and token only through their copies in MwinvShared: the mapping is writable by its
 * reader too, and a slot count of 0 read from it made every backend divide by zero.
 */
static void
ring_map(MwinvShared *sh)
{
	Size		size = ring_size();
	void	   *p = MAP_FAILED;
	int			fd;
	MwinvRing  *ring;

	/* the reader reads these offsets by number */
	StaticAssertStmt(offsetof(MwinvRing, head) == 64 && offsetof(MwinvRing, tail) == 128 &&
					 offsetof(MwinvRing, dropped) == 192 && sizeof(MwinvRing) == 256,
					 "mwinv ring header layout changed");
	fd = ring_create(sh->ring_file, sizeof(sh->ring_file), size);
	if (fd >= 0)
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
	{
		ereport(WARNING,
				(errmsg("mwinv: could not map %s: %m; records are read through SQL only", sh->ring_file)));
		if (fd >= 0)
			unlink(sh->ring_file);
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			ereport(FATAL,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("mwinv: could not map a ring of %zu bytes: %m", size)));
		sh->ring_file[0] = '\0';
	}
	if (fd >= 0)
		close(fd);

	ring = (MwinvRing *) p;
	sh->nslots = mwinv_buffer_size;
	if (!pg_strong_random(&sh->ring_token, sizeof(sh->ring_token)))
		sh->ring_token = (uint64) MyStartTime ^ ((uint64) MyProcPid << 32);
	memcpy(ring->magic, MWINV_RING_MAGIC, sizeof(ring->magic));
	ring->version = MWINV_RING_VERSION;
	ring->header_size = sizeof(MwinvRing);
	ring->slot_size = sizeof(MwinvSlot);
	ring->record_offset = offsetof(MwinvSlot, rec);
	ring->nslots = sh->nslots;
	ring->reader_pid = 0;
	ring->token = sh->ring_token;
	pg_atomic_init_u64(&ring->head, 0);
	pg_atomic_init_u64(&ring->tail, 0);
	pg_atomic_init_u64(&ring->dropped, 0);
	sh->ring = ring;
	sh->slots = (MwinvSlot *) ((char *) p + sizeof(MwinvRing));
	for (uint32 i = 0; i < sh->nslots; i++)
		pg_atomic_init_u64(&sh->slots[i].seq, i);
	on_shmem_exit(ring_unmap, (Datum) 0);
}

void
mwinv_shmem_startup(void)
{
	bool		found;
	HASHCTL		info;
	Size		size;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	size = MAXALIGN(sizeof(MwinvShared)) + mwinv_nprocs() * sizeof(MwinvPaddedId) + PG_CACHE_LINE_SIZE;
	mwinv_shared = ShmemInitStruct("mwinv", size, &found);
	if (!found)
	{
		LWLockPadded *locks = GetNamedLWLockTranche("mwinv");
		char	   *p = (char *) mwinv_shared + MAXALIGN(sizeof(MwinvShared));
		struct timespec ts;

		mwinv_shared->reader_lock = &locks[0].lock;
		mwinv_shared->text_lock = &locks[1].lock;
		pg_atomic_init_u64(&mwinv_shared->texts_dropped, 0);
		pg_atomic_init_u64(&mwinv_shared->text_generation, 1);
		/* ids start at wall-clock microseconds * 1024: unique across server restarts too */
		clock_gettime(CLOCK_REALTIME, &ts);
		pg_atomic_init_u64(&mwinv_shared->next_statement_id,
						   ((uint64) ts.tv_sec * 1000000 + ts.tv_nsec / 1000) << 10);
		mwinv_shared->stats_reset = GetCurrentTimestamp();
		mwinv_shared->nprocs = mwinv_nprocs();
		p = (char *) TYPEALIGN(PG_CACHE_LINE_SIZE, p);
		mwinv_shared->current_statement = (pg_atomic_uint64 *) p;
		for (int i = 0; i < mwinv_shared->nprocs; i++)
			pg_atomic_init_u64(&((MwinvPaddedId *) p)[i].id, 0);
		ring_map(mwinv_shared);
	}

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(int64);
	info.entrysize = text_entry_size();
	mwinv_texts = ShmemInitHash("mwinv texts", mwinv_max_texts, mwinv_max_texts, &info,
								HASH_ELEM | HASH_BLOBS);
	LWLockRelease(AddinShmemInitLock);
}

/* The "current statement" entry of a PGPROC (parallel workers read their leader's). */
pg_atomic_uint64 *
mwinv_current_statement_of(int pgprocno)
{
	if (mwinv_shared == NULL || pgprocno < 0 || pgprocno >= mwinv_shared->nprocs)
		return NULL;
	return &((MwinvPaddedId *) mwinv_shared->current_statement)[pgprocno].id;
}

bool
mwinv_ring_put(const MwinvRecord *rec)
{
	MwinvShared *sh = mwinv_shared;
	MwinvRing  *ring = sh->ring;
	uint64		pos = pg_atomic_read_u64(&ring->head);
	int			stuck = 0;

	for (;;)
	{
		MwinvSlot  *slot = &sh->slots[pos % sh->nslots];
		int64		diff = (int64) (pg_atomic_read_u64(&slot->seq) - pos);

		if (diff == 0)
		{
			/* the slot is free for this lap: claim the position */
			if (pg_atomic_compare_exchange_u64(&ring->head, &pos, pos + 1))
			{
				memcpy(&slot->rec, rec, sizeof(MwinvRecord));
				pg_write_barrier();
				pg_atomic_write_u64(&slot->seq, pos + 1);
				return true;
			}
			/* lost the race: pos now holds the current head, retry */
		}
		else if (diff < 0)
		{
			/* the reader has not taken this slot's previous record yet: full */
			pg_atomic_fetch_add_u64(&ring->dropped, 1);
			return false;
		}
		else
		{
			uint64		head = pg_atomic_read_u64(&ring->head);

			/*
			 * Another writer took pos: the head moves on.  A slot ahead of a head that stays put was
			 * written by no backend (the mapping is writable by its reader): dropped, not spun on.
			 */
			if (head == pos && ++stuck > 1000)
			{
				pg_atomic_fetch_add_u64(&ring->dropped, 1);
				return false;
			}
			pos = head;
		}
	}
}

/*
 * Take up to max records out of the ring (caller holds reader_lock exclusively).  Records
 * still being written stop the read; they come with the next call.
 */
int
mwinv_ring_take(MwinvRecord *out, int max)
{
	MwinvShared *sh = mwinv_shared;
	MwinvRing  *ring = sh->ring;
	uint64		pos = pg_atomic_read_u64(&ring->tail);
	int			n = 0;

	while (n < max)
	{
		MwinvSlot  *slot = &sh->slots[pos % sh->nslots];

		if (pg_atomic_read_u64(&slot->seq) != pos + 1)
			break;
		pg_read_barrier();
		if (out)
			memcpy(&out[n], &slot->rec, sizeof(MwinvRecord));
		pg_memory_barrier();
		/* free the slot for the writer of the next lap */
		pg_atomic_write_u64(&slot->seq, pos + sh->nslots);
		pos++;
		n++;
	}
	pg_atomic_write_u64(&ring->tail, pos);
	return n;
}

/* Store the text of a query id once; called only when this backend has not seen the id yet. */
void
mwinv_store_text(int64 query_id, const char *text, int len)
{
	MwinvTextEntry *entry;
	bool		found;

	LWLockAcquire(mwinv_shared->text_lock, LW_SHARED);
	found = hash_search(mwinv_texts, &query_id, HASH_FIND, NULL) != NULL;
	LWLockRelease(mwinv_shared->text_lock);
	if (found)
		return;

	LWLockAcquire(mwinv_shared->text_lock, LW_EXCLUSIVE);
	entry = hash_search(mwinv_texts, &query_id, HASH_ENTER_NULL, &found);
	if (entry == NULL)
		pg_atomic_fetch_add_u64(&mwinv_shared->texts_dropped, 1);
	else if (!found)
	{
		len = Min(len, mwinv_max_text_length);
		/* never cut a multibyte character in half */
		len = pg_mbcliplen(text, len, len);
		entry->userid = GetUserId();
		entry->dbid = MyDatabaseId;
		entry->len = len;
		memcpy(entry->text, text, len);
		entry->text[len] = '\0';
	}
	LWLockRelease(mwinv_shared->text_lock);
}

/* A statement id unique on this node: blocks of ids from one shared counter. */
int64
mwinv_next_statement_id(void)
{
	static uint64 next_id,
				end_id;
	static int	owner_pid;

	if (owner_pid != MyProcPid || next_id == end_id)
	{
		next_id = pg_atomic_fetch_add_u64(&mwinv_shared->next_statement_id, STATEMENT_ID_BLOCK);
		end_id = next_id + STATEMENT_ID_BLOCK;
		owner_pid = MyProcPid;
	}
	return (int64) next_id++;
}

/* Discard all records and texts, zero the counters (mwinv_reset()). */
void
mwinv_ring_reset(void)
{
	HASH_SEQ_STATUS status;
	MwinvTextEntry *entry;

	LWLockAcquire(mwinv_shared->reader_lock, LW_EXCLUSIVE);
	mwinv_ring_check_consumer();
	while (mwinv_ring_take(NULL, INT_MAX) > 0)
		;
	pg_atomic_write_u64(&mwinv_shared->ring->dropped, 0);
	pg_atomic_write_u64(&mwinv_shared->texts_dropped, 0);
	mwinv_shared->stats_reset = GetCurrentTimestamp();
	LWLockRelease(mwinv_shared->reader_lock);

	LWLockAcquire(mwinv_shared->text_lock, LW_EXCLUSIVE);
	hash_seq_init(&status, mwinv_texts);
	while ((entry = hash_seq_search(&status)) != NULL)
		hash_search(mwinv_texts, &entry->query_id, HASH_REMOVE, NULL);
	pg_atomic_fetch_add_u64(&mwinv_shared->text_generation, 1);
	LWLockRelease(mwinv_shared->text_lock);
}

/*
 * Copy up to max unread records from *pos on without taking them (caller holds reader_lock);
 * *pos advances.  A consumer may take records meanwhile (a mapped reader does not take the lock):
 * a slot whose sequence changed while it was copied is not kept, and the copy goes on at the tail.
 */
int
mwinv_ring_peek(MwinvRecord *out, int max, uint64 *pos)
{
	MwinvShared *sh = mwinv_shared;
	MwinvRing  *ring = sh->ring;
	int			n = 0;

	while (n < max)
	{
		uint64		tail = pg_atomic_read_u64(&ring->tail);
		MwinvSlot  *slot;

		if (*pos < tail)
			*pos = tail;
		slot = &sh->slots[*pos % sh->nslots];
		if (pg_atomic_read_u64(&slot->seq) != *pos + 1)
			break;
		pg_read_barrier();
		memcpy(&out[n], &slot->rec, sizeof(MwinvRecord));
		pg_read_barrier();
		if (pg_atomic_read_u64(&slot->seq) != *pos + 1)
			continue;			/* taken and written again while copied */
		n++;
		(*pos)++;
	}
	return n;
}

/*
 * Caller holds reader_lock exclusively and is about to consume: not while a live process maps the
 * ring and consumes (two consumers would free each other's slots).  A reader that died is forgotten.
 */
void
mwinv_ring_check_consumer(void)
{
	MwinvRing  *ring = mwinv_shared->ring;
	int			pid = ring->reader_pid;

	if (pid == 0)
		return;
	/* not a pid (kill(-1, 0) would find "a process"): written by no attach, forgotten */
	if (pid > 0 && (kill(pid, 0) == 0 || errno == EPERM))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("mwinv: the ring is being read by process %d (a capture that maps it)", pid)));
	ring->reader_pid = 0;
}
