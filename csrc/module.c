/*
 * dctnet._jpeg: the Python face of the C engine (see binding.h for how the files divide).
 *
 * This file holds the module itself: its init, the table layouts it exports, and the argument,
 * buffer and exception helpers the binding files share. The engine keeps one reader (libjpeg
 * state + buffers) per OS thread, reused across calls; each call releases the GIL once, for all
 * file I/O and libjpeg work.
 */
#include "binding.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <jconfig.h> /* LIBJPEG_TURBO_VERSION_NUMBER */
#ifndef DCTNET_VENDORED_LIBJPEG
#error "jconfig.h is not third_party/libjpeg-turbo's: the extension builds against its vendored libjpeg only"
#endif

#include "checksum.h"
#include "plan.h"
#include "pool.h"
#include "sparse.h"

PyObject *error_type;

/* ---------------------------------------------------------------- arguments */

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

int parse_limits(PyObject *warn_mode, PyObject *max_pixels, PyObject *max_bytes, read_limits *lim) {
  return parse_warn_mode(warn_mode, &lim->warn_mode) || parse_limit(max_pixels, "max_pixels", &lim->max_pixels) ||
                 parse_limit(max_bytes, "max_bytes", &lim->max_bytes)
             ? -1
             : 0;
}

/* ---------------------------------------------------------------- exceptions */

PyObject *status_exception(const image_status *st, PyObject *filename, PyObject *source) {
  switch (st->status) {
  case ST_IO_ERROR:
    return PyObject_CallFunction(PyExc_OSError, "isO", st->io_err, strerror(st->io_err), filename);
  case ST_NOT_REGULAR:
    return PyObject_CallFunction(PyExc_OSError, "isO", EINVAL, "not a regular file (a FIFO, socket or device)",
                                 filename);
  case ST_OUT_TOO_SMALL:
    return PyObject_CallFunction(PyExc_ValueError, "s", "out buffer is too small for this image");
  case ST_NO_MEMORY:
    return PyObject_CallFunction(PyExc_MemoryError, "s", "no memory for the coefficient planes");
  default:
    return PyObject_CallFunction(error_type, "sO", st->error, source);
  }
}

