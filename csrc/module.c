/*
 * dctnet._jpeg: the Python face of dctjpeg.c.
 *
 * One decoder (libjpeg state + a file buffer) per OS thread, kept in thread-local storage and
 * reused across calls. The GIL is released once per call, for all file I/O and libjpeg work.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <stdio.h>
#include <string.h>
#include <jconfig.h> /* LIBJPEG_TURBO_VERSION_NUMBER */

#include "dctjpeg.h"
#include "crop.h"
#include "sparse.h"

#define MAX_FILE_BYTES ((size_t)1 << 31) /* 2 GiB: far above any JPEG libjpeg can describe */
#define KEEP_FILE_BUFFER ((size_t)64 << 20)  /* per-thread file buffer kept between calls */

/* A job is one source and everything its decode produced, so results can be turned into Python
 * objects after the GIL is back (read() handles one job, read_many() a list of them). */
typedef struct job_t job_t;
struct job_t {
  /* input, set with the GIL */
  PyObject *src;        /* owned: another thread may drop its caller's reference while we decode */
  PyObject *path_bytes; /* owned: fs-encoded path, or NULL for buffer input */
  Py_buffer in_view;
  int have_in;
  /* output of run_job */
  int status; /* ST_* */
  int io_err;
  int saturated;
  dctj_header hdr;
  char *mem; /* pool memory holding the planes (default output) */
  size_t mem_cap;
  int num_warnings, num_texts, num_lost;
  char error[DCTJ_MSG_LEN];
  char warnings[DCTJ_MAX_WARNINGS][DCTJ_MSG_LEN];
};

enum { ST_OK, ST_JPEG_ERROR, ST_IO_ERROR, ST_OUT_TOO_SMALL, ST_NO_MEMORY, ST_NOT_REGULAR };

/* io_err value of read_file for a path that is not a regular file (FIFO, socket, device). */
#define ERR_NOT_REGULAR (-1)

typedef struct {
  dctj_decoder *dec;
  uint8_t *file_buf;
  size_t file_cap;
  struct job_t *job; /* scratch for read(), while job_busy is 0 */
  int16_t *planes;   /* decode_windows(): one image's planes, reused (cache-hot) */
  size_t planes_cap; /* in int16 elements */
  int job_busy;      /* a read() on this thread is using job: a re-entrant call takes its own */
  size_t files_hint; /* read_headers(): bytes the last batch's files took */
} thread_state;

static pthread_key_t tls_key;
static PyObject *error_type; /* dctnet.codec.JpegError once registered, ValueError before */

static void thread_state_free(void *p) {
  thread_state *ts = (thread_state *)p;
  if (!ts) return;
  dctj_free(ts->dec);
  free(ts->file_buf);
  free(ts->planes);
  free(ts->job);
  free(ts);
}

static thread_state *get_thread_state(void) {
  thread_state *ts = (thread_state *)pthread_getspecific(tls_key);
  if (ts) return ts;
  ts = (thread_state *)calloc(1, sizeof(thread_state));
  if (!ts) return NULL;
  ts->dec = dctj_new();
  ts->job = (job_t *)malloc(sizeof(job_t));
  if (!ts->dec || !ts->job || pthread_setspecific(tls_key, ts) != 0) {
    thread_state_free(ts);
    return NULL;
  }
  return ts;
}

/* Open a regular file for reading and learn its size. Without the GIL. Returns 0 (*fd open), an
 * errno value (EFBIG for files over MAX_FILE_BYTES), or ERR_NOT_REGULAR. */
static int open_regular(const char *path, int *fd_out, size_t *size) {
  struct stat st;
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer for ever. It has no
   * effect on reads of regular files, the only kind read below. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return e;
  }
  if (S_ISDIR(st.st_mode) || !S_ISREG(st.st_mode) || st.st_size < 0 || (size_t)st.st_size > MAX_FILE_BYTES) {
    close(fd);
    return S_ISDIR(st.st_mode) ? EISDIR : !S_ISREG(st.st_mode) ? ERR_NOT_REGULAR : EFBIG;
  }
  *fd_out = fd;
  *size = (size_t)st.st_size;
  return 0;
}

/* Read up to size bytes of fd into dst and close it; *got: what was there (a file that shrank
 * under us decodes what it has). Returns 0 or an errno value. */
