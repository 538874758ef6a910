/* The resident buffer pool (see pool.h). */
#include "pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  char *ptr;
  size_t cap;
} pool_entry;

static pool_entry pool[POOL_MAX_BUFFERS];
static int pool_count;
static size_t pool_bytes;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

/* The pool is kept oldest first: takes search from the newest end, and a give that would
 * overflow the pool evicts the oldest buffers rather than dropping the one given back (when the
 * workload changes, e.g. from one image size to another, the old sizes would otherwise fill the
 * pool for good and every new batch would page-fault a fresh allocation in). */
char *pool_take(size_t n, size_t *cap) {
  char *p = NULL;
  pthread_mutex_lock(&pool_lock);
  /* Most recently returned first (warm in cache); accept up to 25% slack. */
  for (int i = pool_count - 1; i >= 0; i--) {
    if (pool[i].cap >= n && pool[i].cap - n <= n / 4 + 4096) {
      p = pool[i].ptr;
      *cap = pool[i].cap;
      pool_bytes -= pool[i].cap;
      memmove(&pool[i], &pool[i + 1], sizeof(pool_entry) * (size_t)(pool_count - 1 - i));
      pool_count--;
      break;
    }
  }
  pthread_mutex_unlock(&pool_lock);
  if (!p) {
    *cap = n ? n : 1;
    p = (char *)malloc(*cap);
  }
  return p;
}

void pool_give(char *p, size_t cap) {
  char *evicted[POOL_MAX_BUFFERS]; /* freed after the lock is released */
  int nevicted = 0, kept = 0;
  if (!p) return;
  pthread_mutex_lock(&pool_lock);
  if (cap <= POOL_MAX_BYTES) {
    int drop = 0;
    size_t bytes = pool_bytes;
    while (drop < pool_count && (pool_count - drop >= POOL_MAX_BUFFERS || bytes + cap > POOL_MAX_BYTES)) {
      evicted[nevicted++] = pool[drop].ptr;
      bytes -= pool[drop].cap;
      drop++;
    }
    if (drop) {
      memmove(&pool[0], &pool[drop], sizeof(pool_entry) * (size_t)(pool_count - drop));
      pool_count -= drop;
      pool_bytes = bytes;
    }
    if (pool_count < POOL_MAX_BUFFERS && pool_bytes + cap <= POOL_MAX_BYTES) {
      pool[pool_count].ptr = p;
      pool[pool_count].cap = cap;
      pool_count++;
      pool_bytes += cap;
      kept = 1;
    }
  }
  pthread_mutex_unlock(&pool_lock);
  for (int i = 0; i < nevicted; i++) free(evicted[i]);
  if (!kept) free(p);
}

void pool_stats(int *count, size_t *bytes) {
  pthread_mutex_lock(&pool_lock);
  *count = pool_count;
  *bytes = pool_bytes;
  pthread_mutex_unlock(&pool_lock);
}

void pool_clear(void) {
  pthread_mutex_lock(&pool_lock);
  while (pool_count > 0) {
    pool_count--;
    free(pool[pool_count].ptr);
  }
  pool_bytes = 0;
  pthread_mutex_unlock(&pool_lock);
}

/* fork() copies the pool's mutex in whatever state it is in: if another thread held it at that
 * moment, the child's first pool call would wait for ever (DataLoader workers and build processes
 * fork). Hold it across fork so the child starts with it unlocked and the pool consistent. */
static void pool_atfork_prepare(void) { pthread_mutex_lock(&pool_lock); }
static void pool_atfork_parent(void) { pthread_mutex_unlock(&pool_lock); }
static void pool_atfork_child(void) { pthread_mutex_unlock(&pool_lock); }

int pool_init(void) {
  static int atfork_done;
  if (!atfork_done) {
    if (pthread_atfork(pool_atfork_prepare, pool_atfork_parent, pool_atfork_child) != 0) return -1;
    atfork_done = 1;
  }
  return 0;
}
