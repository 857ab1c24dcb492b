/* imxrt.kernels._native: the int8 FULLY_CONNECTED layer in C, for layers too small for numpy.
 *
 * A layer of a few thousand MACs costs numpy more in per-call overhead (a matmul and half a dozen
 * ufuncs, about 1 us each) than in arithmetic; this computes the same function as
 * kernels/fully_connected.py's integer path in one call:
 *
 *   acc[r, o] = bias[o] + sum_i w[o, i] * q[r, i]           (bias folds -zp_in * sum_i w[o, i])
 *   v         = acc * M'[o] + K[o];  v -= tie_step[o] if v < tie_threshold[o];  v >>= S[o]
 *   q_out     = clamp(v + zp_out, act_min, act_max)
 *
 * which is TFLM's MultiplyByQuantizedMultiplier (double rounding) as one rounding shift: the constants
 * are kernels/requantize.py's ``rounding_constants``, computed in Python and only applied here. Sums of
 * int8 products are exact in int32 up to a depth of 2**31 / 128**2 - 1 = 131071 (checked at construction);
 * the output stage runs in int64 like the numpy integer stage.
 *
 * Weights are kept as int16 so the inner product vectorizes to multiply-add pairs (pmaddwd); on x86-64
 * Linux with GCC the loop is also built for AVX2 and picked at load time (target_clones).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define IMXRT_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define IMXRT_CLONES
#endif

#define MAX_DEPTH 131071  /* int32 sums of int8 x int8 products (each at most 2**14) stay below 2**31 */

typedef struct {
    PyObject_HEAD
    Py_ssize_t depth;     /* K: input features */
    Py_ssize_t channels;  /* N: output features */
    int16_t *weights;     /* [N, K] */
    int16_t *row;         /* [K]: one input row, widened */
    int64_t *bias;        /* [N] */
    int64_t *multiplier;  /* [N] M' = M * 2**left */
    int64_t *offset;      /* [N] K */
    int64_t *tie_threshold;
    int64_t *tie_step;
    int64_t *shift;       /* [N] S = 31 + right */
    int64_t output_zero_point, act_min, act_max;
} FullyConnected;

/* out[o] = sum_i w[o, i] * x[i] for every output channel, four channels per pass over x. */
IMXRT_CLONES
static void dot_rows(const int16_t *x, const int16_t *w, int32_t *out, Py_ssize_t depth, Py_ssize_t channels)
{
    Py_ssize_t o = 0;
    for (; o + 4 <= channels; o += 4) {
        const int16_t *w0 = w + o * depth, *w1 = w0 + depth, *w2 = w1 + depth, *w3 = w2 + depth;
        int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (Py_ssize_t i = 0; i < depth; i++) {
            int32_t v = x[i];
            s0 += w0[i] * v;
            s1 += w1[i] * v;
            s2 += w2[i] * v;
            s3 += w3[i] * v;
        }
        out[o] = s0;
        out[o + 1] = s1;
        out[o + 2] = s2;
        out[o + 3] = s3;
    }
    for (; o < channels; o++) {
        const int16_t *wo = w + o * depth;
        int32_t s = 0;
        for (Py_ssize_t i = 0; i < depth; i++)
            s += wo[i] * x[i];
        out[o] = s;
    }
}

static int
read_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t count, const char *what, int writable)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (view->itemsize != itemsize || (count >= 0 && view->len != count * itemsize)) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd items of %zd bytes, got %zd bytes of %zd-byte items",
                     what, count, itemsize, view->len, view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static int64_t *
copy_int64(PyObject *obj, Py_ssize_t count, const char *what)
{
    Py_buffer view;
    if (read_buffer(obj, &view, 8, count, what, 0) < 0)
        return NULL;
    int64_t *copy = PyMem_Malloc(count * sizeof(int64_t));
    if (copy == NULL) {
        PyBuffer_Release(&view);
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(copy, view.buf, count * sizeof(int64_t));
    PyBuffer_Release(&view);
    return copy;
}

static void
FullyConnected_dealloc(FullyConnected *self)
{
    PyMem_Free(self->weights);
    PyMem_Free(self->row);
    PyMem_Free(self->bias);
    PyMem_Free(self->multiplier);
    PyMem_Free(self->offset);
    PyMem_Free(self->tie_threshold);
    PyMem_Free(self->tie_step);
    PyMem_Free(self->shift);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
FullyConnected_init(FullyConnected *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"weights", "depth", "bias", "multiplier", "offset", "tie_threshold", "tie_step",
                               "shift", "output_zero_point", "act_min", "act_max", NULL};
    PyObject *weights, *bias, *multiplier, *offset, *tie_threshold, *tie_step, *shift;
    Py_ssize_t depth;
    long long output_zero_point, act_min, act_max;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OnOOOOOOLLL", keywords, &weights, &depth, &bias, &multiplier,
                                     &offset, &tie_threshold, &tie_step, &shift, &output_zero_point, &act_min,
                                     &act_max))
        return -1;
    if (self->weights != NULL) {
        PyErr_SetString(PyExc_TypeError, "a FullyConnected layer is prepared once");
        return -1;
    }
    if (depth < 1 || depth > MAX_DEPTH) {
        PyErr_Format(PyExc_ValueError, "depth %zd is outside [1, %d]", depth, MAX_DEPTH);
        return -1;
    }
    Py_buffer view;
    if (read_buffer(weights, &view, 1, -1, "weights (int8)", 0) < 0)
        return -1;
    if (view.len == 0 || view.len % depth != 0) {
        PyErr_Format(PyExc_ValueError, "weights: %zd bytes are not whole rows of depth %zd", view.len, depth);
        PyBuffer_Release(&view);
        return -1;
    }
    self->depth = depth;
    self->channels = view.len / depth;
    self->weights = PyMem_Malloc(view.len * sizeof(int16_t));
    self->row = PyMem_Malloc(depth * sizeof(int16_t));
    if (self->weights == NULL || self->row == NULL) {
        PyBuffer_Release(&view);
        PyErr_NoMemory();
        return -1;
    }
    const int8_t *source = view.buf;
    for (Py_ssize_t i = 0; i < view.len; i++)
        self->weights[i] = source[i];
    PyBuffer_Release(&view);
    Py_ssize_t n = self->channels;
    if ((self->bias = copy_int64(bias, n, "bias")) == NULL ||
        (self->multiplier = copy_int64(multiplier, n, "multiplier")) == NULL ||
        (self->offset = copy_int64(offset, n, "offset")) == NULL ||
        (self->tie_threshold = copy_int64(tie_threshold, n, "tie_threshold")) == NULL ||
        (self->tie_step = copy_int64(tie_step, n, "tie_step")) == NULL ||
        (self->shift = copy_int64(shift, n, "shift")) == NULL)
        return -1;
    for (Py_ssize_t o = 0; o < n; o++) {
        if (self->shift[o] < 0 || self->shift[o] > 62) {
            PyErr_Format(PyExc_ValueError, "shift[%zd] = %lld is outside [0, 62]", o, (long long)self->shift[o]);
            return -1;
        }
    }
    self->output_zero_point = output_zero_point;
    self->act_min = act_min;
    self->act_max = act_max;
    return 0;
}

