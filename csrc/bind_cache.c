/*
 * Binding of the cache's gathers (sparse.c): gather_planes(), gather_packed(), copy_ranges() and
 * sparse_expand(), and record_checksums() (checksum.c). Every argument is checked here or by the
 * engine before a byte is read.
 */
#include "binding.h"

#include <string.h>

#include "checksum.h"
#include "sparse.h"

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

/* The expected checksums of a gather's n items (None: no check, *sums stays NULL): any contiguous
 * buffer of exactly n * 8 bytes (uint64 values), privately copied (what is compared is what was
 * passed, whatever another thread does to the caller's array), and n zeroed failure flags. Returns
 * 0, or -1 with an exception set (PyMem_Free both either way). */
static int get_sums(PyObject *obj, int64_t n, const char *who, uint64_t **sums, uint8_t **failed) {
  Py_buffer b;
  int rc = -1;
  *sums = NULL;
  *failed = NULL;
  if (obj == Py_None) return 0;
  if (PyObject_GetBuffer(obj, &b, PyBUF_SIMPLE) != 0) return -1;
  if (n < 0 || b.len != (Py_ssize_t)n * 8) {
    PyErr_Format(PyExc_ValueError, "%s: sums must be uint64 (n,): one checksum per item", who);
  } else {
    *sums = (uint64_t *)PyMem_Malloc(b.len ? (size_t)b.len : 1);
    *failed = (uint8_t *)PyMem_Calloc(n ? (size_t)n : 1, 1);
    if (!*sums || !*failed) {
      PyErr_NoMemory();
    } else {
      memcpy(*sums, b.buf, (size_t)b.len);
      rc = 0;
    }
  }
  PyBuffer_Release(&b);
  return rc;
}

/* The positions whose failure flag is set, as a list of ints (NULL with an exception set). */
static PyObject *failed_positions(const uint8_t *failed, int64_t n) {
  PyObject *list = PyList_New(0);
  for (int64_t i = 0; list && i < n; i++) {
    if (!failed[i]) continue;
    PyObject *v = PyLong_FromLongLong((long long)i);
    if (!v || PyList_Append(list, v) != 0) Py_CLEAR(list);
    Py_XDECREF(v);
  }
  return list;
}

PyDoc_STRVAR(gather_doc,
             "gather_planes(parts, tables, items, fmt, outs, sums=None) -> None or list\n\n"
             "Batch gather of one layout group from a coefficient cache (csrc/sparse.h). parts: a sequence\n"
             "of buffers (the part files' memory maps); tables: uint16 buffer of (ntables, 4, 64); items:\n"
             "gather_item rows (n,) (dctnet.data.plan.GATHER_ITEM) naming each record by part, offset and\n"
             "size; fmt: 0 dense,\n"
             "1 sparse; outs: one writable int16 array (n, h_c, w_c, 64) per component (numpy or any\n"
             "object with a C-contiguous writable buffer and a 'shape'). Every item is checked against\n"
             "the buffers; the buffers are held for the whole call. Raises ValueError(message, item)\n"
             "for the first batch item whose record is out of bounds or corrupt.\n\n"
             "sums: None, or the items' expected record checksums, uint64 (n,) (dctnet.data.cache.format\n"
             "record_checksum): each record is hashed right before it is copied or expanded, and the\n"
             "call returns the positions of the items whose record does not give its sum (their outputs\n"
             "zeroed, the other items gathered), [] when all do. Each item's table must then be a row of\n"
             "tables for dense records too.");

