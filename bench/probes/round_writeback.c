// What one shared flush round costs the core, per-shard files against regions of one file.
//
// A round as acid commits it today: each of N shards writes B bytes at the next position of
// its own log file (pwrite) and starts that range's write-back (sync_file_range WRITE);
// then the round's leader waits for every range (sync_file_range WAIT) and flushes the
// device cache with an fdatasync of an empty flush file. The alternative: the N shards'
// logs as regions of one file (8 MiB apart), each shard still writing only its own region,
// and one sync_file_range over the file starting (and waiting for) all N ranges at once.
// `burst`: per-shard files again, but every shard writes first and the N write-backs start
// back to back (as a worker's turn does since fd3c8f0), so the block layer dispatches them
// together, with fewer device notifications (a VM exit each here).
// Two more layouts for comparison, each shard flushing alone (no shared flush): `dsync`, a
// pwritev2 with RWF_DSYNC per shard, and `fdatasync`, a pwrite and an fdatasync per shard.
// `aio`: per-shard files opened O_DIRECT, each shard's write the 4 KiB blocks its bytes touch
// (the partial last block rewritten from the shard's own copy), all N submitted in one
// io_submit and reaped with io_getevents, then the shared flush: no page cache, no write-back
// machinery (what it would cost the readers, whose maps of those blocks a direct write drops,
// is measured by `aio-read`: after each round a reader touches each shard's newest byte
// through a shared map of its file, as a live reader would).
// Every file is zero-filled and synced first, as a segment is. Prints rounds per second and
// the CPU time per round (user + system of the process) after a 1-second warm-up:
//
//   gcc -O2 bench/probes/round_writeback.c -o /tmp/round_writeback
//   taskset -c 0 /tmp/round_writeback files 4 256 5 /tmp/round-probe    # layout shards bytes seconds dir
//   taskset -c 0 /tmp/round_writeback regions 4 256 5 /tmp/round-probe
//   taskset -c 0 /tmp/round_writeback burst 7 1500 4 /tmp/round-probe    # 84 against 101 us (files)
//   taskset -c 0 /tmp/round_writeback dsync 1 256 5 /tmp/round-probe
//   taskset -c 0 /tmp/round_writeback aio 7 1500 4 /tmp/round-probe       # 55 against 91-103 us (burst)
//   taskset -c 0 /tmp/round_writeback aio-read 7 1500 4 /tmp/round-probe  # 911 rounds/s, 951 us
//
// The directory is created and removed by the probe.
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define REGION_BYTES (8L << 20)
#define SHARDS_MAX 64

static void fail(const char *what) {
    perror(what);
    exit(1);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double cpu_s(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec +
           usage.ru_stime.tv_usec / 1e6;
}

// A file of `bytes` zeros, written and synced.
static int zeroed_file(const char *path, long bytes) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) fail("open");
    char *zeros = calloc(1, 1 << 20);
    for (long at = 0; at < bytes; at += 1 << 20)
        if (pwrite(fd, zeros, 1 << 20, at) != 1 << 20) fail("zero-fill");
    if (fsync(fd)) fail("fsync");
    free(zeros);
    return fd;
}

