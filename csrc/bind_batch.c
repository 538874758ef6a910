/*
 * Binding of the folder loader's batch path (batch.c): read_headers() and its FileBatch,
 * decode_windows(); and of the host crop and batch planning (crop.c, plan.c): rrc_boxes(),
 * plan_windows().
 */
#include "binding.h"

#include <string.h>

#include "crop.h"
#include "plan.h"
#include "pool.h"

/* ---------------------------------------------------------------- FileBatch
 *
 * read_headers() reads a batch's files once, keeping their bytes in one pool buffer (a FileBatch)
 * while it parses their headers into one table, so that planning the batch needs no per-file
 * Python objects and decode_windows() decodes from memory instead of opening and reading every
 * file a second time. */

typedef struct {
  PyObject_HEAD file_set fs; /* the engine's view: paths, kept bytes */
  PyObject *paths;           /* tuple of the fs-encoded paths (fs.paths points into it) */
  PyObject *names;           /* tuple of the paths as given: errors name them */
} FileBatch;

static void filebatch_dealloc(FileBatch *self) {
  pool_give(self->fs.arena, self->fs.arena_cap);
  PyMem_Free(self->fs.off);
  PyMem_Free((void *)self->fs.paths);
  Py_XDECREF(self->paths);
  Py_XDECREF(self->names);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t filebatch_length(FileBatch *self) { return (Py_ssize_t)self->fs.n; }
static PySequenceMethods filebatch_as_sequence = {.sq_length = (lenfunc)filebatch_length};

static PyTypeObject FileBatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dctnet._jpeg.FileBatch",
    .tp_basicsize = sizeof(FileBatch),
    .tp_dealloc = (destructor)filebatch_dealloc,
    .tp_as_sequence = &filebatch_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The bytes of a batch's JPEG files, read once by read_headers() (a source for decode_windows()).",
};

/* A FileBatch over names (a tuple of str paths), nothing read yet. NULL with an exception set. */
static FileBatch *filebatch_new(PyObject *names) {
  Py_ssize_t n = PyTuple_GET_SIZE(names);
  PyObject *paths = PyTuple_New(n);
  FileBatch *fb;
  if (!paths) return NULL;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *src = PyTuple_GET_ITEM(names, i), *b = NULL;
    if (!PyUnicode_Check(src)) {
      PyErr_Format(PyExc_TypeError, "read_headers: paths must be str, not %.100s", Py_TYPE(src)->tp_name);
      Py_DECREF(paths);
      return NULL;
    }
    if (!PyUnicode_FSConverter(src, &b)) {
      Py_DECREF(paths);
      return NULL;
    }
    PyTuple_SET_ITEM(paths, i, b);
  }
  fb = PyObject_New(FileBatch, &FileBatchType);
  if (!fb) {
    Py_DECREF(paths);
    return NULL;
  }
  memset(&fb->fs, 0, sizeof(fb->fs));
  fb->fs.n = n;
  fb->paths = paths;
  fb->names = Py_NewRef(names);
  fb->fs.off = (int64_t *)PyMem_Calloc((size_t)(n ? 2 * n : 2), sizeof(int64_t));
  fb->fs.len = fb->fs.off ? fb->fs.off + n : NULL;
  fb->fs.paths = (const char *const *)PyMem_Calloc((size_t)(n ? n : 1), sizeof(char *));
  if (!fb->fs.off || !fb->fs.paths) {
    Py_DECREF(fb);
    PyErr_NoMemory();
    return NULL;
  }
  for (Py_ssize_t i = 0; i < n; i++) ((const char **)fb->fs.paths)[i] = PyBytes_AS_STRING(PyTuple_GET_ITEM(paths, i));
  return fb;
}

/* The per-image exceptions of a call (None where the image read), as a list; name(i) is what
 * image i's exception names. */
static PyObject *failure_list(const image_status *st, Py_ssize_t n, PyObject *(*name)(void *, Py_ssize_t),
                              void *ctx) {
  PyObject *errors = PyList_New(n);
  for (Py_ssize_t i = 0; errors && i < n; i++) {
    PyObject *src = name(ctx, i);
    PyObject *exc = st[i].status == ST_OK ? Py_NewRef(Py_None) : status_exception(&st[i], src, src);
    if (!exc) Py_CLEAR(errors);
    else PyList_SET_ITEM(errors, i, exc);
  }
  return errors;
}