static PyObject *py_gather_planes(PyObject *self, PyObject *args) {
  PyObject *parts_obj, *tables_obj, *items_obj, *outs_obj, *outs_fast = NULL, *sums_obj = Py_None, *result = NULL;
  uint64_t *sums = NULL;
  uint8_t *failed = NULL;
  Py_buffer tb = {0}, it = {0}, ov[GATHER_MAX_COMPONENTS];
  held_parts hp = {0};
  group_outputs out;
  Py_ssize_t nout = 0, held_out = 0;
  int fmt, have_tb = 0, have_it = 0;
  int64_t n, bad = 0;
  gather_item *items = NULL;
  (void)self;
  memset(ov, 0, sizeof ov);
  if (!PyArg_ParseTuple(args, "OOOiO|O", &parts_obj, &tables_obj, &items_obj, &fmt, &outs_obj, &sums_obj)) return NULL;
  if (PyObject_GetBuffer(tables_obj, &tb, PyBUF_SIMPLE) != 0) goto done;
  have_tb = 1;
  if (PyObject_GetBuffer(items_obj, &it, PyBUF_SIMPLE) != 0) goto done;
  have_it = 1;
  n = (int64_t)(it.len / (Py_ssize_t)sizeof(gather_item));
  if (it.len % (Py_ssize_t)sizeof(gather_item) != 0 || ((uintptr_t)it.buf & 7) != 0 || ((uintptr_t)tb.buf & 1) != 0) {
    PyErr_SetString(PyExc_ValueError, "gather_planes: items must be gather_item rows (int64 (n, 31)), tables uint16");
    goto done;
  }
  if (get_sums(sums_obj, n, "gather_planes", &sums, &failed) != 0) goto done;
  outs_fast = PySequence_Tuple(outs_obj); /* private copies: Python code cannot change them under us */
  if (!outs_fast || get_group_outputs(outs_fast, n, "gather_planes", ov, &held_out, &out) != 0) goto done;
  nout = held_out;
  /* Holding an export of every part keeps its mapping alive (and unresizable) until we return. */
  if (hold_parts(parts_obj, &hp) != 0) goto done;
  /* Outputs are written while parts and tables are read: they must not share memory (a write
   * could otherwise change what is read next, or memcpy would copy between overlapping ranges). */
  if (outputs_clash(ov, nout, hp.views, hp.n, &tb, &it)) {
    PyErr_SetString(PyExc_ValueError, "gather_planes: an output shares memory with an input or another output");
    goto done;
  }
  items = (gather_item *)private_copy(&it);
  if (!items) goto done;
  Py_BEGIN_ALLOW_THREADS
  bad = gather_planes(items, n, hp.parts, hp.n, (const uint16_t *)tb.buf,
                      (int64_t)(tb.len / (4 * 64 * 2)), fmt, (int64_t)nout, out.outs, out.oh, out.ow, sums, failed);
  Py_END_ALLOW_THREADS
  if (bad < 0) PyErr_SetString(PyExc_ValueError, "gather_planes: bad format or output grid");
  else if (bad) raise_item_error("gather_planes: corrupt or out-of-bounds record for a batch item", bad - 1);
  else result = sums ? failed_positions(failed, n) : Py_NewRef(Py_None);
done:
  release_parts(&hp);
  release_buffers(ov, held_out);
  PyMem_Free(items);
  PyMem_Free(sums);
  PyMem_Free(failed);
  Py_XDECREF(outs_fast);
  if (have_tb) PyBuffer_Release(&tb);
  if (have_it) PyBuffer_Release(&it);
  return result;
}

PyDoc_STRVAR(gather_packed_doc,
             "gather_packed(parts, tables, items, fmt, out, offsets, sums=None) -> None or list\n\n"
             "gather_planes without the padding: each item's window of component c (r1 - r0 by c1 - c0\n"
             "blocks, zero outside the plane) is written to blocks offsets[i, c] onwards of out, one\n"
             "writable C-contiguous int16 (NB, 64) array; offsets: int64 (n, ncomp). The device builds\n"
             "the padded grid from it. Every window must fit inside out. Raises, and checks sums, as\n"
             "gather_planes.");