static int read_all(int fd, uint8_t *dst, size_t size, size_t *got) {
  size_t n = 0;
  while (n < size) {
    ssize_t r = read(fd, dst + n, size - n);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      close(fd);
      return e;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  *got = n;
  return 0;
}

/* Read a whole file into the thread's buffer. Called without the GIL. Returns 0, an errno value
 * (EFBIG for files over MAX_FILE_BYTES), or ERR_NOT_REGULAR. */
static int read_file(thread_state *ts, const char *path, size_t *len) {
  int fd;
  size_t size;
  int e = open_regular(path, &fd, &size);
  if (e) return e;
  if (size > ts->file_cap || (ts->file_cap > KEEP_FILE_BUFFER && size < KEEP_FILE_BUFFER)) {
    uint8_t *nb = (uint8_t *)malloc(size ? size : 1);
    if (!nb) {
      close(fd);
      return ENOMEM;
    }
    free(ts->file_buf);
    ts->file_buf = nb;
    ts->file_cap = size ? size : 1;
  }
  return read_all(fd, ts->file_buf, size, len);
}

static void raise_jpeg_error(const char *reason, PyObject *source) {
  PyObject *exc = PyObject_CallFunction(error_type, "sO", reason, source ? source : Py_None);
  if (exc) {
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  }
}


/* ---------------------------------------------------------------- output buffers
 *
 * The default output (no caller buffer) is a CoefBuffer: a plain writable buffer object whose
 * memory comes from a small free list. Fresh 0.1-1 MB mallocs are served by mmap and page-
 * faulted in on first write, which costs as much as the entropy decode itself;
 * recycling buffers keeps them resident. The pool has its own lock so that memory can be taken
 * without the GIL, letting one read() call release the GIL just once. */

#define POOL_MAX_BUFFERS 1024
#define POOL_MAX_BYTES ((size_t)256 << 20)

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
static char *pool_take(size_t n, size_t *cap) {
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

static void pool_give(char *p, size_t cap) {
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

typedef struct {
  PyObject_HEAD char *ptr;
  size_t cap;
  Py_ssize_t len;
} CoefBuffer;

static void coefbuffer_dealloc(CoefBuffer *self) {
  pool_give(self->ptr, self->cap);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int coefbuffer_getbuffer(CoefBuffer *self, Py_buffer *view, int flags) {
  return PyBuffer_FillInfo(view, (PyObject *)self, self->ptr, self->len, 0, flags);
}

static Py_ssize_t coefbuffer_length(CoefBuffer *self) { return self->len; }

static PyBufferProcs coefbuffer_as_buffer = {(getbufferproc)coefbuffer_getbuffer, NULL};
static PySequenceMethods coefbuffer_as_sequence = {.sq_length = (lenfunc)coefbuffer_length};

static PyTypeObject CoefBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dctnet._jpeg.CoefBuffer",
    .tp_basicsize = sizeof(CoefBuffer),
    .tp_dealloc = (destructor)coefbuffer_dealloc,
    .tp_as_buffer = &coefbuffer_as_buffer,
    .tp_as_sequence = &coefbuffer_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Writable memory holding a JPEG's int16 coefficient planes (recycled when freed).",
};

/* Wrap pool memory (taken without the GIL) in a CoefBuffer; on failure the memory goes back. */
static CoefBuffer *coefbuffer_wrap(char *ptr, size_t cap, size_t len) {
  CoefBuffer *b = PyObject_New(CoefBuffer, &CoefBufferType);
  if (!b) {
    pool_give(ptr, cap);
    return NULL;
  }
  b->ptr = ptr;
  b->cap = cap;
  b->len = (Py_ssize_t)len;
  return b;
}

static PyObject *py_alloc(PyObject *self, PyObject *arg) {
  Py_ssize_t n = PyLong_AsSsize_t(arg);
  size_t cap;
  char *mem;
  (void)self;
  if (n < 0) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "alloc: negative size");
    return NULL;
  }
  mem = pool_take((size_t)n, &cap);
  if (!mem) return PyErr_NoMemory();
  return (PyObject *)coefbuffer_wrap(mem, cap, (size_t)n);
}

static PyObject *py_pool_info(PyObject *self, PyObject *unused) {
  int count;
  size_t bytes;
  (void)self;
  (void)unused;
  pthread_mutex_lock(&pool_lock);
  count = pool_count;
  bytes = pool_bytes;
  pthread_mutex_unlock(&pool_lock);
  return Py_BuildValue("{s:i,s:n}", "buffers", count, "bytes", (Py_ssize_t)bytes);
}

static PyObject *py_pool_clear(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  pthread_mutex_lock(&pool_lock);
  while (pool_count > 0) {
    pool_count--;
    free(pool[pool_count].ptr);
  }
  pool_bytes = 0;
  pthread_mutex_unlock(&pool_lock);
  Py_RETURN_NONE;
}

/* ---------------------------------------------------------------- result building */

static PyObject *color_space_names[8], *process_names[16];

static PyObject *cached_name(PyObject **cache, int n, int i, const char *(*namer)(int)) {
  if (i < 0 || i >= n) i = n - 1; /* the namers answer "unknown" for out-of-range values */
  if (!cache[i]) {
    cache[i] = PyUnicode_InternFromString(namer(i));
    if (!cache[i]) return NULL;
  }
  return Py_NewRef(cache[i]);
}

static PyObject *pair(int a, int b) {
  PyObject *t = PyTuple_New(2);
  if (!t) return NULL;
  PyTuple_SET_ITEM(t, 0, PyLong_FromLong(a));
  PyTuple_SET_ITEM(t, 1, PyLong_FromLong(b));
  return t;
}

static PyObject *int_or_none(int present, long v) { return present ? PyLong_FromLong(v) : Py_NewRef(Py_None); }

/* Header facts as a flat tuple, in the order dctnet.codec._HEADER_FIELDS names them (a tuple
 * is several times cheaper to build and unpack than a dict, and this runs once per image). */
#define HEADER_FIELDS 20
static PyObject *header_tuple(const dctj_header *h) {
  int nc = h->num_components, i = 0;
  PyObject *t = PyTuple_New(HEADER_FIELDS);
  PyObject *sampling = PyTuple_New(nc), *ids = PyTuple_New(nc), *qidx = PyTuple_New(nc);
  PyObject *blocks = PyTuple_New(nc), *coded = PyTuple_New(nc);
  uint16_t quant[DCTJ_MAX_COMPONENTS * 64];
  if (!t || !sampling || !ids || !qidx || !blocks || !coded) {
    Py_XDECREF(t);
    Py_XDECREF(sampling);
    Py_XDECREF(ids);
    Py_XDECREF(qidx);
    Py_XDECREF(blocks);
    Py_XDECREF(coded);
    return NULL;
  }
  for (int c = 0; c < nc; c++) {
    const dctj_component *cp = &h->comp[c];
    PyTuple_SET_ITEM(sampling, c, pair(cp->h_samp, cp->v_samp));
    PyTuple_SET_ITEM(ids, c, PyLong_FromLong(cp->id));
    PyTuple_SET_ITEM(qidx, c, PyLong_FromLong(cp->quant_index));
    PyTuple_SET_ITEM(blocks, c, pair(cp->blocks_h, cp->blocks_w));
    PyTuple_SET_ITEM(coded, c, pair(cp->coded_h, cp->coded_w));
    memcpy(quant + 64 * c, h->quant[c], 64 * sizeof(uint16_t));
  }
  PyTuple_SET_ITEM(t, i++, PyLong_FromLong(h->width));
  PyTuple_SET_ITEM(t, i++, PyLong_FromLong(h->height));
  PyTuple_SET_ITEM(t, i++, cached_name(color_space_names, 8, h->color_space, dctj_color_space_name));
  PyTuple_SET_ITEM(t, i++, int_or_none(h->saw_adobe, h->adobe_transform));
  PyTuple_SET_ITEM(t, i++, PyBool_FromLong(h->saw_jfif));
  PyTuple_SET_ITEM(t, i++, int_or_none(h->sof >= 0, h->sof));
  PyTuple_SET_ITEM(t, i++, cached_name(process_names, 16, h->sof, dctj_process_name));
  PyTuple_SET_ITEM(t, i++, PyLong_FromLong(h->precision));
  PyTuple_SET_ITEM(t, i++, PyBool_FromLong(h->progressive));
  PyTuple_SET_ITEM(t, i++, PyBool_FromLong(h->arithmetic));
  PyTuple_SET_ITEM(t, i++, PyLong_FromLong(h->restart_interval));
  PyTuple_SET_ITEM(t, i++, int_or_none(h->exif_orientation, h->exif_orientation));
  PyTuple_SET_ITEM(t, i++, sampling);
  PyTuple_SET_ITEM(t, i++, ids);
  PyTuple_SET_ITEM(t, i++, qidx);
  PyTuple_SET_ITEM(t, i++, PyBytes_FromStringAndSize((const char *)quant, (Py_ssize_t)(64 * sizeof(uint16_t) * nc)));
  PyTuple_SET_ITEM(t, i++, blocks);
  PyTuple_SET_ITEM(t, i++, coded);
  PyTuple_SET_ITEM(t, i++, pair(h->mcu_rows, h->mcu_cols));
  PyTuple_SET_ITEM(t, i++, PyLong_FromSize_t(h->total_coefs * sizeof(int16_t)));
  /* Any failed allocation above left a NULL slot. */
  for (int k = 0; k < HEADER_FIELDS; k++) {
    if (!PyTuple_GET_ITEM(t, k)) {
      Py_DECREF(t);
      return NULL;
    }
  }
  for (int c = 0; c < nc; c++) {
    if (!PyTuple_GET_ITEM(sampling, c) || !PyTuple_GET_ITEM(ids, c) || !PyTuple_GET_ITEM(qidx, c) ||
        !PyTuple_GET_ITEM(blocks, c) || !PyTuple_GET_ITEM(coded, c)) {
      Py_DECREF(t);
      return NULL;
    }
  }
  return t;
}

/* ---------------------------------------------------------------- one image, without the GIL */



/* Take what the job needs from src (a str path or a bytes-like object). With the GIL. */
/* On failure the job holds nothing (no job_release needed). */
static int job_init(job_t *job, PyObject *src) {
  job->src = Py_NewRef(src);
  job->path_bytes = NULL;
  job->have_in = 0;
  job->mem = NULL;
  if (PyUnicode_Check(src)) {
    if (PyUnicode_FSConverter(src, &job->path_bytes)) return 0;
  } else if (PyObject_GetBuffer(src, &job->in_view, PyBUF_SIMPLE) == 0) {
    job->have_in = 1;
    return 0;
  } else {
    PyErr_Format(PyExc_TypeError, "src must be a path or a bytes-like object, not %.100s", Py_TYPE(src)->tp_name);
  }
  Py_CLEAR(job->src);
  return -1;
}

static void job_release(job_t *job) {
  Py_CLEAR(job->src);
  Py_CLEAR(job->path_bytes);
  if (job->have_in) PyBuffer_Release(&job->in_view);
  job->have_in = 0;
  if (job->mem) pool_give(job->mem, job->mem_cap);
  job->mem = NULL;
}

/* Read the file (if a path), the header, then the planes into out (if given) or pool memory.
 * Without the GIL. */
static void run_job(thread_state *ts, job_t *job, int warn_mode, uint64_t max_pixels, uint64_t max_bytes, int header_only,
                    Py_buffer *out) {
  const uint8_t *data;
  size_t len = 0;
  int rc;
  job->status = ST_OK;
  job->saturated = 0;
  job->num_warnings = job->num_texts = job->num_lost = 0;
  if (job->path_bytes) {
    job->io_err = read_file(ts, PyBytes_AS_STRING(job->path_bytes), &len);
    if (job->io_err) {
      job->status = job->io_err == ERR_NOT_REGULAR ? ST_NOT_REGULAR : ST_IO_ERROR;
      return;
    }
    data = ts->file_buf;
  } else {
    data = (const uint8_t *)job->in_view.buf;
    len = (size_t)job->in_view.len;
  }
  rc = dctj_begin(ts->dec, data, len, warn_mode, max_pixels, max_bytes, &job->hdr);
  if (rc == 0 && header_only) {
    dctj_abort(ts->dec);
  } else if (rc == 0 && out) {
    if ((size_t)out->len < job->hdr.total_coefs * sizeof(int16_t)) {
      dctj_abort(ts->dec);
      job->status = ST_OUT_TOO_SMALL;
      return;
    }
    rc = dctj_read(ts->dec, &job->hdr, (int16_t *)out->buf, (size_t)out->len / sizeof(int16_t), &job->saturated);
  } else if (rc == 0) {
    job->mem = pool_take(job->hdr.total_coefs * sizeof(int16_t), &job->mem_cap);
    if (!job->mem) {
      dctj_abort(ts->dec);
      job->status = ST_NO_MEMORY;
      return;
    }
    rc = dctj_read(ts->dec, &job->hdr, (int16_t *)job->mem, job->hdr.total_coefs, &job->saturated);
  }
  if (rc != 0) {
    job->status = ST_JPEG_ERROR;
    snprintf(job->error, DCTJ_MSG_LEN, "%s", dctj_error(ts->dec));
    return;
  }
  /* The decoder is reused by the next job: keep its warnings with this one. */
  job->num_warnings = dctj_num_warnings(ts->dec);
  job->num_texts = dctj_num_warning_texts(ts->dec);
  job->num_lost = dctj_num_lost(ts->dec);
  for (int i = 0; i < job->num_texts; i++) snprintf(job->warnings[i], DCTJ_MSG_LEN, "%s", dctj_warning(ts->dec, i));
}

/* The job's exception (not raised): JpegError(reason, source), OSError or ValueError. With the GIL. */
static PyObject *job_exception(const job_t *job, PyObject *name) {
  PyObject *source = name != Py_None ? name : (job->path_bytes ? job->src : Py_None);
  switch (job->status) {
  case ST_IO_ERROR:
    return PyObject_CallFunction(PyExc_OSError, "isO", job->io_err, strerror(job->io_err), job->src);
  case ST_NOT_REGULAR:
    return PyObject_CallFunction(PyExc_OSError, "isO", EINVAL, "not a regular file (a FIFO, socket or device)",
                                 job->src);
  case ST_OUT_TOO_SMALL:
    return PyObject_CallFunction(PyExc_ValueError, "s", "out buffer is too small for this image");
  case ST_NO_MEMORY:
    return PyObject_CallFunction(PyExc_MemoryError, "s", "no memory for the coefficient planes");
  default:
    return PyObject_CallFunction(error_type, "sO", job->error, source);
  }
}

/* The job's result tuple: header, or (header, data, warnings, num_warnings, saturated). Takes
 * over job->mem. With the GIL. */
static PyObject *job_result(job_t *job, int header_only, PyObject *out_obj) {
  PyObject *header = header_tuple(&job->hdr), *data_obj, *warnings;
  if (!header || header_only) return header;
  if (job->mem) {
    data_obj = (PyObject *)coefbuffer_wrap(job->mem, job->mem_cap, job->hdr.total_coefs * sizeof(int16_t));
    job->mem = NULL; /* now owned by data_obj, or given back on failure */
  } else {
    data_obj = Py_NewRef(out_obj);
  }
  warnings = PyTuple_New(job->num_texts);
  if (!data_obj || !warnings) {
    Py_DECREF(header);
    Py_XDECREF(data_obj);
    Py_XDECREF(warnings);
    return NULL;
  }
  for (int i = 0; i < job->num_texts; i++) {
    PyObject *w = PyUnicode_DecodeLatin1(job->warnings[i], (Py_ssize_t)strlen(job->warnings[i]), "replace");
    if (!w) {
      Py_DECREF(header);
      Py_DECREF(data_obj);
      Py_DECREF(warnings);
      return NULL;
    }
    PyTuple_SET_ITEM(warnings, i, w);
  }
  return Py_BuildValue("(NNNiNi)", header, data_obj, warnings, job->num_warnings, PyBool_FromLong(job->saturated),
                       job->num_lost);
}

/* ---------------------------------------------------------------- read() and read_many() */

/* A size limit argument: a non-negative int (0 = none). Negative values are an error here, not a
 * wrap-around to "no limit". */
static int parse_limit(PyObject *obj, const char *what, uint64_t *out) {
  unsigned long long v;
  if (!PyLong_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what, Py_TYPE(obj)->tp_name);
    return -1;
  }
  {
    int overflow;
    long long sv = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (sv == -1 && PyErr_Occurred()) return -1;
    if (overflow < 0 || (overflow == 0 && sv < 0)) {
      PyErr_Format(PyExc_ValueError, "%s must be >= 0 (0 or None: no limit)", what);
      return -1;
    }
  }
  v = PyLong_AsUnsignedLongLong(obj);
  if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
  *out = (uint64_t)v;
  return 0;
}