/* run(x, out): x int8 [rows, depth] -> out int8 [rows, channels], both C-contiguous. */
static PyObject *
FullyConnected_run(FullyConnected *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "run(x, out) takes two buffers");
        return NULL;
    }
    Py_buffer x, out;
    if (read_buffer(args[0], &x, 1, -1, "x (int8)", 0) < 0)
        return NULL;
    Py_ssize_t rows = x.len / self->depth;
    if (x.len != rows * self->depth) {
        PyErr_Format(PyExc_ValueError, "x: %zd bytes are not whole rows of depth %zd", x.len, self->depth);
        PyBuffer_Release(&x);
        return NULL;
    }
    if (read_buffer(args[1], &out, 1, rows * self->channels, "out (int8)", 1) < 0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    int32_t sums_on_stack[256];
    int32_t *sums = self->channels <= 256 ? sums_on_stack : PyMem_Malloc(self->channels * sizeof(int32_t));
    if (sums == NULL) {
        PyBuffer_Release(&x);
        PyBuffer_Release(&out);
        return PyErr_NoMemory();
    }
    const int8_t *input = x.buf;
    int8_t *output = out.buf;
    for (Py_ssize_t r = 0; r < rows; r++) {
        for (Py_ssize_t i = 0; i < self->depth; i++)
            self->row[i] = input[r * self->depth + i];
        dot_rows(self->row, self->weights, sums, self->depth, self->channels);
        for (Py_ssize_t o = 0; o < self->channels; o++) {
            int64_t value = ((int64_t)sums[o] + self->bias[o]) * self->multiplier[o] + self->offset[o];
            if (value < self->tie_threshold[o])
                value -= self->tie_step[o];
            value = (value >> self->shift[o]) + self->output_zero_point;  /* arithmetic shift: a floor */
            if (value < self->act_min)
                value = self->act_min;
            if (value > self->act_max)
                value = self->act_max;
            output[r * self->channels + o] = (int8_t)value;
        }
    }
    if (sums != sums_on_stack)
        PyMem_Free(sums);
    PyBuffer_Release(&x);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

static PyObject *
FullyConnected_get_depth(FullyConnected *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->depth);
}

static PyObject *
FullyConnected_get_channels(FullyConnected *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->channels);
}

static PyMethodDef FullyConnected_methods[] = {
    {"run", (PyCFunction)(void (*)(void))FullyConnected_run, METH_FASTCALL,
     "run(x, out): int8 x [rows, depth] -> int8 out [rows, channels]"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef FullyConnected_getset[] = {
    {"depth", (getter)FullyConnected_get_depth, NULL, "input features", NULL},
    {"channels", (getter)FullyConnected_get_channels, NULL, "output features", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FullyConnectedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "imxrt.kernels._native.FullyConnected",
    .tp_doc = "An int8 fully connected layer, prepared: weights int8 [channels, depth], int64 per-channel "
              "bias (zero point folded) and rounding constants (kernels.requantize.rounding_constants).",
    .tp_basicsize = sizeof(FullyConnected),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FullyConnected_init,
    .tp_dealloc = (destructor)FullyConnected_dealloc,
    .tp_methods = FullyConnected_methods,
    .tp_getset = FullyConnected_getset,
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "imxrt.kernels._native",
    .m_doc = "int8 kernels in C where numpy's per-call cost dominates (see _native.c).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    if (PyType_Ready(&FullyConnectedType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&native_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&FullyConnectedType);
    if (PyModule_AddObject(module, "FullyConnected", (PyObject *)&FullyConnectedType) < 0) {
        Py_DECREF(&FullyConnectedType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
