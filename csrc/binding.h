/*
 * What the binding files share (module.c, bind_read.c, bind_batch.c, bind_cache.c): the binding
 * turns Python arguments into the engine's plain C calls (reader.c, batch.c, sparse.c, plan.c,
 * crop.c, timing.c), releases the GIL around them, and builds results and exceptions. Only
 * binding files include Python.h.
 */
#ifndef DCTNET_BINDING_H
#define DCTNET_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "batch.h"
#include "reader.h"

/* dctnet.codec.JpegError once registered (set_error_type), ValueError before. */
extern PyObject *error_type;

/* warn_mode, max_pixels and max_bytes arguments (see module.c). Returns 0, or -1 with an exception set. */
int parse_limits(PyObject *warn_mode, PyObject *max_pixels, PyObject *max_bytes, read_limits *lim);

/* A failed image's exception, not raised: OSError naming filename for I/O failures,
 * JpegError(reason, source) for bad data, MemoryError, ValueError. NULL with an exception set
 * when it cannot be built. */
PyObject *status_exception(const image_status *st, PyObject *filename, PyObject *source);

/* Raise ValueError(message, item): the caller names the record or file of batch item `item`. */
void raise_item_error(const char *message, int64_t item);

/* Whether two byte ranges share memory. */
int overlaps(const void *a, Py_ssize_t alen, const void *b, Py_ssize_t blen);

/* Whether an output shares memory with another output, an input, or one of two extra buffers
 * (either may be NULL). */
int outputs_clash(const Py_buffer *ov, Py_ssize_t nout, const Py_buffer *in, Py_ssize_t nin, const Py_buffer *extra1,
                  const Py_buffer *extra2);

void release_buffers(Py_buffer *views, Py_ssize_t n);

/* The output planes of one layout group: each a C-contiguous writable int16 buffer whose ND shape
 * is (n, h, w, 64). Fills ov and out for every output and counts the buffers held in *held
 * (release them even on failure). Returns 0, or -1 with an exception set. */
int get_group_outputs(PyObject *outs_t, int64_t n, const char *who, Py_buffer *ov, Py_ssize_t *held,
                      group_outputs *out);

/* A private copy of a table argument's rows (PyMem_Free it; NULL with MemoryError): what was
 * checked is what is used, as another thread could rewrite the caller's array while the GIL is
 * released. */
void *private_copy(const Py_buffer *b);

/* Each binding file's functions and type set-up, for the module's init. */
extern PyMethodDef read_methods[], batch_methods[], cache_methods[];
int read_types_ready(void);
int batch_types_ready(void);

#endif