/* warn_mode argument: one of DCTJ_WARN_ACCEPT, DCTJ_WARN_LOST, DCTJ_WARN_ALL. */
static int parse_warn_mode(PyObject *obj, int *out) {
  long v = PyLong_AsLong(obj);
  if (v == -1 && PyErr_Occurred()) return -1;
  if (v < DCTJ_WARN_ACCEPT || v > DCTJ_WARN_ALL) {
    PyErr_Format(PyExc_ValueError, "warn_mode must be %d, %d or %d, not %ld", DCTJ_WARN_ACCEPT, DCTJ_WARN_LOST,
                 DCTJ_WARN_ALL, v);
    return -1;
  }
  *out = (int)v;
  return 0;
}

PyDoc_STRVAR(read_doc,
             "read(src, out, warn_mode, max_pixels, max_bytes, header_only, name)\n"
             "    -> header | (header, data, warnings, num_warnings, saturated, num_lost)\n\n"
             "header is a tuple in the order of dctnet.codec._HEADER_FIELDS.\n"
             "src: a path (str) or any bytes-like object (read in place, zero copy).\n"
             "out: None, or a writable C-contiguous buffer of at least the image's 'nbytes' bytes\n"
             "     that receives the int16 planes (returned as 'data'); None takes a pooled CoefBuffer.\n"
             "warn_mode: which libjpeg warnings are errors: 0 none, 1 those that lost data, 2 all.\n"
             "max_pixels, max_bytes: 0 for no limit. num_lost: warnings that lost data.\n"
             "header_only: stop after the header. name: used in error messages for bytes input.\n"
             "Raises JpegError(reason, source) for bad data, OSError for file-system errors.");

static PyObject *py_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  PyObject *out_obj, *name, *result = NULL;
  Py_buffer out_view = {0};
  int warn_mode, header_only, have_out = 0, own_job = 0;
  uint64_t max_pixels, max_bytes;
  thread_state *ts;
  job_t *job;
  (void)self;

  if (nargs != 7) {
    PyErr_SetString(PyExc_TypeError, "read() takes 7 positional arguments");
    return NULL;
  }
  out_obj = args[1];
  if (parse_warn_mode(args[2], &warn_mode) || parse_limit(args[3], "max_pixels", &max_pixels) || parse_limit(args[4], "max_bytes", &max_bytes))
    return NULL;
  header_only = PyObject_IsTrue(args[5]);
  name = args[6];
  if (header_only < 0) return NULL;
  ts = get_thread_state();
  if (!ts) return PyErr_NoMemory();
  /* Per-thread scratch (the job struct is several KB) unless a read() on this thread is already
   * using it: Python code can run inside a call (GC callbacks, __del__, profilers, signal
   * handlers while objects are built), and such code may call read() again. */
  if (ts->job_busy) {
    job = (job_t *)PyMem_RawMalloc(sizeof(job_t));
    if (!job) return PyErr_NoMemory();
    own_job = 1;
  } else {
    job = ts->job;
    ts->job_busy = 1;
  }
  if (job_init(job, args[0]) != 0) goto free_job;
  if (out_obj != Py_None && !header_only) {
    if (PyObject_GetBuffer(out_obj, &out_view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) goto done;
    have_out = 1;
    if (((uintptr_t)out_view.buf & 1) != 0) {
      PyErr_SetString(PyExc_ValueError, "out buffer must be 2-byte aligned (int16)");
      goto done;
    }
  }

  /* The only GIL release of the call: file I/O, header, output memory (pool) and decode. */
  Py_BEGIN_ALLOW_THREADS
  run_job(ts, job, warn_mode, max_pixels, max_bytes, header_only, have_out ? &out_view : NULL);
  Py_END_ALLOW_THREADS

  if (job->status == ST_OUT_TOO_SMALL) {
    PyErr_Format(PyExc_ValueError, "out buffer has %zd bytes, this image needs %zu", out_view.len,
                 job->hdr.total_coefs * sizeof(int16_t));
  } else if (job->status != ST_OK) {
    PyObject *exc = job_exception(job, name);
    if (exc) {
      PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
      Py_DECREF(exc);
    }
  } else {
    result = job_result(job, header_only, out_obj);
  }
done:
  job_release(job);
  if (have_out) PyBuffer_Release(&out_view);
free_job:
  if (own_job) PyMem_RawFree(job);
  else ts->job_busy = 0;
  return result;
}

PyDoc_STRVAR(read_many_doc,
             "read_many(srcs, warn_mode, max_pixels, max_bytes, header_only=False) -> list\n\n"
             "read() for each source of a sequence, all decoded in one GIL-free stretch; each item is\n"
             "the result tuple (the header alone with header_only) or the exception instance\n"
             "(JpegError, OSError) for that source.");

static PyObject *py_read_many(PyObject *self, PyObject *args) {
  PyObject *seq, *fast, *result = NULL, *max_pixels_obj, *max_bytes_obj, *mode_obj;
  int warn_mode, header_only = 0;
  uint64_t max_pixels, max_bytes;
  Py_ssize_t n, ready = 0;
  thread_state *ts;
  job_t *jobs = NULL;
  (void)self;
  if (!PyArg_ParseTuple(args, "OOOO|p", &seq, &mode_obj, &max_pixels_obj, &max_bytes_obj, &header_only)) return NULL;
  if (parse_warn_mode(mode_obj, &warn_mode) || parse_limit(max_pixels_obj, "max_pixels", &max_pixels) || parse_limit(max_bytes_obj, "max_bytes", &max_bytes))
    return NULL;
  /* A private tuple: a list could change under us (another thread while the GIL is released, or
   * Python code run by a __buffer__ method), and every job takes its own reference (job_init). */
  fast = PySequence_Tuple(seq);
  if (!fast) return NULL;
  n = PyTuple_GET_SIZE(fast);
  ts = get_thread_state();
  if ((size_t)n <= PY_SSIZE_T_MAX / sizeof(job_t))
    jobs = (job_t *)PyMem_RawMalloc(sizeof(job_t) * (size_t)(n ? n : 1));
  if (!ts || !jobs) {
    PyErr_NoMemory();
    goto done;
  }
  for (; ready < n; ready++)
    if (job_init(&jobs[ready], PyTuple_GET_ITEM(fast, ready)) != 0) goto done;
  Py_BEGIN_ALLOW_THREADS
  for (Py_ssize_t i = 0; i < n; i++) run_job(ts, &jobs[i], warn_mode, max_pixels, max_bytes, header_only, NULL);
  Py_END_ALLOW_THREADS
  result = PyList_New(n);
  for (Py_ssize_t i = 0; result && i < n; i++) {
    PyObject *item = jobs[i].status == ST_OK ? job_result(&jobs[i], header_only, Py_None)
                                             : job_exception(&jobs[i], Py_None);
    if (!item) Py_CLEAR(result);
    else PyList_SET_ITEM(result, i, item);
  }
done:
  for (Py_ssize_t i = 0; i < ready; i++) job_release(&jobs[i]);
  PyMem_RawFree(jobs);
  Py_DECREF(fast);
  return result;
}

/* ---------------------------------------------------------------- the folder batch path's file pass
 *
 * read_headers() reads a batch's files once, keeping their bytes in one pool buffer (a FileBatch)
 * while it parses their headers into one int64 table, so that planning the batch needs no
 * per-file Python objects and decode_windows() decodes from memory instead of opening and reading
 * every file a second time. */

#define FILES_MAX_BYTES ((size_t)256 << 20) /* bytes a FileBatch keeps; later files are read again */

typedef struct {
  PyObject_HEAD Py_ssize_t n;
  char *arena; /* pool memory: file i is arena[off[i] : off[i] + len[i]] */
  size_t arena_cap;
  int64_t *off, *len; /* len[i] < 0: not kept (too large for the batch, or unreadable) */
  PyObject *paths;    /* tuple of the fs-encoded paths */
} FileBatch;

static void filebatch_dealloc(FileBatch *self) {
  pool_give(self->arena, self->arena_cap);
  PyMem_Free(self->off);
  Py_XDECREF(self->paths);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t filebatch_length(FileBatch *self) { return self->n; }
static PySequenceMethods filebatch_as_sequence = {.sq_length = (lenfunc)filebatch_length};

static PyTypeObject FileBatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dctnet._jpeg.FileBatch",
    .tp_basicsize = sizeof(FileBatch),
    .tp_dealloc = (destructor)filebatch_dealloc,
    .tp_as_sequence = &filebatch_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The bytes of a batch's JPEG files, read once by read_headers() (a source for decode_windows()).",
};

/* int64 columns of read_headers()'s table, per file */
enum { HF_STATUS, HF_HEIGHT, HF_WIDTH, HF_NCOMP, HF_COLOR, HF_EXIF, HF_PROGRESSIVE, HF_NBYTES,
       HF_SAMPLING,                  /* (h, v) pairs of 4 component slots: sampling (n, 4, 2) */
       HF_BLOCKS = HF_SAMPLING + 8,  /* (blocks_h, blocks_w) pairs of 4 slots: blocks (n, 4, 2) */
       HF_FIELDS = HF_BLOCKS + 8 };

typedef struct {
  int status, io_err;
  char error[DCTJ_MSG_LEN];
} file_status;

