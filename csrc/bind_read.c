/*
 * Binding of the single-image reads: read() and read_many(), their pooled output buffers
 * (CoefBuffer, alloc, pool_info, pool_clear) and the benchmark timers (time_raw, time_read).
 * The engine work is reader.c's read_image and timing.c's time_decodes.
 */
#include "binding.h"

#include <string.h>

#include "pool.h"
#include "timing.h"

/* ---------------------------------------------------------------- output buffers
 *
 * The default output (no caller buffer) is a CoefBuffer: a plain writable buffer object whose
 * memory comes from the resident pool (pool.h), so that one read() call can take its output
 * memory without the GIL and release the GIL just once. */

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
  pool_stats(&count, &bytes);
  return Py_BuildValue("{s:i,s:n}", "buffers", count, "bytes", (Py_ssize_t)bytes);
}

static PyObject *py_pool_clear(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  pool_clear();
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

/* ---------------------------------------------------------------- one image's job
 *
 * A job is one source and its read's result, so that results can be turned into Python objects
 * after the GIL is back (read() handles one job, read_many() a list of them). */

typedef struct {
  PyObject *src;        /* owned: another thread may drop its caller's reference while we decode */
  PyObject *path_bytes; /* owned: fs-encoded path, or NULL for buffer input */
  Py_buffer in_view;
  int have_in;
  read_result *r; /* the engine's result (not owned) */
} job_t;

/* Take what the job needs from src (a str path or a bytes-like object). With the GIL. On failure
 * the job holds nothing (no job_release needed). */
static int job_init(job_t *job, PyObject *src, read_result *r) {
  job->src = Py_NewRef(src);
  job->path_bytes = NULL;
  job->have_in = 0;
  job->r = r;
  r->mem = NULL;
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
  if (job->r->mem) pool_give(job->r->mem, job->r->mem_cap);
  job->r->mem = NULL;
}

/* The engine's read of the job. Without the GIL. */
static void run_job(reader_state *ts, job_t *job, const read_limits *lim, int header_only, Py_buffer *out) {
  read_image(ts, job->path_bytes ? PyBytes_AS_STRING(job->path_bytes) : NULL,
             job->have_in ? (const uint8_t *)job->in_view.buf : NULL, job->have_in ? (size_t)job->in_view.len : 0, lim,
             header_only, out ? out->buf : NULL, out ? (size_t)out->len : 0, job->r);
}

/* The job's exception (not raised): JpegError(reason, source), OSError or ValueError. With the GIL. */
static PyObject *job_exception(const job_t *job, PyObject *name) {
  PyObject *source = name != Py_None ? name : (job->path_bytes ? job->src : Py_None);
  return status_exception(&job->r->st, job->src, source);
}

/* The job's result tuple: header, or (header, data, warnings, num_warnings, saturated, num_lost).
 * Takes over r->mem. With the GIL. */
static PyObject *job_result(job_t *job, int header_only, PyObject *out_obj) {
  read_result *r = job->r;
  PyObject *header = header_tuple(&r->hdr), *data_obj, *warnings;
  if (!header || header_only) return header;
  if (r->mem) {
    data_obj = (PyObject *)coefbuffer_wrap(r->mem, r->mem_cap, r->hdr.total_coefs * sizeof(int16_t));
    r->mem = NULL; /* now owned by data_obj, or given back on failure */
  } else {
    data_obj = Py_NewRef(out_obj);
  }
  warnings = PyTuple_New(r->num_texts);
  if (!data_obj || !warnings) {
    Py_DECREF(header);
    Py_XDECREF(data_obj);
    Py_XDECREF(warnings);
    return NULL;
  }
  for (int i = 0; i < r->num_texts; i++) {
    PyObject *w = PyUnicode_DecodeLatin1(r->warnings[i], (Py_ssize_t)strlen(r->warnings[i]), "replace");
    if (!w) {
      Py_DECREF(header);
      Py_DECREF(data_obj);
      Py_DECREF(warnings);
      return NULL;
    }
    PyTuple_SET_ITEM(warnings, i, w);
  }
  return Py_BuildValue("(NNNiNi)", header, data_obj, warnings, r->num_warnings, PyBool_FromLong(r->saturated),
                       r->num_lost);
}

/* ---------------------------------------------------------------- read() and read_many() */

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

/* read()'s result or exception once the job has run. */
static PyObject *read_outcome(job_t *job, int header_only, PyObject *out_obj, const Py_buffer *out_view,
                              PyObject *name) {
  if (job->r->st.status == ST_OUT_TOO_SMALL) {
    PyErr_Format(PyExc_ValueError, "out buffer has %zd bytes, this image needs %zu", out_view->len,
                 job->r->hdr.total_coefs * sizeof(int16_t));
  } else if (job->r->st.status != ST_OK) {
    PyObject *exc = job_exception(job, name);
    if (exc) {
      PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
      Py_DECREF(exc);
    }
  } else {
    return job_result(job, header_only, out_obj);
  }
  return NULL;
}

static PyObject *py_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  PyObject *out_obj, *name, *result = NULL;
  Py_buffer out_view = {0};
  int header_only, have_out = 0, own_result = 0;
  read_limits lim;
  reader_state *ts;
  read_result *r;
  job_t job;
  (void)self;

  if (nargs != 7) {
    PyErr_SetString(PyExc_TypeError, "read() takes 7 positional arguments");
    return NULL;
  }
  out_obj = args[1];
  if (parse_limits(args[2], args[3], args[4], &lim)) return NULL;
  header_only = PyObject_IsTrue(args[5]);
  name = args[6];
  if (header_only < 0) return NULL;
  ts = reader_get();
  if (!ts) return PyErr_NoMemory();
  /* Per-thread scratch (the result is several KB) unless a read() on this thread is already
   * using it: Python code can run inside a call (GC callbacks, __del__, profilers, signal
   * handlers while objects are built), and such code may call read() again. */
  if (ts->scratch_busy) {
    r = (read_result *)PyMem_RawMalloc(sizeof(read_result));
    if (!r) return PyErr_NoMemory();
    own_result = 1;
  } else {
    r = ts->scratch;
    ts->scratch_busy = 1;
  }
  if (job_init(&job, args[0], r) != 0) goto free_result;
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
  run_job(ts, &job, &lim, header_only, have_out ? &out_view : NULL);
  Py_END_ALLOW_THREADS

  result = read_outcome(&job, header_only, out_obj, &out_view, name);
done:
  job_release(&job);
  if (have_out) PyBuffer_Release(&out_view);
free_result:
  if (own_result) PyMem_RawFree(r);
  else ts->scratch_busy = 0;
  return result;
}