static PyObject *name_in_tuple(void *tuple, Py_ssize_t i) { return PyTuple_GET_ITEM((PyObject *)tuple, i); }

PyDoc_STRVAR(read_headers_doc,
             "read_headers(paths, warn_mode, max_pixels, max_bytes) -> (table, errors, files)\n\n"
             "Read each file once (without the GIL) and parse its header. table: bytes of header_row\n"
             "rows (n,) (dctnet.data.plan.HEADER_ROW): status (0 ok), height, width, components, colour\n"
             "space (libjpeg's code: 0 unknown, 1 gray, 2 RGB, 3 YCbCr, 4 CMYK, 5 YCCK), EXIF orientation\n"
             "(0 none), progressive, plane bytes, (h, v) sampling and (blocks_h, blocks_w) for 4 component\n"
             "slots (zero past the count).\n"
             "errors: per file None or the exception (OSError, JpegError). files: a FileBatch holding\n"
             "the bytes, to pass to decode_windows as its sources (part i = the i-th path).");

static PyObject *py_read_headers(PyObject *self, PyObject *args) {
  PyObject *seq, *mode_obj, *mp_obj, *mb_obj, *names = NULL, *table = NULL, *errors = NULL, *result = NULL;
  FileBatch *fb = NULL;
  image_status *st = NULL;
  read_limits lim;
  Py_ssize_t n;
  header_row *rows;
  reader_state *ts = reader_get();
  (void)self;
  if (!ts) return PyErr_NoMemory();
  if (!PyArg_ParseTuple(args, "OOOO", &seq, &mode_obj, &mp_obj, &mb_obj)) return NULL;
  if (parse_limits(mode_obj, mp_obj, mb_obj, &lim)) return NULL;
  names = PySequence_Tuple(seq);
  if (!names) return NULL;
  n = PyTuple_GET_SIZE(names);
  fb = filebatch_new(names);
  if (!fb) goto done;
  table = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((size_t)n * sizeof(header_row)));
  st = (image_status *)PyMem_Calloc((size_t)(n ? n : 1), sizeof(image_status));
  if (!table || !st) {
    if (!PyErr_Occurred()) PyErr_NoMemory();
    goto done;
  }
  rows = (header_row *)PyBytes_AS_STRING(table);
  memset(rows, 0, (size_t)n * sizeof(header_row));
  Py_BEGIN_ALLOW_THREADS
  read_file_batch(ts, &fb->fs, &lim, rows, st);
  Py_END_ALLOW_THREADS
  errors = failure_list(st, n, name_in_tuple, names);
  if (errors) result = PyTuple_Pack(3, table, errors, (PyObject *)fb);
done:
  PyMem_Free(st);
  Py_XDECREF(names);
  Py_XDECREF(table);
  Py_XDECREF(errors);
  Py_XDECREF(fb);
  return result;
}

/* ---------------------------------------------------------------- decode_windows */

/* The sources of a decode_windows call: a FileBatch's kept bytes and paths, or a private tuple
 * of str paths (read without the GIL) and bytes-like objects (one held export each).
 * Zero-initialise, hold_sources, then release_sources on every path (also after a failure). */
typedef struct {
  PyObject *srcs;     /* private tuple of the sources (empty for a FileBatch) */
  PyObject *names;    /* borrowed tuple: what each source's error names (a FileBatch's paths) */
  Py_buffer *views;   /* held exports of the bytes-like sources */
  PyObject **paths;   /* fs-encoded bytes of str sources (owned), NULL for buffers */
  image_source *img;  /* the engine's view */
  Py_ssize_t n, held;
} held_sources;