PyDoc_STRVAR(read_headers_doc,
             "read_headers(paths, warn_mode, max_pixels, max_bytes) -> (table, errors, files)\n\n"
             "Read each file once (without the GIL) and parse its header. table: bytes of int64\n"
             "(n, 24): status (0 ok), height, width, components, colour space (libjpeg's code: 0 unknown,\n"
             "1 gray, 2 RGB, 3 YCbCr, 4 CMYK, 5 YCCK), EXIF orientation (0 none), progressive, plane\n"
             "bytes, then (h, v) for 4 component slots and (blocks_h, blocks_w) for 4 slots (zero past\n"
             "the count).\n"
             "errors: per file None or the exception (OSError, JpegError). files: a FileBatch holding\n"
             "the bytes, to pass to decode_windows as its sources (part i = the i-th path).");

static PyObject *py_read_headers(PyObject *self, PyObject *args) {
  PyObject *seq, *mode_obj, *mp_obj, *mb_obj, *srcs = NULL, *paths = NULL, *table = NULL, *errors = NULL,
           *result = NULL;
  int warn_mode;
  FileBatch *fb = NULL;
  file_status *st = NULL;
  uint64_t max_pixels, max_bytes;
  Py_ssize_t n;
  int64_t *rows;
  thread_state *ts = get_thread_state();
  (void)self;
  if (!ts) return PyErr_NoMemory();
  if (!PyArg_ParseTuple(args, "OOOO", &seq, &mode_obj, &mp_obj, &mb_obj)) return NULL;
  if (parse_warn_mode(mode_obj, &warn_mode) || parse_limit(mp_obj, "max_pixels", &max_pixels) || parse_limit(mb_obj, "max_bytes", &max_bytes)) return NULL;
  srcs = PySequence_Tuple(seq);
  if (!srcs) return NULL;
  n = PyTuple_GET_SIZE(srcs);
  paths = PyTuple_New(n);
  if (!paths) goto done;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *src = PyTuple_GET_ITEM(srcs, i), *b = NULL;
    if (!PyUnicode_Check(src)) {
      PyErr_Format(PyExc_TypeError, "read_headers: paths must be str, not %.100s", Py_TYPE(src)->tp_name);
      goto done;
    }
    if (!PyUnicode_FSConverter(src, &b)) goto done;
    PyTuple_SET_ITEM(paths, i, b);
  }
  table = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((size_t)(n ? n : 0) * HF_FIELDS * sizeof(int64_t)));
  fb = PyObject_New(FileBatch, &FileBatchType);
  if (!fb) goto done;
  fb->n = n;
  fb->arena = NULL;
  fb->arena_cap = 0;
  fb->paths = Py_NewRef(paths);
  fb->off = (int64_t *)PyMem_Calloc((size_t)(n ? 2 * n : 2), sizeof(int64_t));
  fb->len = fb->off ? fb->off + n : NULL;
  if (!table) goto done;
  st = (file_status *)PyMem_Calloc((size_t)(n ? n : 1), sizeof(file_status));
  if (!fb->off || !st) {
    PyErr_NoMemory();
    goto done;
  }
  rows = (int64_t *)PyBytes_AS_STRING(table);
  memset(rows, 0, (size_t)n * HF_FIELDS * sizeof(int64_t));
  Py_BEGIN_ALLOW_THREADS
  size_t used = 0;
  /* the last batch's size on this thread: batches are alike, so one pool buffer usually fits */
  fb->arena = pool_take(ts->files_hint > 4096 ? ts->files_hint : 4096, &fb->arena_cap);
  for (Py_ssize_t i = 0; i < n; i++) {
    int64_t *row = rows + (size_t)i * HF_FIELDS;
    int fd, e;
    size_t size, got = 0;
    const uint8_t *data = NULL;
    dctj_header hdr;
    fb->len[i] = -1;
    row[HF_STATUS] = 1;
    e = open_regular(PyBytes_AS_STRING(PyTuple_GET_ITEM(paths, i)), &fd, &size);
    if (!e && fb->arena && used + size <= FILES_MAX_BYTES) {
      if (used + size > fb->arena_cap) { /* grow the pool buffer (pool memory is plain malloc memory) */
        size_t cap = 2 * fb->arena_cap > used + size ? 2 * fb->arena_cap : used + size;
        if (cap > FILES_MAX_BYTES + 8) cap = FILES_MAX_BYTES + 8; /* >= used + size, checked above */
        char *grown = (char *)realloc(fb->arena, cap);
        if (grown) {
          fb->arena = grown;
          fb->arena_cap = cap;
        }
      }
      if (used + size <= fb->arena_cap) {
        e = read_all(fd, (uint8_t *)fb->arena + used, size, &got);
        fd = -1;
        if (!e) {
          data = (const uint8_t *)fb->arena + used;
          fb->off[i] = (int64_t)used;
          fb->len[i] = (int64_t)got;
          used += (got + 7) & ~(size_t)7;
        }
      }
    }
    if (!e && !data) { /* not kept: parse from the thread's buffer; decode_windows reads it again */
      if (fd >= 0) close(fd);
      e = read_file(ts, PyBytes_AS_STRING(PyTuple_GET_ITEM(paths, i)), &got);
      data = ts->file_buf;
    }
    if (e) {
      st[i].status = e == ERR_NOT_REGULAR ? ST_NOT_REGULAR : ST_IO_ERROR;
      st[i].io_err = e;
      fb->len[i] = -1;
      continue;
    }
    if (dctj_begin(ts->dec, data, got, warn_mode, max_pixels, max_bytes, &hdr) != 0) {
      st[i].status = ST_JPEG_ERROR;
      snprintf(st[i].error, DCTJ_MSG_LEN, "%s", dctj_error(ts->dec));
      continue;
    }
    dctj_abort(ts->dec);
    row[HF_STATUS] = 0;
    row[HF_HEIGHT] = hdr.height;
    row[HF_WIDTH] = hdr.width;
    row[HF_NCOMP] = hdr.num_components;
    row[HF_COLOR] = hdr.color_space >= 0 && hdr.color_space <= 5 ? hdr.color_space : 0;
    row[HF_EXIF] = hdr.exif_orientation;
    row[HF_PROGRESSIVE] = hdr.progressive;
    row[HF_NBYTES] = (int64_t)(hdr.total_coefs * sizeof(int16_t));
    for (int c = 0; c < hdr.num_components && c < 4; c++) { /* read components are 1, 3 or 4 */
      row[HF_SAMPLING + 2 * c] = hdr.comp[c].h_samp;
      row[HF_SAMPLING + 2 * c + 1] = hdr.comp[c].v_samp;
      row[HF_BLOCKS + 2 * c] = hdr.comp[c].blocks_h;
      row[HF_BLOCKS + 2 * c + 1] = hdr.comp[c].blocks_w;
    }
  }
  ts->files_hint = used + used / 4;
  Py_END_ALLOW_THREADS
  errors = PyList_New(n);
  if (!errors) goto done;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *src = PyTuple_GET_ITEM(srcs, i), *exc;
    switch (st[i].status) {
    case ST_OK:
      exc = Py_NewRef(Py_None);
      break;
    case ST_IO_ERROR:
      exc = PyObject_CallFunction(PyExc_OSError, "isO", st[i].io_err, strerror(st[i].io_err), src);
      break;
    case ST_NOT_REGULAR:
      exc = PyObject_CallFunction(PyExc_OSError, "isO", EINVAL, "not a regular file (a FIFO, socket or device)", src);
      break;
    default:
      exc = PyObject_CallFunction(error_type, "sO", st[i].error, src);
    }
    if (!exc) goto done;
    PyList_SET_ITEM(errors, i, exc);
  }
  result = PyTuple_Pack(3, table, errors, (PyObject *)fb);
done:
  PyMem_Free(st);
  Py_XDECREF(srcs);
  Py_XDECREF(paths);
  Py_XDECREF(table);
  Py_XDECREF(errors);
  Py_XDECREF(fb);
  return result;
}

/* ---------------------------------------------------------------- timing entries */

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static PyObject *ns_list(const int64_t *ns, Py_ssize_t n) {
  PyObject *l = PyList_New(n);
  if (!l) return NULL;
  for (Py_ssize_t i = 0; i < n; i++) PyList_SET_ITEM(l, i, PyLong_FromLongLong(ns[i]));
  return l;
}

PyDoc_STRVAR(time_raw_doc,
             "time_raw(data, repeat) -> list[int]\n\n"
             "Nanoseconds per call of the raw libjpeg floor on one in-memory JPEG: create, read header,\n"
             "jpeg_read_coefficients, destroy; no dequantization, no copy, no Python. Benchmarks only.");

PyDoc_STRVAR(time_read_doc,
             "time_read(data, repeat, stop_rows=0) -> list[int]\n\n"
             "Nanoseconds per call of dctnet's C path (reused decoder, dequantize into a reused buffer),\n"
             "without Python overhead. stop_rows > 0 stops a single-scan decode after that many MCU rows\n"
             "(what a crop ending above them needs). Benchmarks only.");

#define TIME_MAX_BYTES ((uint64_t)1 << 30)         /* the reader's default max_bytes */
#define TIME_MAX_REPEAT ((Py_ssize_t)10000000) /* 80 MB of timings: far above any benchmark's need */