static PyObject *py_gather_packed(PyObject *self, PyObject *args) {
  PyObject *parts_obj, *tables_obj, *items_obj, *out_obj, *off_obj, *sums_obj = Py_None, *result = NULL;
  uint64_t *sums = NULL;
  uint8_t *failed = NULL;
  Py_buffer tb = {0}, it = {0}, ob = {0}, offb = {0};
  held_parts hp = {0};
  int fmt, have_tb = 0, have_it = 0, have_ob = 0, have_off = 0;
  int64_t n, ncomp = 0, bad = 0;
  gather_item *items = NULL;
  int64_t *offsets = NULL;
  (void)self;
  if (!PyArg_ParseTuple(args, "OOOiOO|O", &parts_obj, &tables_obj, &items_obj, &fmt, &out_obj, &off_obj, &sums_obj))
    return NULL;
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
    PyErr_SetString(PyExc_ValueError, "gather_packed: items must be gather_item rows (int64 (n, 31)), tables uint16");
    goto done;
  }
  if (get_sums(sums_obj, n, "gather_packed", &sums, &failed) != 0) goto done;
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
  items = (gather_item *)private_copy(&it);
  offsets = (int64_t *)PyMem_Malloc(offb.len ? (size_t)offb.len : 1); /* private, as the items */
  if (!items || !offsets) {
    if (!PyErr_Occurred()) PyErr_NoMemory();
    goto done;
  }
  memcpy(offsets, offb.buf, (size_t)offb.len);
  Py_BEGIN_ALLOW_THREADS
  bad = gather_packed(items, n, hp.parts, hp.n, (const uint16_t *)tb.buf, (int64_t)(tb.len / (4 * 64 * 2)), fmt,
                      ncomp ? ncomp : 1, (int16_t *)ob.buf, (int64_t)ob.shape[0], offsets, sums, failed);
  Py_END_ALLOW_THREADS
  if (bad < 0) PyErr_SetString(PyExc_ValueError, "gather_packed: bad format");
  else if (bad) raise_item_error("gather_packed: corrupt or out-of-bounds record or window for a batch item", bad - 1);
  else result = sums ? failed_positions(failed, n) : Py_NewRef(Py_None);
done:
  release_parts(&hp);
  PyMem_Free(items);
  PyMem_Free(offsets);
  PyMem_Free(sums);
  PyMem_Free(failed);
  if (have_tb) PyBuffer_Release(&tb);
  if (have_it) PyBuffer_Release(&it);
  if (have_ob) PyBuffer_Release(&ob);
  if (have_off) PyBuffer_Release(&offb);
  return result;
}

PyDoc_STRVAR(copy_ranges_doc,
             "copy_ranges(parts, ranges, out, tables=None, items=None, sums=None) -> None or list\n\n"
             "Copy byte ranges of the parts (buffers, e.g. a cache's part maps) into out, a writable\n"
             "C-contiguous buffer: ranges is copy_range rows (k,) (dctnet.data.plan.COPY_RANGE) of (part,\n"
             "source offset, size, destination offset). Every range is checked against its part and against out before any byte is copied;\n"
             "raises ValueError(message, row) for the first bad row.\n\n"
             "With tables (uint16 (ntables, 4, 64)), items (gather_item rows (n,): part, offset, nbytes and\n"
             "table name each record) and sums (uint64 (n,), their expected checksums): the ranges are n\n"
             "groups of k / n, group j lying inside item j's record; each record's ranges are copied,\n"
             "then the record hashed. Returns the positions of the items whose record does not give its sum ([]\n"
             "when all do; their ranges are copied all the same); raises ValueError(message, item) for\n"
             "the first item whose record, table or ranges do not fit, before any byte is copied.");