static int hold_sources(PyObject *obj, held_sources *h) {
  FileBatch *fb = Py_IS_TYPE(obj, &FileBatchType) ? (FileBatch *)obj : NULL; /* borrowed: the args hold it */
  h->srcs = fb ? PyTuple_New(0) : PySequence_Tuple(obj);
  if (!h->srcs) return -1;
  h->names = fb ? fb->names : h->srcs;
  h->n = fb ? (Py_ssize_t)fb->fs.n : PyTuple_GET_SIZE(h->srcs);
  h->views = (Py_buffer *)PyMem_Calloc((size_t)(h->n ? h->n : 1), sizeof(Py_buffer));
  h->paths = (PyObject **)PyMem_Calloc((size_t)(h->n ? h->n : 1), sizeof(PyObject *));
  h->img = (image_source *)PyMem_Calloc((size_t)(h->n ? h->n : 1), sizeof(image_source));
  if (!h->views || !h->paths || !h->img) {
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; fb && i < h->n; i++) { /* read_headers() kept the files: decode from memory */
    if (fb->fs.len[i] >= 0) {
      h->img[i].data = (const uint8_t *)fb->fs.arena + fb->fs.off[i];
      h->img[i].len = (size_t)fb->fs.len[i];
    } else {
      h->img[i].path = fb->fs.paths[i];
    }
  }
  for (; !fb && h->held < h->n; h->held++) {
    PyObject *src = PyTuple_GET_ITEM(h->srcs, h->held);
    if (PyUnicode_Check(src)) {
      if (!PyUnicode_FSConverter(src, &h->paths[h->held])) return -1;
      h->img[h->held].path = PyBytes_AS_STRING(h->paths[h->held]);
    } else if (PyObject_GetBuffer(src, &h->views[h->held], PyBUF_SIMPLE) != 0) {
      return -1;
    } else {
      h->img[h->held].data = (const uint8_t *)h->views[h->held].buf;
      h->img[h->held].len = (size_t)h->views[h->held].len;
    }
  }
  return 0;
}

static void release_sources(held_sources *h) {
  for (Py_ssize_t i = 0; i < h->held; i++) {
    if (h->paths[i]) Py_DECREF(h->paths[i]);
    else PyBuffer_Release(&h->views[i]);
  }
  if (h->paths && h->held < h->n) Py_XDECREF(h->paths[h->held]); /* a failed FSConverter leaves NULL */
  PyMem_Free(h->views);
  PyMem_Free(h->paths);
  PyMem_Free(h->img);
  Py_XDECREF(h->srcs);
}

/* What item i's error names: its source's path (None for bytes-like sources). */
typedef struct {
  const held_sources *h;
  const gather_item *items;
} item_names;

static PyObject *name_of_item(void *ctx, Py_ssize_t i) {
  const item_names *in = (const item_names *)ctx;
  PyObject *src = PyTuple_GET_ITEM(in->h->names, (Py_ssize_t)in->items[i].part);
  return PyUnicode_Check(src) ? src : Py_None;
}

PyDoc_STRVAR(decode_windows_doc,
             "decode_windows(srcs, items, outs, warn_mode, max_pixels, max_bytes) -> errors\n\n"
             "Decode JPEGs and write each plane's window straight into one layout group's outputs (the\n"
             "folder loader's batch path). srcs: a FileBatch from read_headers, or a sequence of paths\n"
             "(str: read here, without the GIL) or bytes-like JPEGs; items: gather_item rows (n,)\n"
             "(dctnet.data.plan.GATHER_ITEM) whose part is the index into srcs and whose plane sizes\n"
             "must equal the file's; outs as for gather_planes. Single-scan files stream into the windows\n"
             "one MCU row at a time and stop after the last row a window needs; others are decoded into a\n"
             "reused per-thread buffer and copied. errors: per item None, or the exception of an image that\n"
             "failed, whose windows are then zero: JpegError(reason, path) with libjpeg's reason (or saying\n"
             "the file changed since its header was read), OSError, MemoryError.\n"
             "Raises ValueError(message, item) for the first item whose part, component count or windows\n"
             "do not fit the call, before anything is decoded.");