static PyObject *time_common(PyObject *args, int raw) {
  Py_buffer view;
  Py_ssize_t repeat;
  int64_t *ns;
  int16_t *buf = NULL;
  size_t cap = 0;
  int failed = 0;
  char err[DCTJ_MSG_LEN] = {0};
  PyObject *res;
  thread_state *ts = get_thread_state();
  if (!ts) return PyErr_NoMemory();
  int stop_rows = 0;
  if (!PyArg_ParseTuple(args, "y*n|i", &view, &repeat, &stop_rows)) return NULL;
  if (repeat < 1 || repeat > TIME_MAX_REPEAT) {
    PyBuffer_Release(&view);
    PyErr_Format(PyExc_ValueError, "repeat must be in 1..%lld", (long long)TIME_MAX_REPEAT);
    return NULL;
  }
  ns = (int64_t *)malloc(sizeof(int64_t) * (size_t)repeat);
  if (!ns) {
    PyBuffer_Release(&view);
    return PyErr_NoMemory();
  }
  if (!raw) dctj_set_stop_rows(ts->dec, stop_rows);
  Py_BEGIN_ALLOW_THREADS
  for (Py_ssize_t i = 0; i < repeat && !failed; i++) {
    int64_t t0 = now_ns();
    if (raw) {
      failed = dctj_raw_read((const uint8_t *)view.buf, (size_t)view.len, err) != 0;
    } else {
      dctj_header hdr;
      int sat;
      failed = dctj_begin(ts->dec, (const uint8_t *)view.buf, (size_t)view.len, 0, 0, TIME_MAX_BYTES, &hdr) != 0;
      if (!failed && hdr.total_coefs > cap) {
        free(buf);
        cap = hdr.total_coefs;
        buf = (int16_t *)malloc(cap * sizeof(int16_t));
        if (!buf) { dctj_abort(ts->dec); snprintf(err, sizeof err, "out of memory"); failed = 1; }
      }
      if (!failed) failed = dctj_read(ts->dec, &hdr, buf, cap, &sat) != 0;
      if (failed && !err[0]) snprintf(err, sizeof err, "%s", dctj_error(ts->dec));
    }
    ns[i] = now_ns() - t0;
  }
  Py_END_ALLOW_THREADS
  if (!raw) dctj_set_stop_rows(ts->dec, 0);
  free(buf);
  PyBuffer_Release(&view);
  if (failed) {
    free(ns);
    raise_jpeg_error(err, NULL);
    return NULL;
  }
  res = ns_list(ns, repeat);
  free(ns);
  return res;
}

static PyObject *py_time_raw(PyObject *self, PyObject *args) { (void)self; return time_common(args, 1); }
static PyObject *py_time_read(PyObject *self, PyObject *args) { (void)self; return time_common(args, 0); }

/* Whether two byte ranges share memory. */
static int overlaps(const void *a, Py_ssize_t alen, const void *b, Py_ssize_t blen) {
  uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
  return alen > 0 && blen > 0 && a0 < b0 + (uintptr_t)blen && b0 < a0 + (uintptr_t)alen;
}

PyDoc_STRVAR(expand_doc,
             "sparse_expand(masks, values, escapes, tables, table_of_block, out) -> None\n\n"
             "Expand one sparse record (see csrc/sparse.h) into out (writable, nblocks*64 int16).\n"
             "masks: uint64[nblocks]; values: int8[]; escapes: int16[]; tables: uint16[ntables*64];\n"
             "table_of_block: uint8[nblocks]. Raises ValueError on inconsistent streams. GIL released.");

static PyObject *py_sparse_expand(PyObject *self, PyObject *args) {
  Py_buffer m, v, e, t, tb, o;
  int rc = 0, ok = 0;
  (void)self;
  if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*", &m, &v, &e, &t, &tb, &o)) return NULL;
  {
    size_t nblocks = (size_t)m.len / 8, ntables = (size_t)t.len / 128;
    if ((size_t)o.len < nblocks * 128 || (size_t)tb.len < nblocks || ntables == 0) {
      PyErr_SetString(PyExc_ValueError, "sparse_expand: buffer sizes do not match the record");
    } else if (((uintptr_t)t.buf & 1) || ((uintptr_t)o.buf & 1)) {
      PyErr_SetString(PyExc_ValueError, "sparse_expand: tables and out must be 2-byte aligned");
    } else if (overlaps(o.buf, o.len, m.buf, m.len) || overlaps(o.buf, o.len, v.buf, v.len) ||
               overlaps(o.buf, o.len, e.buf, e.len) || overlaps(o.buf, o.len, t.buf, t.len) ||
               overlaps(o.buf, o.len, tb.buf, tb.len)) {
      PyErr_SetString(PyExc_ValueError, "sparse_expand: out shares memory with an input");
    } else {
      /* table indices are checked where they are used (sparse_expand), not here: the caller's
       * buffer could change between a check and the GIL-free use */
      Py_BEGIN_ALLOW_THREADS
      rc = sparse_expand((const uint64_t *)m.buf, nblocks, (const int8_t *)v.buf, (size_t)v.len, (const int16_t *)e.buf,
                         (size_t)e.len / 2, (const uint16_t *)t.buf, ntables, (const uint8_t *)tb.buf, (int16_t *)o.buf);
      Py_END_ALLOW_THREADS
      if (rc != 0)
        PyErr_SetString(PyExc_ValueError, "sparse_expand: corrupt record (value streams do not match the masks, or a "
                                          "table index out of range)");
      else ok = 1;
    }
  }
  PyBuffer_Release(&m);
  PyBuffer_Release(&v);
  PyBuffer_Release(&e);
  PyBuffer_Release(&t);
  PyBuffer_Release(&tb);
  PyBuffer_Release(&o);
  if (!ok) return NULL;
  Py_RETURN_NONE;
}

/* ValueError(message, item): the caller names the record or file of batch item `item`. */
static void raise_item_error(const char *message, int64_t item) {
  PyObject *e = Py_BuildValue("(sL)", message, (long long)item);
  if (e) {
    PyErr_SetObject(PyExc_ValueError, e);
    Py_DECREF(e);
  }
}

/* Whether an output shares memory with another output, an input, or one of two extra buffers
 * (either may be NULL). Outputs are written while inputs are read: a shared byte would change
 * what is read next (or make a memcpy overlap). */
static int outputs_clash(const Py_buffer *ov, Py_ssize_t nout, const Py_buffer *in, Py_ssize_t nin,
                         const Py_buffer *extra1, const Py_buffer *extra2) {
  for (Py_ssize_t o = 0; o < nout; o++) {
    for (Py_ssize_t q = 0; q < nout; q++)
      if (q != o && overlaps(ov[o].buf, ov[o].len, ov[q].buf, ov[q].len)) return 1;
    for (Py_ssize_t p = 0; p < nin; p++)
      if (overlaps(ov[o].buf, ov[o].len, in[p].buf, in[p].len)) return 1;
    if ((extra1 && overlaps(ov[o].buf, ov[o].len, extra1->buf, extra1->len)) ||
        (extra2 && overlaps(ov[o].buf, ov[o].len, extra2->buf, extra2->len)))
      return 1;
  }
  return 0;
}

static void release_buffers(Py_buffer *views, Py_ssize_t n) {
  for (Py_ssize_t i = 0; i < n; i++)
    if (views[i].obj) PyBuffer_Release(&views[i]);
}

/* The output planes of one layout group: each a C-contiguous writable int16 buffer whose ND
 * shape is (n, h, w, 64). Fills ov/outs/oh/ow for every output and counts the buffers held in
 * *held (release them even on failure). Returns 0, or -1 with an exception set. */
static int get_group_outputs(PyObject *outs_t, int64_t n, const char *who, Py_buffer *ov, Py_ssize_t *held,
                             int16_t **outs, int64_t *oh, int64_t *ow) {
  Py_ssize_t nout = PyTuple_GET_SIZE(outs_t);
  if (nout < 1 || nout > GATHER_MAX_COMPONENTS) {
    PyErr_Format(PyExc_ValueError, "%s: 1 to 4 output planes", who);
    return -1;
  }
  for (; *held < nout; (*held)++) {
    Py_buffer *b = &ov[*held];
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(outs_t, *held), b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
      return -1;
    if (b->ndim != 4 || b->itemsize != 2 || !b->format || (strcmp(b->format, "h") != 0 && strcmp(b->format, "<h") != 0 &&
        strcmp(b->format, "=h") != 0) || b->shape[0] != n || b->shape[3] != 64 || ((uintptr_t)b->buf & 1) != 0) {
      (*held)++;
      PyErr_Format(PyExc_ValueError, "%s: each output must be int16 (n, h, w, 64), C-contiguous", who);
      return -1;
    }
    outs[*held] = (int16_t *)b->buf;
    oh[*held] = (int64_t)b->shape[1];
    ow[*held] = (int64_t)b->shape[2];
  }
  return 0;
}

/* The part buffers of one cache call: a private tuple of the caller's sequence, one held export
 * per part (keeping each memory map alive and unresizable until released) and their extents.
 * Zero-initialise, hold_parts, then release_parts on every path (also after a failure). */
typedef struct {
  PyObject *fast;
  Py_buffer *views;
  gather_part *parts;
  Py_ssize_t n, held;
} held_parts;

/* Returns 0, or -1 with an exception set. */
static int hold_parts(PyObject *obj, held_parts *h) {
  h->fast = PySequence_Tuple(obj);
  if (!h->fast) return -1;
  h->n = PyTuple_GET_SIZE(h->fast);
  h->views = (Py_buffer *)PyMem_Calloc((size_t)(h->n ? h->n : 1), sizeof(Py_buffer));
  h->parts = (gather_part *)PyMem_Calloc((size_t)(h->n ? h->n : 1), sizeof(gather_part));
  if (!h->views || !h->parts) {
    PyErr_NoMemory();
    return -1;
  }
  for (; h->held < h->n; h->held++) {
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(h->fast, h->held), &h->views[h->held], PyBUF_SIMPLE) != 0) return -1;
    h->parts[h->held].data = (const uint8_t *)h->views[h->held].buf;
    h->parts[h->held].len = (int64_t)h->views[h->held].len;
  }
  return 0;
}

static void release_parts(held_parts *h) {
  for (Py_ssize_t i = 0; i < h->held; i++) PyBuffer_Release(&h->views[i]);
  PyMem_Free(h->views);
  PyMem_Free(h->parts);
  Py_XDECREF(h->fast);
}

PyDoc_STRVAR(gather_doc,
             "gather_planes(parts, tables, items, fmt, outs) -> None\n\n"
             "Batch gather of one layout group from a coefficient cache (csrc/sparse.h). parts: a sequence\n"
             "of buffers (the part files' memory maps); tables: uint16 buffer of (ntables, 4, 64); items:\n"
             "int64 (n, 31) gather_item rows naming each record by part, offset and size; fmt: 0 dense,\n"
             "1 sparse; outs: one writable int16 array (n, h_c, w_c, 64) per component (numpy or any\n"
             "object with a C-contiguous writable buffer and a 'shape'). Every item is checked against\n"
             "the buffers; the buffers are held for the whole call. Raises ValueError(message, item)\n"
             "for the first batch item whose record is out of bounds or corrupt.");