static PyObject *py_copy_ranges(PyObject *self, PyObject *args) {
  PyObject *parts_obj, *ranges_obj, *out_obj, *tables_obj = Py_None, *items_obj = Py_None, *sums_obj = Py_None;
  PyObject *result = NULL;
  Py_buffer rb = {0}, ob = {0}, tb = {0}, it = {0};
  held_parts hp = {0};
  int have_rb = 0, have_ob = 0, have_tb = 0, have_it = 0, checked;
  copy_range *ranges = NULL;
  gather_item *items = NULL;
  uint64_t *sums = NULL;
  uint8_t *failed = NULL;
  int64_t bad = 0, k, n = 0;
  (void)self;
  if (!PyArg_ParseTuple(args, "OOO|OOO", &parts_obj, &ranges_obj, &out_obj, &tables_obj, &items_obj, &sums_obj))
    return NULL;
  checked = tables_obj != Py_None || items_obj != Py_None || sums_obj != Py_None;
  if (checked && (tables_obj == Py_None || items_obj == Py_None || sums_obj == Py_None)) {
    PyErr_SetString(PyExc_ValueError, "copy_ranges: tables, items and sums go together");
    goto done;
  }
  if (PyObject_GetBuffer(ranges_obj, &rb, PyBUF_SIMPLE) != 0) goto done;
  have_rb = 1;
  if (PyObject_GetBuffer(out_obj, &ob, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) goto done;
  have_ob = 1;
  if (rb.len % (Py_ssize_t)sizeof(copy_range) != 0) {
    PyErr_SetString(PyExc_ValueError, "copy_ranges: ranges must be copy_range rows (int64 (k, 4))");
    goto done;
  }
  k = (int64_t)(rb.len / (Py_ssize_t)sizeof(copy_range));
  if (checked) {
    if (PyObject_GetBuffer(tables_obj, &tb, PyBUF_SIMPLE) != 0) goto done;
    have_tb = 1;
    if (PyObject_GetBuffer(items_obj, &it, PyBUF_SIMPLE) != 0) goto done;
    have_it = 1;
    n = (int64_t)(it.len / (Py_ssize_t)sizeof(gather_item));
    if (it.len % (Py_ssize_t)sizeof(gather_item) != 0 || ((uintptr_t)tb.buf & 1) != 0 ||
        (n == 0 ? k != 0 : k % n != 0)) {
      PyErr_SetString(PyExc_ValueError, "copy_ranges: items must be gather_item rows (int64 (n, 31)), tables uint16, "
                                        "and the ranges n groups of the same size");
      goto done;
    }
    if (get_sums(sums_obj, n, "copy_ranges", &sums, &failed) != 0) goto done;
    items = (gather_item *)private_copy(&it);
    if (!items) goto done;
  }
  ranges = (copy_range *)private_copy(&rb); /* checked is what is used */
  if (!ranges) goto done;
  if (hold_parts(parts_obj, &hp) != 0) goto done;
  if (outputs_clash(&ob, 1, hp.views, hp.n, &rb, checked ? &tb : NULL)) {
    PyErr_SetString(PyExc_ValueError, "copy_ranges: out shares memory with an input");
    goto done;
  }
  Py_BEGIN_ALLOW_THREADS
  if (checked)
    bad = copy_records(hp.parts, hp.n, ranges, k, (uint8_t *)ob.buf, (int64_t)ob.len, (const uint16_t *)tb.buf,
                       (int64_t)(tb.len / CHECKSUM_TABLE_BYTES), items, n, sums, failed);
  else
    bad = copy_ranges(hp.parts, hp.n, ranges, k, (uint8_t *)ob.buf, (int64_t)ob.len);
  Py_END_ALLOW_THREADS
  if (bad < 0) PyErr_SetString(PyExc_ValueError, "copy_ranges: the ranges are not groups of the items");
  else if (bad && checked)
    raise_item_error("copy_ranges: an item's record lies outside its part, its table outside the tables, or one of "
                     "its ranges outside the record or the output", bad - 1);
  else if (bad) raise_item_error("copy_ranges: a range lies outside its part or the output", bad - 1);
  else result = checked ? failed_positions(failed, n) : Py_NewRef(Py_None);
done:
  release_parts(&hp);
  PyMem_Free(ranges);
  PyMem_Free(items);
  PyMem_Free(sums);
  PyMem_Free(failed);
  if (have_rb) PyBuffer_Release(&rb);
  if (have_ob) PyBuffer_Release(&ob);
  if (have_tb) PyBuffer_Release(&tb);
  if (have_it) PyBuffer_Release(&it);
  return result;
}

PyDoc_STRVAR(record_checksums_doc,
             "record_checksums(parts, tables, items, out) -> None\n\n"
             "The checksum of each item's record, as the gathers compute it (csrc/checksum.h): XXH3-64 of\n"
             "the record's bytes (items: gather_item rows (n,), whose part, offset, nbytes and table are\n"
             "read) seeded with the XXH3-64 of its tables row (tables: uint16 (ntables, 4, 64)), written\n"
             "to out, a writable uint64 (n,) buffer. Raises ValueError(message, item) for the first item\n"
             "whose record lies outside its part or whose table is not a row of tables.");

static PyObject *py_record_checksums(PyObject *self, PyObject *args) {
  PyObject *parts_obj, *tables_obj, *items_obj, *out_obj;
  Py_buffer tb = {0}, it = {0}, ob = {0};
  held_parts hp = {0};
  int have_tb = 0, have_it = 0, have_ob = 0;
  gather_item *items = NULL;
  int64_t n, bad = 0;
  (void)self;
  if (!PyArg_ParseTuple(args, "OOOO", &parts_obj, &tables_obj, &items_obj, &out_obj)) return NULL;
  if (PyObject_GetBuffer(tables_obj, &tb, PyBUF_SIMPLE) != 0) goto done;
  have_tb = 1;
  if (PyObject_GetBuffer(items_obj, &it, PyBUF_SIMPLE) != 0) goto done;
  have_it = 1;
  if (PyObject_GetBuffer(out_obj, &ob, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) goto done;
  have_ob = 1;
  n = (int64_t)(it.len / (Py_ssize_t)sizeof(gather_item));
  if (it.len % (Py_ssize_t)sizeof(gather_item) != 0 || ((uintptr_t)tb.buf & 1) != 0 || ob.len != (Py_ssize_t)n * 8 ||
      ((uintptr_t)ob.buf & 7) != 0) {
    PyErr_SetString(PyExc_ValueError, "record_checksums: items must be gather_item rows (int64 (n, 31)), tables "
                                      "uint16, out uint64 (n,)");
    goto done;
  }
  if (hold_parts(parts_obj, &hp) != 0) goto done;
  if (outputs_clash(&ob, 1, hp.views, hp.n, &tb, &it)) {
    PyErr_SetString(PyExc_ValueError, "record_checksums: out shares memory with an input");
    goto done;
  }
  items = (gather_item *)private_copy(&it);
  if (!items) goto done;
  Py_BEGIN_ALLOW_THREADS
  bad = record_checksums(items, n, hp.parts, hp.n, (const uint16_t *)tb.buf, (int64_t)(tb.len / CHECKSUM_TABLE_BYTES),
                         (uint64_t *)ob.buf);
  Py_END_ALLOW_THREADS
  if (bad) raise_item_error("record_checksums: an item's record lies outside its part or its table outside the tables",
                            bad - 1);
done:
  release_parts(&hp);
  PyMem_Free(items);
  if (have_tb) PyBuffer_Release(&tb);
  if (have_it) PyBuffer_Release(&it);
  if (have_ob) PyBuffer_Release(&ob);
  if (PyErr_Occurred()) return NULL;
  Py_RETURN_NONE;
}

PyMethodDef cache_methods[] = {
    {"sparse_expand", py_sparse_expand, METH_VARARGS, expand_doc},
    {"gather_planes", py_gather_planes, METH_VARARGS, gather_doc},
    {"gather_packed", py_gather_packed, METH_VARARGS, gather_packed_doc},
    {"copy_ranges", py_copy_ranges, METH_VARARGS, copy_ranges_doc},
    {"record_checksums", py_record_checksums, METH_VARARGS, record_checksums_doc},
    {NULL, NULL, 0, NULL},
};
