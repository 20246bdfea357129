// The machine's own ceiling for acid-style commits, with no server in the way.
//
// T threads, each the single writer of its own file (zero-filled and synced first, as a WAL
// segment is): write B bytes at the next position, then fdatasync; repeat. Prints the
// fdatasyncs completed per second over S seconds, after a 2-second warm-up. Run it pinned to
// one core to see what that core can pay for:
//
//   gcc -O2 -pthread bench/probes/fsync_ceiling.c -o /tmp/fsync_ceiling
//   taskset -c 0 /tmp/fsync_ceiling 16 1000 5 /tmp/fsync-probe   # threads bytes seconds dir
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FILE_BYTES (8L << 20)

static int bytes;
static const char *dir;
static atomic_long syncs;
static atomic_int stop;

static void fail(const char *what) {
    perror(what);
    exit(1);
}

static void *writer(void *arg) {
    char path[4096];
    snprintf(path, sizeof path, "%s/probe-%ld", dir, (long)arg);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) fail("open");
    char *zeros = calloc(1, 1 << 20);
    for (long at = 0; at < FILE_BYTES; at += 1 << 20)
        if (pwrite(fd, zeros, 1 << 20, at) != 1 << 20) fail("zero-fill");
    if (fsync(fd)) fail("fsync");
    char *record = malloc(bytes);
    memset(record, 'x', bytes);
    long position = 0;
    while (!atomic_load(&stop)) {
        if (pwrite(fd, record, bytes, position) != bytes) fail("pwrite");
        if (fdatasync(fd)) fail("fdatasync");
        position = position + bytes > FILE_BYTES - bytes ? 0 : position + bytes;
        atomic_fetch_add(&syncs, 1);
    }
    close(fd);
    unlink(path);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s threads bytes seconds dir\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[1]), seconds = atoi(argv[3]);
    bytes = atoi(argv[2]);
    dir = argv[4];
    if (threads < 1 || threads > 256 || bytes < 1 || seconds < 1) return 2;
    pthread_t ids[256];
    for (long i = 0; i < threads; i++)
        if (pthread_create(&ids[i], NULL, writer, (void *)i)) fail("pthread_create");
    sleep(2);
    long before = atomic_load(&syncs);
    sleep(seconds);
    long after = atomic_load(&syncs);
    atomic_store(&stop, 1);
    for (int i = 0; i < threads; i++) pthread_join(ids[i], NULL);
    printf("%d writers, %d-byte writes: %.0f fdatasync/s\n", threads, bytes, (double)(after - before) / seconds);
    return 0;
}