/* A private copy of a batch's items (PyMem_Free it; NULL and MemoryError when out of memory):
 * what was checked is what is used, as another thread could rewrite the caller's array while
 * the GIL is released. */
static gather_item *private_items(const Py_buffer *it) {
  gather_item *items = (gather_item *)PyMem_Malloc(it->len ? (size_t)it->len : 1);
  if (!items) {
    PyErr_NoMemory();
    return NULL;
  }
  memcpy(items, it->buf, (size_t)it->len);
  return items;
}

static PyObject *py_gather_planes(PyObject *self, PyObject *args) {
  PyObject *parts_obj, *tables_obj, *items_obj, *outs_obj, *outs_fast = NULL;
  Py_buffer tb = {0}, it = {0}, ov[GATHER_MAX_COMPONENTS];
  held_parts hp = {0};
  int16_t *outs[GATHER_MAX_COMPONENTS];
  int64_t oh[GATHER_MAX_COMPONENTS], ow[GATHER_MAX_COMPONENTS];
  Py_ssize_t nout = 0, held_out = 0;
  int fmt, have_tb = 0, have_it = 0;
  int64_t n, bad = 0;
  gather_item *items = NULL;
  (void)self;
  memset(ov, 0, sizeof ov);
  if (!PyArg_ParseTuple(args, "OOOiO", &parts_obj, &tables_obj, &items_obj, &fmt, &outs_obj)) return NULL;
  if (PyObject_GetBuffer(tables_obj, &tb, PyBUF_SIMPLE) != 0) goto done;
  have_tb = 1;
  if (PyObject_GetBuffer(items_obj, &it, PyBUF_SIMPLE) != 0) goto done;
  have_it = 1;
  n = (int64_t)(it.len / (Py_ssize_t)sizeof(gather_item));
  if (it.len % (Py_ssize_t)sizeof(gather_item) != 0 || ((uintptr_t)it.buf & 7) != 0 || ((uintptr_t)tb.buf & 1) != 0) {
    PyErr_SetString(PyExc_ValueError, "gather_planes: items must be int64 (n, 31), tables uint16");
    goto done;
  }
  outs_fast = PySequence_Tuple(outs_obj); /* private copies: Python code cannot change them under us */
  if (!outs_fast || get_group_outputs(outs_fast, n, "gather_planes", ov, &held_out, outs, oh, ow) != 0) goto done;
  nout = held_out;
  /* Holding an export of every part keeps its mapping alive (and unresizable) until we return. */
  if (hold_parts(parts_obj, &hp) != 0) goto done;
  /* Outputs are written while parts and tables are read: they must not share memory (a write
   * could otherwise change what is read next, or memcpy would copy between overlapping ranges). */
  if (outputs_clash(ov, nout, hp.views, hp.n, &tb, &it)) {
    PyErr_SetString(PyExc_ValueError, "gather_planes: an output shares memory with an input or another output");
    goto done;
  }
  items = private_items(&it);
  if (!items) goto done;
  Py_BEGIN_ALLOW_THREADS
  bad = gather_planes(items, n, hp.parts, hp.n, (const uint16_t *)tb.buf,
                      (int64_t)(tb.len / (4 * 64 * 2)), fmt, (int64_t)nout, outs, oh, ow);
  Py_END_ALLOW_THREADS
  if (bad < 0) PyErr_SetString(PyExc_ValueError, "gather_planes: bad format or output grid");
  else if (bad) raise_item_error("gather_planes: corrupt or out-of-bounds record for a batch item", bad - 1);
done:
  release_parts(&hp);
  release_buffers(ov, held_out);
  PyMem_Free(items);
  Py_XDECREF(outs_fast);
  if (have_tb) PyBuffer_Release(&tb);
  if (have_it) PyBuffer_Release(&it);
  if (PyErr_Occurred()) return NULL;
  Py_RETURN_NONE;
}

PyDoc_STRVAR(gather_packed_doc,
             "gather_packed(parts, tables, items, fmt, out, offsets) -> None\n\n"
             "gather_planes without the padding: each item's window of component c (r1 - r0 by c1 - c0\n"
             "blocks, zero outside the plane) is written to blocks offsets[i, c] onwards of out, one\n"
             "writable C-contiguous int16 (NB, 64) array; offsets: int64 (n, ncomp). The device builds\n"
             "the padded grid from it. Every window must fit inside out. Raises as gather_planes.");