void raise_item_error(const char *message, int64_t item) {
  PyObject *e = Py_BuildValue("(sL)", message, (long long)item);
  if (e) {
    PyErr_SetObject(PyExc_ValueError, e);
    Py_DECREF(e);
  }
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

/* ---------------------------------------------------------------- buffers */

int overlaps(const void *a, Py_ssize_t alen, const void *b, Py_ssize_t blen) {
  uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
  return alen > 0 && blen > 0 && a0 < b0 + (uintptr_t)blen && b0 < a0 + (uintptr_t)alen;
}

/* Outputs are written while inputs are read: a shared byte would change what is read next (or
 * make a memcpy overlap). */
int outputs_clash(const Py_buffer *ov, Py_ssize_t nout, const Py_buffer *in, Py_ssize_t nin, const Py_buffer *extra1,
                  const Py_buffer *extra2) {
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

void release_buffers(Py_buffer *views, Py_ssize_t n) {
  for (Py_ssize_t i = 0; i < n; i++)
    if (views[i].obj) PyBuffer_Release(&views[i]);
}

int get_group_outputs(PyObject *outs_t, int64_t n, const char *who, Py_buffer *ov, Py_ssize_t *held,
                      group_outputs *out) {
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
    out->outs[*held] = (int16_t *)b->buf;
    out->oh[*held] = (int64_t)b->shape[1];
    out->ow[*held] = (int64_t)b->shape[2];
  }
  out->nout = nout;
  return 0;
}

void *private_copy(const Py_buffer *b) {
  void *copy = PyMem_Malloc(b->len ? (size_t)b->len : 1);
  if (!copy) {
    PyErr_NoMemory();
    return NULL;
  }
  memcpy(copy, b->buf, (size_t)b->len);
  return copy;
}

/* ---------------------------------------------------------------- table layouts
 *
 * The int64 tables that cross the boundary (header rows, plan rows, gather items, copy ranges)
 * are C structs (batch.h, plan.h, sparse.h) and structured numpy dtypes in dctnet.data.plan.
 * TABLES gives, per struct, its size and each field's (name, byte offset, byte size, shape);
 * dctnet.data.plan compares its dtypes with them at import, so a field added, moved or resized on
 * one side only fails the import instead of misreading columns. Every field is int64 (an array
 * field's shape times 8 bytes is its size). */

typedef struct {
  const char *name;
  size_t offset, size;
  int ndim;       /* 0 scalar, 1 or 2: an array of int64 */
  size_t dims[2];
} field_desc;

#define MEMBER(type, f) (((type *)0)->f)
#define FIELD(type, f) {#f, offsetof(type, f), sizeof(MEMBER(type, f)), 0, {0, 0}}
#define FIELD1(type, f) \
  {#f, offsetof(type, f), sizeof(MEMBER(type, f)), 1, {sizeof(MEMBER(type, f)) / sizeof(MEMBER(type, f)[0]), 0}}
#define FIELD2(type, f)                                                                                 \
  {#f, offsetof(type, f), sizeof(MEMBER(type, f)), 2,                                                   \
   {sizeof(MEMBER(type, f)) / sizeof(MEMBER(type, f)[0]), sizeof(MEMBER(type, f)[0]) / sizeof(MEMBER(type, f)[0][0])}}

static const field_desc header_fields[] = {
    FIELD(header_row, status), FIELD(header_row, height), FIELD(header_row, width), FIELD(header_row, ncomp),
    FIELD(header_row, color), FIELD(header_row, exif), FIELD(header_row, progressive), FIELD(header_row, nbytes),
    FIELD2(header_row, sampling), FIELD2(header_row, blocks)};
static const field_desc plan_fields[] = {FIELD1(plan_row, win), FIELD2(plan_row, pwin), FIELD1(plan_row, valid),
                                         FIELD1(plan_row, rel), FIELD(plan_row, group)};
static const field_desc gather_fields[] = {
    FIELD(gather_item, part), FIELD(gather_item, offset), FIELD(gather_item, nbytes), FIELD(gather_item, table),
    FIELD(gather_item, ncomp), FIELD1(gather_item, bh), FIELD1(gather_item, bw), FIELD(gather_item, nvalues),
    FIELD(gather_item, nescapes), FIELD1(gather_item, r0), FIELD1(gather_item, r1), FIELD1(gather_item, c0),
    FIELD1(gather_item, c1)};
static const field_desc range_fields[] = {FIELD(copy_range, part), FIELD(copy_range, src), FIELD(copy_range, size),
                                          FIELD(copy_range, dst)};

/* (itemsize, ((name, offset, size, shape), ...)) */
static PyObject *table_layout(size_t itemsize, const field_desc *f, size_t n) {
  PyObject *fields = PyTuple_New((Py_ssize_t)n);
  if (!fields) return NULL;
  for (size_t i = 0; i < n; i++) {
    PyObject *shape = f[i].ndim == 0   ? PyTuple_New(0)
                      : f[i].ndim == 1 ? Py_BuildValue("(n)", (Py_ssize_t)f[i].dims[0])
                                       : Py_BuildValue("(nn)", (Py_ssize_t)f[i].dims[0], (Py_ssize_t)f[i].dims[1]);
    PyObject *one = shape ? Py_BuildValue("(snnN)", f[i].name, (Py_ssize_t)f[i].offset, (Py_ssize_t)f[i].size, shape)
                          : NULL;
    if (!one) {
      Py_DECREF(fields);
      return NULL;
    }
    PyTuple_SET_ITEM(fields, (Py_ssize_t)i, one);
  }
  return Py_BuildValue("(nN)", (Py_ssize_t)itemsize, fields);
}

#define LAYOUT(type, fields) table_layout(sizeof(type), fields, sizeof(fields) / sizeof(fields[0]))

static int add_tables(PyObject *m) {
  PyObject *tables = Py_BuildValue("{s:N,s:N,s:N,s:N}", "header_row", LAYOUT(header_row, header_fields), "plan_row",
                                   LAYOUT(plan_row, plan_fields), "gather_item", LAYOUT(gather_item, gather_fields),
                                   "copy_range", LAYOUT(copy_range, range_fields));
  int rc;
  if (!tables) return -1;
  rc = PyModule_AddObjectRef(m, "TABLES", tables);
  Py_DECREF(tables);
  return rc;
}

/* ---------------------------------------------------------------- the module */

static PyMethodDef module_methods[] = {
    {"set_error_type", py_set_error_type, METH_O, "Register the exception class raised for bad JPEG data."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_jpeg",
    .m_doc = "libjpeg DCT-coefficient reader (see dctnet.codec).",
    .m_size = -1,
    .m_methods = module_methods,
};

static int add_constants(PyObject *m) {
  return PyModule_AddIntConstant(m, "JPEG_LIB_VERSION", dctj_lib_version()) ||
#ifdef LIBJPEG_TURBO_VERSION_NUMBER
         PyModule_AddIntConstant(m, "LIBJPEG_TURBO_VERSION_NUMBER", LIBJPEG_TURBO_VERSION_NUMBER) ||
#endif
         PyModule_AddIntConstant(m, "MAX_SCANS", DCTJ_MAX_SCANS) ||
         PyModule_AddIntConstant(m, "WARN_ACCEPT", DCTJ_WARN_ACCEPT) ||
         PyModule_AddIntConstant(m, "WARN_LOST", DCTJ_WARN_LOST) ||
         PyModule_AddIntConstant(m, "WARN_ALL", DCTJ_WARN_ALL) || add_tables(m)
             ? -1
             : 0;
}

PyMODINIT_FUNC PyInit__jpeg(void) {
  PyObject *m;
  if (pool_init() != 0 || reader_init() != 0) return PyErr_NoMemory();
  checksum_init(); /* the hash's vector unit, chosen once before any GIL-free call */
  if (read_types_ready() < 0 || batch_types_ready() < 0) return NULL;
  m = PyModule_Create(&module);
  if (!m) return NULL;
  error_type = Py_NewRef(PyExc_ValueError);
  if (PyModule_AddFunctions(m, read_methods) || PyModule_AddFunctions(m, batch_methods) ||
      PyModule_AddFunctions(m, cache_methods) || add_constants(m)) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