PyDoc_STRVAR(read_many_doc,
             "read_many(srcs, warn_mode, max_pixels, max_bytes, header_only=False) -> list\n\n"
             "read() for each source of a sequence, all decoded in one GIL-free stretch; each item is\n"
             "the result tuple (the header alone with header_only) or the exception instance\n"
             "(JpegError, OSError) for that source.");

static PyObject *py_read_many(PyObject *self, PyObject *args) {
  PyObject *seq, *fast, *result = NULL, *max_pixels_obj, *max_bytes_obj, *mode_obj;
  int header_only = 0;
  read_limits lim;
  Py_ssize_t n, ready = 0;
  reader_state *ts;
  job_t *jobs = NULL;
  read_result *results = NULL;
  (void)self;
  if (!PyArg_ParseTuple(args, "OOOO|p", &seq, &mode_obj, &max_pixels_obj, &max_bytes_obj, &header_only)) return NULL;
  if (parse_limits(mode_obj, max_pixels_obj, max_bytes_obj, &lim)) return NULL;
  /* A private tuple: a list could change under us (another thread while the GIL is released, or
   * Python code run by a __buffer__ method), and every job takes its own reference (job_init). */
  fast = PySequence_Tuple(seq);
  if (!fast) return NULL;
  n = PyTuple_GET_SIZE(fast);
  ts = reader_get();
  if ((size_t)n <= PY_SSIZE_T_MAX / sizeof(read_result)) {
    jobs = (job_t *)PyMem_RawMalloc(sizeof(job_t) * (size_t)(n ? n : 1));
    results = (read_result *)PyMem_RawMalloc(sizeof(read_result) * (size_t)(n ? n : 1));
  }
  if (!ts || !jobs || !results) {
    PyErr_NoMemory();
    goto done;
  }
  for (; ready < n; ready++)
    if (job_init(&jobs[ready], PyTuple_GET_ITEM(fast, ready), &results[ready]) != 0) goto done;
  Py_BEGIN_ALLOW_THREADS
  for (Py_ssize_t i = 0; i < n; i++) run_job(ts, &jobs[i], &lim, header_only, NULL);
  Py_END_ALLOW_THREADS
  result = PyList_New(n);
  for (Py_ssize_t i = 0; result && i < n; i++) {
    PyObject *item = results[i].st.status == ST_OK ? job_result(&jobs[i], header_only, Py_None)
                                                   : job_exception(&jobs[i], Py_None);
    if (!item) Py_CLEAR(result);
    else PyList_SET_ITEM(result, i, item);
  }
done:
  for (Py_ssize_t i = 0; i < ready; i++) job_release(&jobs[i]);
  PyMem_RawFree(jobs);
  PyMem_RawFree(results);
  Py_DECREF(fast);
  return result;
}