static PyObject *py_gather_packed(PyObject *self, PyObject *args) {
  PyObject *parts_obj, *tables_obj, *items_obj, *out_obj, *off_obj;
  Py_buffer tb = {0}, it = {0}, ob = {0}, offb = {0};
  held_parts hp = {0};
  int fmt, have_tb = 0, have_it = 0, have_ob = 0, have_off = 0;
  int64_t n, ncomp = 0, bad = 0;
  gather_item *items = NULL;
  int64_t *offsets = NULL;
  (void)self;
  if (!PyArg_ParseTuple(args, "OOOiOO", &parts_obj, &tables_obj, &items_obj, &fmt, &out_obj, &off_obj)) return NULL;
  if (PyObject_GetBuffer(tables_obj, &tb, PyBUF_SIMPLE) != 0) goto done;
  have_tb = 1;
  if (PyObject_GetBuffer(items_obj, &it, PyBUF_SIMPLE) != 0) goto done;
  have_it = 1;
  if (PyObject_GetBuffer(off_obj, &offb, PyBUF_SIMPLE) != 0) goto done;
  have_off = 1;
  if (PyObject_GetBuffer(out_obj, &ob, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) goto done;
  have_ob = 1;
  n = (int64_t)(it.len / (Py_ssize_t)sizeof(gather_item));
  if (it.len % (Py_ssize_t)sizeof(gather_item) != 0 || ((uintptr_t)it.buf & 7) != 0 || ((uintptr_t)tb.buf & 1) != 0) {
    PyErr_SetString(PyExc_ValueError, "gather_packed: items must be int64 (n, 31), tables uint16");
    goto done;
  }
  if (n > 0) ncomp = (int64_t)(offb.len / (Py_ssize_t)sizeof(int64_t)) / n;
  if ((n > 0 && (ncomp < 1 || ncomp > GATHER_MAX_COMPONENTS || offb.len != (Py_ssize_t)(n * ncomp * 8))) ||
      (n == 0 && offb.len != 0)) {
    PyErr_SetString(PyExc_ValueError, "gather_packed: offsets must be int64 (n, ncomp) with 1 to 4 components");
    goto done;
  }
  if (ob.ndim != 2 || ob.itemsize != 2 || !ob.format ||
      (strcmp(ob.format, "h") != 0 && strcmp(ob.format, "<h") != 0 && strcmp(ob.format, "=h") != 0) ||
      ob.shape[1] != 64 || ((uintptr_t)ob.buf & 1) != 0) {
    PyErr_SetString(PyExc_ValueError, "gather_packed: out must be int16 (NB, 64), C-contiguous");
    goto done;
  }
  if (hold_parts(parts_obj, &hp) != 0) goto done;
  if (outputs_clash(&ob, 1, hp.views, hp.n, &tb, &it) || outputs_clash(&ob, 1, &offb, 1, NULL, NULL)) {
    PyErr_SetString(PyExc_ValueError, "gather_packed: the output shares memory with an input");
    goto done;
  }
  items = private_items(&it);
  offsets = (int64_t *)PyMem_Malloc(offb.len ? (size_t)offb.len : 1); /* private, as the items */
  if (!items || !offsets) {
    if (!PyErr_Occurred()) PyErr_NoMemory();
    goto done;
  }
  memcpy(offsets, offb.buf, (size_t)offb.len);
  Py_BEGIN_ALLOW_THREADS
  bad = gather_packed(items, n, hp.parts, hp.n, (const uint16_t *)tb.buf, (int64_t)(tb.len / (4 * 64 * 2)), fmt,
                      ncomp ? ncomp : 1, (int16_t *)ob.buf, (int64_t)ob.shape[0], offsets);
  Py_END_ALLOW_THREADS
  if (bad < 0) PyErr_SetString(PyExc_ValueError, "gather_packed: bad format");
  else if (bad) raise_item_error("gather_packed: corrupt or out-of-bounds record or window for a batch item", bad - 1);
done:
  release_parts(&hp);
  PyMem_Free(items);
  PyMem_Free(offsets);
  if (have_tb) PyBuffer_Release(&tb);
  if (have_it) PyBuffer_Release(&it);
  if (have_ob) PyBuffer_Release(&ob);
  if (have_off) PyBuffer_Release(&offb);
  if (PyErr_Occurred()) return NULL;
  Py_RETURN_NONE;
}

PyDoc_STRVAR(copy_ranges_doc,
             "copy_ranges(parts, ranges, out) -> None\n\n"
             "Copy byte ranges of the parts (buffers, e.g. a cache's part maps) into out, a writable\n"
             "C-contiguous buffer: ranges is int64 (k, 4) rows of (part, source offset, size, destination\n"
             "offset). Every range is checked against its part and against out before any byte is copied;\n"
             "raises ValueError(message, row) for the first bad row.");

static PyObject *py_copy_ranges(PyObject *self, PyObject *args) {
  PyObject *parts_obj, *ranges_obj, *out_obj;
  Py_buffer rb = {0}, ob = {0};
  held_parts hp = {0};
  int have_rb = 0, have_ob = 0;
  int64_t *ranges = NULL, k = 0, bad = 0;
  (void)self;
  if (!PyArg_ParseTuple(args, "OOO", &parts_obj, &ranges_obj, &out_obj)) return NULL;
  if (PyObject_GetBuffer(ranges_obj, &rb, PyBUF_SIMPLE) != 0) goto done;
  have_rb = 1;
  if (PyObject_GetBuffer(out_obj, &ob, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) goto done;
  have_ob = 1;
  if (rb.len % 32 != 0) {
    PyErr_SetString(PyExc_ValueError, "copy_ranges: ranges must be int64 (k, 4)");
    goto done;
  }
  k = (int64_t)(rb.len / 32);
  ranges = (int64_t *)PyMem_Malloc(rb.len ? (size_t)rb.len : 1); /* private: checked is what is used */
  if (!ranges) {
    PyErr_NoMemory();
    goto done;
  }
  memcpy(ranges, rb.buf, (size_t)rb.len);
  if (hold_parts(parts_obj, &hp) != 0) goto done;
  if (outputs_clash(&ob, 1, hp.views, hp.n, &rb, NULL)) {
    PyErr_SetString(PyExc_ValueError, "copy_ranges: out shares memory with an input");
    goto done;
  }
  for (int64_t i = 0; i < k && !bad; i++) {
    int64_t part = ranges[4 * i], src = ranges[4 * i + 1], size = ranges[4 * i + 2], dst = ranges[4 * i + 3];
    if (part < 0 || part >= hp.n || src < 0 || size < 0 || dst < 0 || src > hp.parts[part].len ||
        size > hp.parts[part].len - src || dst > (int64_t)ob.len || size > (int64_t)ob.len - dst)
      bad = i + 1;
  }
  if (!bad) {
    Py_BEGIN_ALLOW_THREADS
    for (int64_t i = 0; i < k; i++)
      if (ranges[4 * i + 2])
        memcpy((uint8_t *)ob.buf + ranges[4 * i + 3], hp.parts[ranges[4 * i]].data + ranges[4 * i + 1],
               (size_t)ranges[4 * i + 2]);
    Py_END_ALLOW_THREADS
  } else {
    raise_item_error("copy_ranges: a range lies outside its part or the output", bad - 1);
  }
done:
  release_parts(&hp);
  PyMem_Free(ranges);
  if (have_rb) PyBuffer_Release(&rb);
  if (have_ob) PyBuffer_Release(&ob);
  if (PyErr_Occurred()) return NULL;
  Py_RETURN_NONE;
}

PyDoc_STRVAR(decode_windows_doc,
             "decode_windows(srcs, items, outs, warn_mode, max_pixels, max_bytes) -> None\n\n"
             "Decode JPEGs and write each plane's window straight into one layout group's outputs (the\n"
             "folder loader's batch path). srcs: a sequence of paths (str: read here, without the GIL)\n"
             "or bytes-like JPEGs; items: int64 (n, 31) gather_item rows whose part is the index into\n"
             "srcs and whose plane sizes must equal the file's; outs as for gather_planes. Single-scan\n"
             "files stream into the windows one MCU row at a time and stop after the last row a window\n"
             "needs; others are decoded into a reused per-thread buffer and copied by gather_planes.\n"
             "Raises ValueError(message, item) at the first image that fails or does not match its item.");

static PyObject *py_decode_windows(PyObject *self, PyObject *args) {
  PyObject *srcs_obj, *items_obj, *outs_obj, *mode_obj, *mp_obj, *mb_obj, *srcs = NULL, *outs_t = NULL;
  int warn_mode;
  Py_buffer it = {0}, ov[GATHER_MAX_COMPONENTS];
  Py_buffer *sv = NULL;
  PyObject **paths = NULL; /* fs-encoded bytes of str sources (owned), NULL for buffers */
  FileBatch *fb = NULL;     /* sources kept by read_headers() (borrowed: the args hold it) */
  int16_t *outs[GATHER_MAX_COMPONENTS];
  int64_t oh[GATHER_MAX_COMPONENTS], ow[GATHER_MAX_COMPONENTS];
  size_t osz[GATHER_MAX_COMPONENTS];
  Py_ssize_t nsrc = 0, held = 0, nout = 0, held_out = 0;
  int have_it = 0;
  int64_t n = 0, bad = 0;
  uint64_t max_pixels, max_bytes;
  gather_item *items = NULL;
  static const uint16_t no_tables[4 * 64];
  thread_state *ts = get_thread_state();
  (void)self;
  memset(ov, 0, sizeof ov);
  if (!ts) return PyErr_NoMemory();
  if (!PyArg_ParseTuple(args, "OOOOOO", &srcs_obj, &items_obj, &outs_obj, &mode_obj, &mp_obj, &mb_obj)) return NULL;
  if (parse_warn_mode(mode_obj, &warn_mode) || parse_limit(mp_obj, "max_pixels", &max_pixels) || parse_limit(mb_obj, "max_bytes", &max_bytes)) return NULL;
  if (PyObject_GetBuffer(items_obj, &it, PyBUF_SIMPLE) != 0) goto done;
  have_it = 1;
  n = (int64_t)(it.len / (Py_ssize_t)sizeof(gather_item));
  if (it.len % (Py_ssize_t)sizeof(gather_item) != 0) {
    PyErr_SetString(PyExc_ValueError, "decode_windows: items must be int64 (n, 31)");
    goto done;
  }
  outs_t = PySequence_Tuple(outs_obj);
  if (!outs_t || get_group_outputs(outs_t, n, "decode_windows", ov, &held_out, outs, oh, ow) != 0) goto done;
  nout = held_out;
  for (Py_ssize_t c = 0; c < nout; c++) osz[c] = (size_t)oh[c] * (size_t)ow[c] * 64;
  if (Py_IS_TYPE(srcs_obj, &FileBatchType)) { /* read_headers() kept the files: decode from memory */
    fb = (FileBatch *)srcs_obj;
    srcs = PyTuple_New(0);
  } else {
    srcs = PySequence_Tuple(srcs_obj);
  }
  if (!srcs) goto done;
  nsrc = fb ? fb->n : PyTuple_GET_SIZE(srcs);
  sv = (Py_buffer *)PyMem_Calloc((size_t)(nsrc ? nsrc : 1), sizeof(Py_buffer));
  paths = (PyObject **)PyMem_Calloc((size_t)(nsrc ? nsrc : 1), sizeof(PyObject *));
  if (!sv || !paths) {
    PyErr_NoMemory();
    goto done;
  }
  for (; !fb && held < nsrc; held++) {
    PyObject *src = PyTuple_GET_ITEM(srcs, held);
    if (PyUnicode_Check(src)) {
      if (!PyUnicode_FSConverter(src, &paths[held])) goto done;
    } else if (PyObject_GetBuffer(src, &sv[held], PyBUF_SIMPLE) != 0) {
      goto done;
    }
  }
  if (outputs_clash(ov, nout, sv, nsrc, NULL, NULL)) {
    PyErr_SetString(PyExc_ValueError, "decode_windows: an output shares memory with an input or another output");
    goto done;
  }
  items = private_items(&it);
  if (!items) goto done;
  Py_BEGIN_ALLOW_THREADS
  for (int64_t i = 0; i < n && !bad; i++) {
    gather_item one = items[i];
    dctj_header hdr;
    int saturated, ok = 1;
    int16_t *o[GATHER_MAX_COMPONENTS];
    gather_part part;
    const uint8_t *data;
    size_t len = 0;
    if (one.part < 0 || one.part >= nsrc) {
      bad = i + 1;
      break;
    }
    if (fb && fb->len[one.part] >= 0) {
      data = (const uint8_t *)fb->arena + fb->off[one.part];
      len = (size_t)fb->len[one.part];
    } else if (fb || paths[one.part]) {
      const char *path = PyBytes_AS_STRING(fb ? PyTuple_GET_ITEM(fb->paths, one.part) : paths[one.part]);
      if (read_file(ts, path, &len) != 0) {
        bad = i + 1;
        break;
      }
      data = ts->file_buf;
    } else {
      data = (const uint8_t *)sv[one.part].buf;
      len = (size_t)sv[one.part].len;
    }
    if (dctj_begin(ts->dec, data, len, warn_mode, max_pixels, max_bytes, &hdr) != 0) {
      bad = i + 1;
      break;
    }
    /* the item was planned from this file's header: it must describe these very planes */
    ok = hdr.num_components == one.ncomp && one.ncomp == nout;
    for (int c = 0; ok && c < hdr.num_components; c++)
      ok = hdr.comp[c].blocks_h == one.bh[c] && hdr.comp[c].blocks_w == one.bw[c];
    if (ok && dctj_single_scan(ts->dec)) { /* the common case: stream into the windows */
      dctj_window win[GATHER_MAX_COMPONENTS];
      int rc;
      if (!gather_window_fits(&one, nout, oh, ow)) {
        dctj_abort(ts->dec);
        bad = i + 1;
        break;
      }
      for (Py_ssize_t c = 0; c < nout; c++) {
        win[c].r0 = one.r0[c];
        win[c].r1 = one.r1[c];
        win[c].c0 = one.c0[c];
        win[c].c1 = one.c1[c];
        win[c].dst = outs[c] + (size_t)i * osz[c];
        win[c].dst_h = oh[c];
        win[c].dst_w = ow[c];
      }
      rc = dctj_read_window(ts->dec, &hdr, win, &saturated);
      if (rc == 0) continue;
      if (rc != DCTJ_RESTART || dctj_begin(ts->dec, data, len, warn_mode, max_pixels, max_bytes, &hdr) != 0) {
        bad = i + 1;
        break;
      }
    }
    if (ok && hdr.total_coefs > ts->planes_cap) {
      int16_t *grown = (int16_t *)realloc(ts->planes, hdr.total_coefs * sizeof(int16_t));
      if (grown) {
        ts->planes = grown;
        ts->planes_cap = hdr.total_coefs;
      } else {
        ok = 0;
      }
    }
    if (!ok) {
      dctj_abort(ts->dec);
      bad = i + 1;
      break;
    }
    ok = dctj_read(ts->dec, &hdr, ts->planes, ts->planes_cap, &saturated) == 0;
    if (!ok) {
      bad = i + 1;
      break;
    }
    one.part = 0;
    one.offset = 0;
    one.nbytes = (int64_t)(hdr.total_coefs * sizeof(int16_t));
    one.table = 0;
    one.nvalues = one.nescapes = 0;
    part.data = (const uint8_t *)ts->planes;
    part.len = one.nbytes;
    for (Py_ssize_t c = 0; c < nout; c++) o[c] = outs[c] + (size_t)i * osz[c];
    if (gather_planes(&one, 1, &part, 1, no_tables, 1, 0, (int64_t)nout, o, oh, ow) != 0) bad = i + 1;
  }
  Py_END_ALLOW_THREADS
  if (ts->planes_cap > (KEEP_FILE_BUFFER / sizeof(int16_t))) { /* do not keep a huge image's buffer */
    free(ts->planes);
    ts->planes = NULL;
    ts->planes_cap = 0;
  }
  if (bad) raise_item_error("decode_windows: an image failed to decode or does not match its item", bad - 1);
done:
  for (Py_ssize_t i = 0; i < held; i++) {
    if (paths[i]) Py_DECREF(paths[i]);
    else PyBuffer_Release(&sv[i]);
  }
  if (paths && held < nsrc) Py_XDECREF(paths[held]); /* a failed FSConverter leaves NULL */
  release_buffers(ov, held_out);
  PyMem_Free(sv);
  PyMem_Free(paths);
  PyMem_Free(items);
  Py_XDECREF(srcs);
  Py_XDECREF(outs_t);
  if (have_it) PyBuffer_Release(&it);
  if (PyErr_Occurred()) return NULL;
  Py_RETURN_NONE;
}

static PyObject *py_set_error_type(PyObject *self, PyObject *cls) {
  (void)self;
  if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, (PyTypeObject *)PyExc_ValueError)) {
    PyErr_SetString(PyExc_TypeError, "error type must be a ValueError subclass");
    return NULL;
  }
  Py_XSETREF(error_type, Py_NewRef(cls));
  Py_RETURN_NONE;
}