// One round of the `aio` layout: each shard's touched blocks written directly, all at once.
static void aio_round(aio_context_t context, int shards, const int *fds, char **copies, long *position,
                      const char *record, int bytes) {
    struct iocb iocbs[SHARDS_MAX], *pointers[SHARDS_MAX];
    for (int s = 0; s < shards; s++) {
        if (position[s] + bytes > REGION_BYTES) position[s] = 0;
        memcpy(copies[s] + position[s], record, bytes);
        long from = position[s] & ~4095L, to = (position[s] + bytes + 4095) & ~4095L;
        memset(&iocbs[s], 0, sizeof iocbs[s]);
        iocbs[s].aio_fildes = fds[s];
        iocbs[s].aio_lio_opcode = IOCB_CMD_PWRITE;
        iocbs[s].aio_buf = (unsigned long)(copies[s] + from);
        iocbs[s].aio_nbytes = to - from;
        iocbs[s].aio_offset = from;
        pointers[s] = &iocbs[s];
        position[s] += bytes;
    }
    if (syscall(SYS_io_submit, context, shards, pointers) != shards) fail("io_submit");
    struct io_event events[SHARDS_MAX];
    for (int done = 0; done < shards;) {
        long got = syscall(SYS_io_getevents, context, 1, shards - done, events, NULL);
        if (got < 1) fail("io_getevents");
        for (int e = 0; e < got; e++)
            if (events[e].res < 0) fail("direct write");
        done += got;
    }
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s files|burst|regions|dsync|fdatasync|aio SHARDS BYTES SECONDS DIR\n", argv[0]);
        return 2;
    }
    int regions = strcmp(argv[1], "regions") == 0, burst = strcmp(argv[1], "burst") == 0;
    int dsync = strcmp(argv[1], "dsync") == 0, each = strcmp(argv[1], "fdatasync") == 0;
    int aio = strncmp(argv[1], "aio", 3) == 0, aio_read = strcmp(argv[1], "aio-read") == 0;
    int shards = atoi(argv[2]), bytes = atoi(argv[3]), seconds = atoi(argv[4]);
    const char *dir = argv[5];
    if (shards < 1 || shards > SHARDS_MAX || bytes < 1 || bytes > (1 << 20)) fail("arguments");
    if (mkdir(dir, 0755) && access(dir, W_OK)) fail("mkdir");
    char path[4096];
    int fds[SHARDS_MAX];
    long base[SHARDS_MAX], position[SHARDS_MAX];
    if (regions) {
        snprintf(path, sizeof path, "%s/regions", dir);
        int fd = zeroed_file(path, REGION_BYTES * shards);
        for (int s = 0; s < shards; s++) fds[s] = fd, base[s] = REGION_BYTES * s;
    } else {
        for (int s = 0; s < shards; s++) {
            snprintf(path, sizeof path, "%s/shard-%d", dir, s);
            fds[s] = zeroed_file(path, REGION_BYTES);
            base[s] = 0;
        }
    }
    snprintf(path, sizeof path, "%s/FLUSH", dir);
    int flush = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (flush < 0 || fsync(flush)) fail("flush file");
    char *record = malloc(bytes);
    memset(record, 'r', bytes);
    for (int s = 0; s < shards; s++) position[s] = 0;
    aio_context_t context = 0;
    char *copies[SHARDS_MAX];
    if (aio) {
        if (syscall(SYS_io_setup, SHARDS_MAX, &context)) fail("io_setup");
        for (int s = 0; s < shards; s++) {
            close(fds[s]);
            snprintf(path, sizeof path, "%s/shard-%d", dir, s);
            fds[s] = open(path, O_RDWR | O_DIRECT);
            if (fds[s] < 0) fail("open O_DIRECT");
            if (posix_memalign((void **)&copies[s], 4096, REGION_BYTES)) fail("posix_memalign");
            memset(copies[s], 0, REGION_BYTES);
        }
    }
    volatile char *maps[SHARDS_MAX];
    for (int s = 0; aio_read && s < shards; s++) {
        maps[s] = mmap(NULL, REGION_BYTES, PROT_READ, MAP_SHARED, fds[s], 0);
        if (maps[s] == MAP_FAILED) fail("mmap");
    }
    long touched = 0;
    long rounds = 0, measured = 0;
    double start = now_s(), measure_from = start + 1, cpu_from = 0;
    while (now_s() < measure_from + seconds) {
        if (!measured && now_s() >= measure_from) {
            measured = 1, rounds = 0, cpu_from = cpu_s(), measure_from = now_s();
        }
        if (aio) {
            aio_round(context, shards, fds, copies, position, record, bytes);
            if (fdatasync(flush)) fail("fdatasync");
            for (int s = 0; aio_read && s < shards; s++) touched += maps[s][position[s] - 1];
            rounds++;
            continue;
        }
        if (dsync || each) {
            for (int s = 0; s < shards; s++) {
                if (position[s] + bytes > REGION_BYTES) position[s] = 0;
                struct iovec one = {record, (size_t)bytes};
                ssize_t written = dsync ? pwritev2(fds[s], &one, 1, position[s], RWF_DSYNC)
                                        : pwrite(fds[s], record, bytes, position[s]);
                if (written != bytes) fail("write");
                if (each && fdatasync(fds[s])) fail("fdatasync");
                position[s] += bytes;
            }
            rounds++;
            continue;
        }
        long low = -1, high = 0;
        for (int s = 0; s < shards; s++) {
            if (position[s] + bytes > REGION_BYTES) position[s] = 0;
            long at = base[s] + position[s];
            if (pwrite(fds[s], record, bytes, at) != bytes) fail("pwrite");
            position[s] += bytes;
            int start_now = !regions && !burst;
            if (start_now && sync_file_range(fds[s], at, bytes, SYNC_FILE_RANGE_WRITE)) fail("sfr write");
            if (low < 0 || at < low) low = at;
            if (at + bytes > high) high = at + bytes;
        }
        for (int s = 0; burst && s < shards; s++) {
            long at = base[s] + position[s] - bytes;
            if (sync_file_range(fds[s], at, bytes, SYNC_FILE_RANGE_WRITE)) fail("sfr burst");
        }
        if (regions) {
            unsigned flags = SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER;
            if (sync_file_range(fds[0], low, high - low, flags)) fail("sfr regions");
        } else {
            for (int s = 0; s < shards; s++) {
                long at = base[s] + position[s] - bytes;
                unsigned flags = SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER;
                if (sync_file_range(fds[s], at, bytes, flags)) fail("sfr wait");
            }
        }
        if (fdatasync(flush)) fail("fdatasync");
        rounds++;
    }
    double elapsed = now_s() - measure_from, cpu = cpu_s() - cpu_from;
    printf("%s shards=%d bytes=%d: %.0f rounds/s, %.1f us of CPU per round, core %.0f%% busy\n", argv[1],
           shards, bytes, rounds / elapsed, cpu / rounds * 1e6, cpu / elapsed * 100);
    if (aio_read) printf("the reader touched %ld bytes through its maps\n", touched / 'r');
    for (int s = 0; s < shards; s++) {
        snprintf(path, sizeof path, regions ? "%s/regions" : "%s/shard-%d", dir, s);
        unlink(path);
        if (regions) break;
    }
    snprintf(path, sizeof path, "%s/FLUSH", dir);
    unlink(path);
    rmdir(dir);
    return 0;
}