/* ---------------------------------------------------------------- benchmark timers */

PyDoc_STRVAR(time_raw_doc,
             "time_raw(data, repeat) -> list[int]\n\n"
             "Nanoseconds per call of the raw libjpeg floor on one in-memory JPEG: create, read header,\n"
             "jpeg_read_coefficients, destroy; no dequantization, no copy, no Python. Benchmarks only.");

PyDoc_STRVAR(time_read_doc,
             "time_read(data, repeat, stop_rows=0) -> list[int]\n\n"
             "Nanoseconds per call of dctnet's C path (reused decoder, dequantize into a reused buffer),\n"
             "without Python overhead. stop_rows > 0 stops a single-scan decode after that many MCU rows\n"
             "(what a crop ending above them needs). Benchmarks only.");

#define TIME_MAX_REPEAT ((Py_ssize_t)10000000) /* 80 MB of timings: far above any benchmark's need */

static PyObject *time_common(PyObject *args, int raw) {
  Py_buffer view;
  Py_ssize_t repeat;
  int64_t *ns;
  int failed, stop_rows = 0;
  char err[DCTJ_MSG_LEN] = {0};
  PyObject *res = NULL;
  reader_state *ts = reader_get();
  if (!ts) return PyErr_NoMemory();
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
  Py_BEGIN_ALLOW_THREADS
  failed = time_decodes(ts, (const uint8_t *)view.buf, (size_t)view.len, (int64_t)repeat, raw, stop_rows, ns, err);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&view);
  if (failed) {
    PyObject *exc = PyObject_CallFunction(error_type, "sO", err, Py_None);
    if (exc) {
      PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
      Py_DECREF(exc);
    }
  } else if ((res = PyList_New(repeat)) != NULL) {
    for (Py_ssize_t i = 0; i < repeat; i++) PyList_SET_ITEM(res, i, PyLong_FromLongLong(ns[i]));
  }
  free(ns);
  return res;
}

static PyObject *py_time_raw(PyObject *self, PyObject *args) { (void)self; return time_common(args, 1); }
static PyObject *py_time_read(PyObject *self, PyObject *args) { (void)self; return time_common(args, 0); }

PyMethodDef read_methods[] = {
    {"read", (PyCFunction)(void (*)(void))py_read, METH_FASTCALL, read_doc},
    {"read_many", py_read_many, METH_VARARGS, read_many_doc},
    {"time_raw", py_time_raw, METH_VARARGS, time_raw_doc},
    {"time_read", py_time_read, METH_VARARGS, time_read_doc},
    {"alloc", py_alloc, METH_O, "alloc(nbytes) -> CoefBuffer: writable memory from the resident buffer pool."},
    {"pool_info", py_pool_info, METH_NOARGS, "Free output buffers kept for reuse: {'buffers': n, 'bytes': n}."},
    {"pool_clear", py_pool_clear, METH_NOARGS, "Free all output buffers kept for reuse."},
    {NULL, NULL, 0, NULL},
};

int read_types_ready(void) { return PyType_Ready(&CoefBufferType); }
