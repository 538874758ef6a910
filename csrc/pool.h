/*
 * The resident buffer pool: plain malloc memory kept for reuse instead of freed.
 *
 * Fresh 0.1-1 MB mallocs are served by mmap and page-faulted in on first write, which costs as
 * much as the entropy decode itself; recycling buffers keeps them resident. The pool has its own
 * lock, so memory can be taken and given back without the GIL. No Python here.
 */
#ifndef DCTNET_POOL_H
#define DCTNET_POOL_H

#include <stddef.h>

#define POOL_MAX_BUFFERS 1024
#define POOL_MAX_BYTES ((size_t)256 << 20)

/* Memory for n bytes (a pooled buffer with up to 25% slack, or a fresh one); *cap: its size.
 * NULL when out of memory. */
char *pool_take(size_t n, size_t *cap);

/* Give p (cap bytes, from pool_take or malloc) back: kept for reuse, or freed. p may be NULL. */
void pool_give(char *p, size_t cap);

/* The buffers kept now and their bytes. */
void pool_stats(int *count, size_t *bytes);

/* Free every kept buffer. */
void pool_clear(void);

/* Once per process, before any other pool call: keeps the pool's lock usable in a child after
 * fork(). Returns 0, or -1 when the fork handlers cannot be installed. */
int pool_init(void);

#endif