PyDoc_STRVAR(rrc_doc,
             "rrc_boxes(seed, epoch, index, heights, widths, scale_lo, scale_hi, ratio_lo, ratio_hi, log_lo, log_hi, out)\n\n"
             "torchvision RandomResizedCrop boxes on counter-based uniforms (csrc/crop.h); index, heights,\n"
             "widths: int64 (n,), out: int64 (n, 4) written with (top, left, height, width).");

/* Whether any of n buffers is not 8-byte aligned (int64 loads and stores need it). */
static int misaligned8(const Py_buffer *b, int n) {
  for (int i = 0; i < n; i++)
    if ((uintptr_t)b[i].buf & 7) return 1;
  return 0;
}

static int sizes_in_range(const int64_t *v, Py_ssize_t n) {
  for (Py_ssize_t i = 0; i < n; i++)
    if (v[i] < 1 || v[i] > ((int64_t)1 << 31)) return 0;
  return 1;
}

static PyObject *py_rrc_boxes(PyObject *self, PyObject *args) {
  unsigned long long seed, epoch;
  Py_buffer ix, hs, ws, out;
  double s0, s1, r0, r1, l0, l1;
  (void)self;
  if (!PyArg_ParseTuple(args, "KKy*y*y*ddddddw*", &seed, &epoch, &ix, &hs, &ws, &s0, &s1, &r0, &r1, &l0, &l1, &out))
    return NULL;
  Py_ssize_t n = ix.len / 8;
  if (ix.len % 8 || hs.len != ix.len || ws.len != ix.len || out.len != 4 * ix.len) {
    PyErr_SetString(PyExc_ValueError, "rrc_boxes: inconsistent buffer sizes");
  } else if (misaligned8(&ix, 1) || misaligned8(&hs, 1) || misaligned8(&ws, 1) || misaligned8(&out, 1)) {
    PyErr_SetString(PyExc_ValueError, "rrc_boxes: buffers must be 8-byte aligned int64");
  } else if (!sizes_in_range((const int64_t *)hs.buf, n) || !sizes_in_range((const int64_t *)ws.buf, n)) {
    PyErr_SetString(PyExc_ValueError, "rrc_boxes: image sizes must be in 1..2^31");
  } else {
    rrc_boxes(seed, epoch, (const int64_t *)ix.buf, (const int64_t *)hs.buf, (const int64_t *)ws.buf, n, s0, s1, r0, r1,
              l0, l1, (int64_t *)out.buf);
  }
  PyBuffer_Release(&ix);
  PyBuffer_Release(&hs);
  PyBuffer_Release(&ws);
  PyBuffer_Release(&out);
  if (PyErr_Occurred()) return NULL;
  Py_RETURN_NONE;
}

PyDoc_STRVAR(plan_doc,
             "plan_windows(color, ncomp, sampling, heights, widths, boxes, margin, out, firsts, need) -> groups\n\n"
             "Batch planning in one call (see csrc/crop.h): int64 inputs color (n,), ncomp (n,),\n"
             "sampling (n, 4, 2), heights (n,), widths (n,), boxes (n, 4); writable int64 outputs out\n"
             "(n, 27), firsts (n,) (the first sample of each layout group) and need (n, 2) (each group's\n"
             "largest window in MCUs). Returns the number of groups. ValueError naming the first sample\n"
             "out of range.");

static PyObject *py_plan_windows(PyObject *self, PyObject *args) {
  Py_buffer b[9];
  long long margin;
  Py_ssize_t n;
  int64_t ngroups = 0, bad = 0;
  (void)self;
  memset(b, 0, sizeof b);
  if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*Lw*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &margin, &b[6], &b[7],
                        &b[8]))
    return NULL;
  n = b[0].len / 8;
  if (b[0].len % 8 || b[1].len != b[0].len || b[2].len != 8 * b[0].len || b[3].len != b[0].len ||
      b[4].len != b[0].len || b[5].len != 4 * b[0].len || b[6].len != PLAN_FIELDS * b[0].len ||
      b[7].len != b[0].len || b[8].len != 2 * b[0].len) {
    PyErr_SetString(PyExc_ValueError, "plan_windows: inconsistent buffer sizes");
  } else if (misaligned8(b, 9)) {
    PyErr_SetString(PyExc_ValueError, "plan_windows: buffers must be 8-byte aligned int64");
  } else if (outputs_clash(&b[6], 3, b, 6, NULL, NULL)) {
    PyErr_SetString(PyExc_ValueError, "plan_windows: an output shares memory with an input or another output");
  } else {
    bad = plan_windows((const int64_t *)b[0].buf, (const int64_t *)b[1].buf, (const int64_t *)b[2].buf,
                       (const int64_t *)b[3].buf, (const int64_t *)b[4].buf, (const int64_t *)b[5].buf, (int64_t)n,
                       (int64_t)margin, (int64_t *)b[6].buf, (int64_t *)b[7].buf, (int64_t *)b[8].buf, &ngroups);
    if (bad)
      PyErr_Format(PyExc_ValueError, "plan_windows: sample %lld has a layout, size or box out of range",
                   (long long)(bad - 1));
  }
  for (int i = 0; i < 9; i++) PyBuffer_Release(&b[i]);
  if (PyErr_Occurred()) return NULL;
  return PyLong_FromLongLong((long long)ngroups);
}

static PyMethodDef methods[] = {
    {"read", (PyCFunction)(void (*)(void))py_read, METH_FASTCALL, read_doc},
    {"read_many", py_read_many, METH_VARARGS, read_many_doc},
    {"sparse_expand", py_sparse_expand, METH_VARARGS, expand_doc},
    {"gather_planes", py_gather_planes, METH_VARARGS, gather_doc},
    {"gather_packed", py_gather_packed, METH_VARARGS, gather_packed_doc},
    {"copy_ranges", py_copy_ranges, METH_VARARGS, copy_ranges_doc},
    {"decode_windows", py_decode_windows, METH_VARARGS, decode_windows_doc},
    {"read_headers", py_read_headers, METH_VARARGS, read_headers_doc},
    {"rrc_boxes", py_rrc_boxes, METH_VARARGS, rrc_doc},
    {"plan_windows", py_plan_windows, METH_VARARGS, plan_doc},
    {"time_raw", py_time_raw, METH_VARARGS, time_raw_doc},
    {"time_read", py_time_read, METH_VARARGS, time_read_doc},
    {"alloc", py_alloc, METH_O, "alloc(nbytes) -> CoefBuffer: writable memory from the resident buffer pool."},
    {"pool_info", py_pool_info, METH_NOARGS, "Free output buffers kept for reuse: {'buffers': n, 'bytes': n}."},
    {"pool_clear", py_pool_clear, METH_NOARGS, "Free all output buffers kept for reuse."},
    {"set_error_type", py_set_error_type, METH_O, "Register the exception class raised for bad JPEG data."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_jpeg",
    .m_doc = "libjpeg DCT-coefficient reader (see dctnet.codec).",
    .m_size = -1,
    .m_methods = methods,
};

/* fork() copies the pool's mutex in whatever state it is in: if another thread held it at that
 * moment, the child's first pool call would wait for ever (DataLoader workers and build processes
 * fork). Hold it across fork so the child starts with it unlocked and the pool consistent. */
static void pool_atfork_prepare(void) { pthread_mutex_lock(&pool_lock); }
static void pool_atfork_parent(void) { pthread_mutex_unlock(&pool_lock); }
static void pool_atfork_child(void) { pthread_mutex_unlock(&pool_lock); }

PyMODINIT_FUNC PyInit__jpeg(void) {
  PyObject *m;
  static int atfork_done;
  if (!atfork_done) {
    if (pthread_atfork(pool_atfork_prepare, pool_atfork_parent, pool_atfork_child) != 0) return PyErr_NoMemory();
    atfork_done = 1;
  }
  if (pthread_key_create(&tls_key, thread_state_free) != 0) return PyErr_NoMemory();
  if (PyType_Ready(&CoefBufferType) < 0 || PyType_Ready(&FileBatchType) < 0) return NULL;
  m = PyModule_Create(&module);
  if (!m) return NULL;
  error_type = Py_NewRef(PyExc_ValueError);
  if (PyModule_AddIntConstant(m, "JPEG_LIB_VERSION", dctj_lib_version()) ||
#ifdef LIBJPEG_TURBO_VERSION_NUMBER
      PyModule_AddIntConstant(m, "LIBJPEG_TURBO_VERSION_NUMBER", LIBJPEG_TURBO_VERSION_NUMBER) ||
#endif
      PyModule_AddIntConstant(m, "MAX_SCANS", DCTJ_MAX_SCANS) ||
      PyModule_AddIntConstant(m, "WARN_ACCEPT", DCTJ_WARN_ACCEPT) ||
      PyModule_AddIntConstant(m, "WARN_LOST", DCTJ_WARN_LOST) || PyModule_AddIntConstant(m, "WARN_ALL", DCTJ_WARN_ALL)) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