static PyObject *py_decode_windows(PyObject *self, PyObject *args) {
  PyObject *srcs_obj, *items_obj, *outs_obj, *mode_obj, *mp_obj, *mb_obj, *outs_t = NULL, *result = NULL;
  Py_buffer it = {0}, ov[GATHER_MAX_COMPONENTS];
  held_sources hs = {0};
  group_outputs out;
  Py_ssize_t held_out = 0;
  int64_t n = 0, bad = 0;
  read_limits lim;
  gather_item *items = NULL;
  image_status *st = NULL;
  reader_state *ts = reader_get();
  (void)self;
  memset(ov, 0, sizeof ov);
  if (!ts) return PyErr_NoMemory();
  if (!PyArg_ParseTuple(args, "OOOOOO", &srcs_obj, &items_obj, &outs_obj, &mode_obj, &mp_obj, &mb_obj)) return NULL;
  if (parse_limits(mode_obj, mp_obj, mb_obj, &lim)) return NULL;
  if (PyObject_GetBuffer(items_obj, &it, PyBUF_SIMPLE) != 0) return NULL;
  n = (int64_t)(it.len / (Py_ssize_t)sizeof(gather_item));
  if (it.len % (Py_ssize_t)sizeof(gather_item) != 0) {
    PyErr_SetString(PyExc_ValueError, "decode_windows: items must be gather_item rows (int64 (n, 31))");
    goto done;
  }
  outs_t = PySequence_Tuple(outs_obj);
  if (!outs_t || get_group_outputs(outs_t, n, "decode_windows", ov, &held_out, &out) != 0) goto done;
  if (hold_sources(srcs_obj, &hs) != 0) goto done;
  if (outputs_clash(ov, out.nout, hs.views, hs.n, NULL, NULL)) {
    PyErr_SetString(PyExc_ValueError, "decode_windows: an output shares memory with an input or another output");
    goto done;
  }
  items = (gather_item *)private_copy(&it);
  st = (image_status *)PyMem_Calloc((size_t)(n ? n : 1), sizeof(image_status));
  if (!items || !st) {
    if (!PyErr_Occurred()) PyErr_NoMemory();
    goto done;
  }
  Py_BEGIN_ALLOW_THREADS
  bad = decode_windows(ts, hs.img, (int64_t)hs.n, items, n, &out, &lim, st);
  Py_END_ALLOW_THREADS
  if (bad) {
    raise_item_error("decode_windows: an item's source, component count or windows do not fit the call", bad - 1);
  } else {
    item_names in = {&hs, items};
    result = failure_list(st, (Py_ssize_t)n, name_of_item, &in);
  }
done:
  release_sources(&hs);
  release_buffers(ov, held_out);
  PyMem_Free(items);
  PyMem_Free(st);
  Py_XDECREF(outs_t);
  PyBuffer_Release(&it);
  return result;
}

/* ---------------------------------------------------------------- crop boxes and batch plans */

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
             "Batch planning in one call (see csrc/plan.h): int64 inputs color (n,), ncomp (n,),\n"
             "sampling (n, 4, 2), heights (n,), widths (n,), boxes (n, 4); writable outputs out (n,)\n"
             "plan_row rows (dctnet.data.plan.PLAN_ROW), int64 firsts (n,) (the first sample of each layout\n"
             "group) and need (n, 2) (each group's largest window in MCUs). Returns the number of groups.\n"
             "ValueError naming the first sample out of range.");

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
      b[4].len != b[0].len || b[5].len != 4 * b[0].len ||
      b[6].len != (Py_ssize_t)(sizeof(plan_row) / 8) * b[0].len ||
      b[7].len != b[0].len || b[8].len != 2 * b[0].len) {
    PyErr_SetString(PyExc_ValueError, "plan_windows: inconsistent buffer sizes");
  } else if (misaligned8(b, 9)) {
    PyErr_SetString(PyExc_ValueError, "plan_windows: buffers must be 8-byte aligned int64");
  } else if (outputs_clash(&b[6], 3, b, 6, NULL, NULL)) {
    PyErr_SetString(PyExc_ValueError, "plan_windows: an output shares memory with an input or another output");
  } else {
    bad = plan_windows((const int64_t *)b[0].buf, (const int64_t *)b[1].buf, (const int64_t *)b[2].buf,
                       (const int64_t *)b[3].buf, (const int64_t *)b[4].buf, (const int64_t *)b[5].buf, (int64_t)n,
                       (int64_t)margin, (plan_row *)b[6].buf, (int64_t *)b[7].buf, (int64_t *)b[8].buf, &ngroups);
    if (bad)
      PyErr_Format(PyExc_ValueError, "plan_windows: sample %lld has a layout, size or box out of range",
                   (long long)(bad - 1));
  }
  for (int i = 0; i < 9; i++) PyBuffer_Release(&b[i]);
  if (PyErr_Occurred()) return NULL;
  return PyLong_FromLongLong((long long)ngroups);
}

PyMethodDef batch_methods[] = {
    {"read_headers", py_read_headers, METH_VARARGS, read_headers_doc},
    {"decode_windows", py_decode_windows, METH_VARARGS, decode_windows_doc},
    {"rrc_boxes", py_rrc_boxes, METH_VARARGS, rrc_doc},
    {"plan_windows", py_plan_windows, METH_VARARGS, plan_doc},
    {NULL, NULL, 0, NULL},
};

int batch_types_ready(void) { return PyType_Ready(&FileBatchType); }
