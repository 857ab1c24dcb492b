/* imxrt.kernels._native: the int8 kernels in C whose numpy form costs more than their arithmetic.
 *
 * FullyConnected: a layer of a few thousand MACs costs numpy more in per-call overhead (a matmul and half a dozen
 * ufuncs, about 1 us each) than in arithmetic. Convolution, DepthwiseConvolution, Pool: numpy copies every
 * window (im2col) or makes one pass per filter tap, in float, and a convolution's float matmul goes to BLAS.
 * Each computes the same function as its numpy kernel (kernels/fully_connected.py, conv.py, pooling.py):
 *
 *   FC:    acc[r, o] = sum_i w[o, i] * q[r, i]            (bias folds -zp_in * sum_i w[o, i])
 *   conv:  acc[p, o] = sum_{taps in the input} w[o, tap] * (q[tap] - zp_in)     (a tap outside adds nothing)
 *   depthwise: acc[p, c] = sum_{taps in the input} w[tap, c] * (q[tap, c / depth_multiplier] - zp_in)
 *   then   v = (acc + bias[o]) * M'[o] + K[o];  v -= tie_step[o] if v < tie_threshold[o];  v >>= S[o]
 *          q_out = clamp(v + zp_out, act_min, act_max)
 *
 * which is TFLM's MultiplyByQuantizedMultiplier (double rounding) as one rounding shift: the constants are
 * kernels/requantize.py's ``rounding_constants``, computed in Python and only applied here (``OutputStage``).
 * Sums are exact in int32: int8 x int8 products are at most 2**14, so up to a depth of 131071 for the fully
 * connected layer; centered inputs (q - zp_in, zp_in an int8) at most 255, so products of at most 255 * 128 up
 * to 65793 taps for the convolutions (both checked at construction). The output stage runs in int64, like the
 * numpy integer stage; Python checks that its values stay below 2**63 before building a kernel.
 *
 * Pool: the sum (average, rounded half away from zero as TFLM's and CMSIS-NN's C division does it) or the
 * largest of the taps inside the input, clamped.
 *
 * Weights and im2col rows are int16 so the inner products vectorize to multiply-add pairs (pmaddwd). The
 * convolutions' inner loops and the output stage are written twice: portable C, and AVX2 intrinsics on x86-64,
 * picked at import where the CPU has AVX2 (``use_loops`` switches, so tests run both); the fully connected
 * layer's loop is GCC's own vectorization, built for AVX2 too on x86-64 Linux and picked at load time
 * (target_clones). A kernel object keeps its work buffers: one call at a time (the GIL is held throughout).
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

/* The convolution's inner loops in AVX2 intrinsics where the compiler takes them (picked at import when the CPU
 * has AVX2): GCC's own vectorization of them unrolls past a short depth (16 for a pointwise convolution over 16
 * channels), which then runs as scalar code. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define IMXRT_AVX2 1
#include <immintrin.h>
#endif

#define MAX_DEPTH 131071  /* int32 sums of int8 x int8 products (each at most 2**14) stay below 2**31 */
#define MAX_CENTERED_DEPTH 65793  /* int32 sums of products of at most 255 * 128 stay below 2**31 */
#define MAX_POOL_TAPS (1 << 23)  /* int32 sums of int8 values stay below 2**31 */
#define MAX_WINDOW_VALUE (1 << 30)  /* sizes, steps and padding: index arithmetic stays far from overflow */

/* ---- buffers and constants ---- */

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

/* An int8 NHWC tensor: its buffer, 4-D, with ``channels`` channels (when not negative). */
static int
read_nhwc(PyObject *obj, Py_buffer *view, Py_ssize_t channels, const char *what)
{
    if (read_buffer(obj, view, 1, -1, what, 0) < 0)
        return -1;
    if (view->ndim != 4 || (channels >= 0 && view->shape[3] != channels)) {
        PyErr_Format(PyExc_ValueError, "%s: expected a 4-D NHWC int8 array with %zd channels, got %d dimensions%s",
                     what, channels, view->ndim, view->ndim == 4 ? " and another channel count" : "");
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

/* ---- the output stage: int32 sums -> int8, per output channel ---- */

typedef struct {
    Py_ssize_t channels;
    int64_t *bias;        /* [C] */
    int64_t *multiplier;  /* [C] M' = M * 2**left */
    int64_t *offset;      /* [C] K */
    int64_t *tie_threshold;
    int64_t *tie_step;
    int64_t *shift;       /* [C] S = 31 + right */
    int64_t *floor_bias;  /* [C] 2**(63 - S) */
    int64_t output_zero_point, act_min, act_max;
} OutputStage;

static int
output_stage_init(OutputStage *stage, Py_ssize_t channels, PyObject *bias, PyObject *multiplier, PyObject *offset,
                  PyObject *tie_threshold, PyObject *tie_step, PyObject *shift, long long output_zero_point,
                  long long act_min, long long act_max)
{
    stage->channels = channels;
    if ((stage->bias = copy_int64(bias, channels, "bias")) == NULL ||
        (stage->multiplier = copy_int64(multiplier, channels, "multiplier")) == NULL ||
        (stage->offset = copy_int64(offset, channels, "offset")) == NULL ||
        (stage->tie_threshold = copy_int64(tie_threshold, channels, "tie_threshold")) == NULL ||
        (stage->tie_step = copy_int64(tie_step, channels, "tie_step")) == NULL ||
        (stage->shift = copy_int64(shift, channels, "shift")) == NULL)
        return -1;
    if ((stage->floor_bias = PyMem_Malloc(channels * sizeof(int64_t))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t o = 0; o < channels; o++) {
        if (stage->shift[o] < 0 || stage->shift[o] > 62) {
            PyErr_Format(PyExc_ValueError, "shift[%zd] = %lld is outside [0, 62]", o, (long long)stage->shift[o]);
            return -1;
        }
        stage->floor_bias[o] = (int64_t)((uint64_t)1 << (63 - stage->shift[o]));  /* 2**63 wraps to INT64_MIN: the sums wrap alike */
    }
    stage->output_zero_point = output_zero_point;
    stage->act_min = act_min;
    stage->act_max = act_max;
    return 0;
}

static void
output_stage_free(OutputStage *stage)
{
    PyMem_Free(stage->bias);
    PyMem_Free(stage->multiplier);
    PyMem_Free(stage->offset);
    PyMem_Free(stage->tie_threshold);
    PyMem_Free(stage->tie_step);
    PyMem_Free(stage->shift);
    PyMem_Free(stage->floor_bias);
}

/* out[o] = clamp(MBQM(sums[o] + bias[o]) + zp_out) for every channel. Without branches: whether a value is a
 * negative tie, and where it clamps, follow the data, and a mispredicted branch costs more than the arithmetic. */
static void
requantize_row_portable(const OutputStage *stage, const int32_t *sums, int8_t *out)
{
    const int64_t *bias = stage->bias, *multiplier = stage->multiplier, *offset = stage->offset;
    const int64_t *tie_threshold = stage->tie_threshold, *tie_step = stage->tie_step, *shift = stage->shift;
    const int64_t zero_point = stage->output_zero_point, low = stage->act_min, high = stage->act_max;
    for (Py_ssize_t o = 0; o < stage->channels; o++) {
        int64_t value = ((int64_t)sums[o] + bias[o]) * multiplier[o] + offset[o];
        value -= tie_step[o] & -(int64_t)(value < tie_threshold[o]);
        value = (value >> shift[o]) + zero_point;  /* arithmetic shift: a floor */
        value = value < low ? low : value;
        value = value > high ? high : value;
        out[o] = (int8_t)value;
    }
}

#ifdef IMXRT_AVX2
/* requantize_row_portable four channels at a time. AVX2 has no 64-bit product nor arithmetic 64-bit shift:
 * the product's low 64 bits (the product itself: Python checked it stays below 2**63) from three 32-bit ones,
 * and floor(v / 2**S) = ((v + 2**63) >> S, logical) - 2**(63 - S) (``floor_bias``). */
__attribute__((target("avx2")))
static void
requantize_row_avx2(const OutputStage *stage, const int32_t *sums, int8_t *out)
{
    const Py_ssize_t channels = stage->channels;
    const __m256i sign = _mm256_set1_epi64x(INT64_MIN);
    const __m256i zero_point = _mm256_set1_epi64x(stage->output_zero_point);
    const __m256i low = _mm256_set1_epi64x(stage->act_min), high = _mm256_set1_epi64x(stage->act_max);
    const __m256i low_dwords = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    Py_ssize_t o = 0;
    for (; o + 4 <= channels; o += 4) {
        __m256i value = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm_loadu_si128((const __m128i *)(sums + o))),
                                         _mm256_loadu_si256((const __m256i *)(stage->bias + o)));
        __m256i multiplier = _mm256_loadu_si256((const __m256i *)(stage->multiplier + o));
        __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(value, 32), multiplier),
                                         _mm256_mul_epu32(value, _mm256_srli_epi64(multiplier, 32)));
        value = _mm256_add_epi64(_mm256_mul_epu32(value, multiplier), _mm256_slli_epi64(cross, 32));
        value = _mm256_add_epi64(value, _mm256_loadu_si256((const __m256i *)(stage->offset + o)));
        __m256i tie = _mm256_cmpgt_epi64(_mm256_loadu_si256((const __m256i *)(stage->tie_threshold + o)), value);
        value = _mm256_sub_epi64(value, _mm256_and_si256(tie, _mm256_loadu_si256((const __m256i *)(stage->tie_step + o))));
        value = _mm256_srlv_epi64(_mm256_xor_si256(value, sign), _mm256_loadu_si256((const __m256i *)(stage->shift + o)));
        value = _mm256_sub_epi64(value, _mm256_loadu_si256((const __m256i *)(stage->floor_bias + o)));
        value = _mm256_add_epi64(value, zero_point);
        value = _mm256_blendv_epi8(value, low, _mm256_cmpgt_epi64(low, value));
        value = _mm256_blendv_epi8(value, high, _mm256_cmpgt_epi64(value, high));
        __m128i dwords = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(value, low_dwords));
        __m128i bytes = _mm_packs_epi16(_mm_packs_epi32(dwords, dwords), dwords);
        int32_t four = _mm_cvtsi128_si32(bytes);
        memcpy(out + o, &four, 4);
    }
    if (o < channels) {
        OutputStage rest = *stage;
        rest.channels = channels - o;
        rest.bias += o;
        rest.multiplier += o;
        rest.offset += o;
        rest.tie_threshold += o;
        rest.tie_step += o;
        rest.shift += o;
        requantize_row_portable(&rest, sums + o, out + o);
    }
}
#endif

static void (*requantize_row)(const OutputStage *, const int32_t *, int8_t *) = requantize_row_portable;

/* ---- inner products ---- */

/* out[o] = sum_i w[o, i] * x[i] for every output channel, four channels per pass over x. */
IMXRT_CLONES
static void
dot_rows(const int16_t *x, const int16_t *w, int32_t *out, Py_ssize_t depth, Py_ssize_t channels)
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

/* dot_rows for two input rows at once: each weight read serves both (out0 for x0, out1 for x1). */
IMXRT_CLONES
static void
dot_rows_2(const int16_t *x0, const int16_t *x1, const int16_t *w, int32_t *out0, int32_t *out1, Py_ssize_t depth,
           Py_ssize_t channels)
{
    Py_ssize_t o = 0;
    for (; o + 4 <= channels; o += 4) {
        const int16_t *w0 = w + o * depth, *w1 = w0 + depth, *w2 = w1 + depth, *w3 = w2 + depth;
        int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0;
        for (Py_ssize_t i = 0; i < depth; i++) {
            int32_t u = x0[i], v = x1[i];
            a0 += w0[i] * u;
            a1 += w1[i] * u;
            a2 += w2[i] * u;
            a3 += w3[i] * u;
            b0 += w0[i] * v;
            b1 += w1[i] * v;
            b2 += w2[i] * v;
            b3 += w3[i] * v;
        }
        out0[o] = a0;
        out0[o + 1] = a1;
        out0[o + 2] = a2;
        out0[o + 3] = a3;
        out1[o] = b0;
        out1[o + 1] = b1;
        out1[o + 2] = b2;
        out1[o + 3] = b3;
    }
    for (; o < channels; o++) {
        const int16_t *wo = w + o * depth;
        int32_t a = 0, b = 0;
        for (Py_ssize_t i = 0; i < depth; i++) {
            a += wo[i] * x0[i];
            b += wo[i] * x1[i];
        }
        out0[o] = a;
        out1[o] = b;
    }
}

/* sums[p * channels + o] = sum_i rows[p * depth + i] * w[o * depth + i] for p < count, o < channels; depth is
 * a multiple of 16. Two rows by four channels per pass: each weight vector read serves two rows. */
static void
dot_tile_portable(const int16_t *rows, Py_ssize_t count, const int16_t *w, Py_ssize_t depth, Py_ssize_t channels,
                  int32_t *sums)
{
    Py_ssize_t p = 0;
    for (; p + 2 <= count; p += 2)
        dot_rows_2(rows + p * depth, rows + (p + 1) * depth, w, sums + p * channels, sums + (p + 1) * channels,
                   depth, channels);
    if (p < count)
        dot_rows(rows + p * depth, w, sums + p * channels, depth, channels);
}

/* dst[i] = src[i] - zero_point */
static void
widen_centered_portable(const int8_t *src, int16_t *dst, Py_ssize_t count, int32_t zero_point)
{
    for (Py_ssize_t i = 0; i < count; i++)
        dst[i] = (int16_t)(src[i] - zero_point);
}

#ifdef IMXRT_AVX2
/* The four sums of eight lanes each: [sum a0, sum a1, sum a2, sum a3]. */
__attribute__((target("avx2")))
static inline __m128i
sum_lanes_4(__m256i a0, __m256i a1, __m256i a2, __m256i a3)
{
    __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(a0, a1), _mm256_hadd_epi32(a2, a3));
    return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

__attribute__((target("avx2")))
static inline int32_t
sum_lanes(__m256i a)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* dot_tile_portable with multiply-add pairs (vpmaddwd): sixteen int16 products per instruction. */
__attribute__((target("avx2")))
static void
dot_tile_avx2(const int16_t *rows, Py_ssize_t count, const int16_t *w, Py_ssize_t depth, Py_ssize_t channels,
              int32_t *sums)
{
    Py_ssize_t p = 0;
    for (; p + 2 <= count; p += 2) {
        const int16_t *x0 = rows + p * depth, *x1 = x0 + depth;
        int32_t *out0 = sums + p * channels, *out1 = out0 + channels;
        Py_ssize_t o = 0;
        for (; o + 4 <= channels; o += 4) {
            const int16_t *w0 = w + o * depth, *w1 = w0 + depth, *w2 = w1 + depth, *w3 = w2 + depth;
            __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
            for (Py_ssize_t i = 0; i < depth; i += 16) {
                __m256i u = _mm256_loadu_si256((const __m256i *)(x0 + i));
                __m256i v = _mm256_loadu_si256((const __m256i *)(x1 + i));
                __m256i k0 = _mm256_loadu_si256((const __m256i *)(w0 + i));
                __m256i k1 = _mm256_loadu_si256((const __m256i *)(w1 + i));
                __m256i k2 = _mm256_loadu_si256((const __m256i *)(w2 + i));
                __m256i k3 = _mm256_loadu_si256((const __m256i *)(w3 + i));
                a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(u, k0));
                a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(u, k1));
                a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(u, k2));
                a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(u, k3));
                b0 = _mm256_add_epi32(b0, _mm256_madd_epi16(v, k0));
                b1 = _mm256_add_epi32(b1, _mm256_madd_epi16(v, k1));
                b2 = _mm256_add_epi32(b2, _mm256_madd_epi16(v, k2));
                b3 = _mm256_add_epi32(b3, _mm256_madd_epi16(v, k3));
            }
            _mm_storeu_si128((__m128i *)(out0 + o), sum_lanes_4(a0, a1, a2, a3));
            _mm_storeu_si128((__m128i *)(out1 + o), sum_lanes_4(b0, b1, b2, b3));
        }
        for (; o < channels; o++) {
            const int16_t *wo = w + o * depth;
            __m256i a = _mm256_setzero_si256(), b = a;
            for (Py_ssize_t i = 0; i < depth; i += 16) {
                __m256i k = _mm256_loadu_si256((const __m256i *)(wo + i));
                a = _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(x0 + i)), k));
                b = _mm256_add_epi32(b, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(x1 + i)), k));
            }
            out0[o] = sum_lanes(a);
            out1[o] = sum_lanes(b);
        }
    }
    if (p < count) {
        const int16_t *x0 = rows + p * depth;
        int32_t *out0 = sums + p * channels;
        Py_ssize_t o = 0;
        for (; o + 4 <= channels; o += 4) {
            const int16_t *w0 = w + o * depth, *w1 = w0 + depth, *w2 = w1 + depth, *w3 = w2 + depth;
            __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
            for (Py_ssize_t i = 0; i < depth; i += 16) {
                __m256i u = _mm256_loadu_si256((const __m256i *)(x0 + i));
                a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(u, _mm256_loadu_si256((const __m256i *)(w0 + i))));
                a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(u, _mm256_loadu_si256((const __m256i *)(w1 + i))));
                a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(u, _mm256_loadu_si256((const __m256i *)(w2 + i))));
                a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(u, _mm256_loadu_si256((const __m256i *)(w3 + i))));
            }
            _mm_storeu_si128((__m128i *)(out0 + o), sum_lanes_4(a0, a1, a2, a3));
        }
        for (; o < channels; o++) {
            const int16_t *wo = w + o * depth;
            __m256i a = _mm256_setzero_si256();
            for (Py_ssize_t i = 0; i < depth; i += 16)
                a = _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(x0 + i)),
                                                          _mm256_loadu_si256((const __m256i *)(wo + i))));
            out0[o] = sum_lanes(a);
        }
    }
}

__attribute__((target("avx2")))
static void
widen_centered_avx2(const int8_t *src, int16_t *dst, Py_ssize_t count, int32_t zero_point)
{
    const __m256i zero_points = _mm256_set1_epi16((int16_t)zero_point);
    Py_ssize_t i = 0;
    for (; i + 16 <= count; i += 16) {
        __m256i wide = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_sub_epi16(wide, zero_points));
    }
    for (; i < count; i++)
        dst[i] = (int16_t)(src[i] - zero_point);
}
#endif

/* The loops the CPU runs: chosen at import (select_loops). */
static void (*dot_tile)(const int16_t *, Py_ssize_t, const int16_t *, Py_ssize_t, Py_ssize_t, int32_t *) =
    dot_tile_portable;
static void (*widen_centered)(const int8_t *, int16_t *, Py_ssize_t, int32_t) = widen_centered_portable;

/* ---- FullyConnected ---- */

typedef struct {
    PyObject_HEAD
    Py_ssize_t depth;     /* K: input features */
    Py_ssize_t channels;  /* N: output features */
    int16_t *weights;     /* [N, K] */
    int16_t *row;         /* [K]: one input row, widened */
    OutputStage output;
} FullyConnected;

static void
FullyConnected_dealloc(FullyConnected *self)
{
    PyMem_Free(self->weights);
    PyMem_Free(self->row);
    output_stage_free(&self->output);
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
    return output_stage_init(&self->output, self->channels, bias, multiplier, offset, tie_threshold, tie_step, shift,
                             output_zero_point, act_min, act_max);
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
        requantize_row(&self->output, sums, output + r * self->channels);
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

/* ---- the window a convolution or pool slides over an NHWC input ---- */

typedef struct {
    Py_ssize_t filter_h, filter_w, stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_left, out_h, out_w;
} Window;

/* window = (filter_h, filter_w, stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_left, out_h, out_w) */
static int
read_window(PyObject *tuple, Window *window)
{
    if (!PyArg_ParseTuple(tuple, "nnnnnnnnnn;window: (filter_h, filter_w, stride_h, stride_w, dilation_h, "
                          "dilation_w, pad_top, pad_left, out_h, out_w)", &window->filter_h, &window->filter_w,
                          &window->stride_h, &window->stride_w, &window->dilation_h, &window->dilation_w,
                          &window->pad_top, &window->pad_left, &window->out_h, &window->out_w))
        return -1;
    Py_ssize_t at_least_one[] = {window->filter_h, window->filter_w, window->stride_h, window->stride_w,
                                 window->dilation_h, window->dilation_w};
    Py_ssize_t at_least_zero[] = {window->pad_top, window->pad_left, window->out_h, window->out_w};
    for (int i = 0; i < 6; i++) {
        if (at_least_one[i] < 1 || at_least_one[i] > MAX_WINDOW_VALUE) {
            PyErr_Format(PyExc_ValueError, "window: filter sizes, strides and dilations must be in [1, %d]",
                         MAX_WINDOW_VALUE);
            return -1;
        }
    }
    for (int i = 0; i < 4; i++) {
        if (at_least_zero[i] < 0 || at_least_zero[i] > MAX_WINDOW_VALUE) {
            PyErr_Format(PyExc_ValueError, "window: padding and output sizes must be in [0, %d]", MAX_WINDOW_VALUE);
            return -1;
        }
    }
    return 0;
}

/* The output buffer of an NHWC result: batch x out_h x out_w x channels int8, writable, C-contiguous. */
static int
read_output(PyObject *obj, Py_buffer *view, const Window *window, Py_ssize_t batch, Py_ssize_t channels)
{
    Py_ssize_t positions = window->out_h * window->out_w;  /* each at most 2**30 */
    if ((batch && positions > PY_SSIZE_T_MAX / batch) ||
        (channels && batch * positions > PY_SSIZE_T_MAX / channels)) {
        PyErr_SetString(PyExc_ValueError, "out: the result would hold more values than memory can address");
        return -1;
    }
    return read_buffer(obj, view, 1, batch * positions * channels, "out (int8)", 1);
}

/* ---- Convolution: CONV_2D / arm_convolve_s8 ---- */

#define ROW_TILE_BYTES 16384  /* the im2col rows of one tile: a share of L1 */

typedef struct {
    PyObject_HEAD
    Window window;
    Py_ssize_t in_channels;
    Py_ssize_t depth;         /* K = filter_h * filter_w * in_channels, in (filter_y, filter_x, channel) order */
    Py_ssize_t padded_depth;  /* K rounded up to 16: whole vectors, the tail zero in weights and rows */
    Py_ssize_t tile;          /* output positions whose rows are gathered at once */
    int32_t input_zero_point;
    int16_t *weights;         /* [C_out, padded_depth] */
    int16_t *rows;            /* [tile, padded_depth]: q - zp_in per tap, 0 for a tap outside the input */
    int32_t *sums;            /* [tile, C_out] */
    OutputStage output;
} Convolution;

static void
Convolution_dealloc(Convolution *self)
{
    PyMem_Free(self->weights);
    PyMem_Free(self->rows);
    PyMem_Free(self->sums);
    output_stage_free(&self->output);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
Convolution_init(Convolution *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"weights", "in_channels", "window", "input_zero_point", "bias", "multiplier", "offset",
                               "tie_threshold", "tie_step", "shift", "output_zero_point", "act_min", "act_max", NULL};
    PyObject *weights, *window, *bias, *multiplier, *offset, *tie_threshold, *tie_step, *shift;
    Py_ssize_t in_channels;
    long long input_zero_point, output_zero_point, act_min, act_max;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OnOLOOOOOOLLL", keywords, &weights, &in_channels, &window,
                                     &input_zero_point, &bias, &multiplier, &offset, &tie_threshold, &tie_step, &shift,
                                     &output_zero_point, &act_min, &act_max))
        return -1;
    if (self->weights != NULL) {
        PyErr_SetString(PyExc_TypeError, "a Convolution is prepared once");
        return -1;
    }
    if (read_window(window, &self->window) < 0)
        return -1;
    if (input_zero_point < -128 || input_zero_point > 127) {
        PyErr_Format(PyExc_ValueError, "input_zero_point %lld is outside [-128, 127]", input_zero_point);
        return -1;
    }
    if (in_channels < 1 || self->window.filter_h * self->window.filter_w > MAX_CENTERED_DEPTH / in_channels) {
        PyErr_Format(PyExc_ValueError, "a %zdx%zd filter over %zd channels is outside a depth of [1, %d]",
                     self->window.filter_h, self->window.filter_w, in_channels, MAX_CENTERED_DEPTH);
        return -1;
    }
    self->in_channels = in_channels;
    self->input_zero_point = (int32_t)input_zero_point;
    self->depth = self->window.filter_h * self->window.filter_w * in_channels;
    self->padded_depth = (self->depth + 15) / 16 * 16;
    Py_buffer view;
    if (read_buffer(weights, &view, 1, -1, "weights (int8)", 0) < 0)
        return -1;
    if (view.len == 0 || view.len % self->depth != 0) {
        PyErr_Format(PyExc_ValueError, "weights: %zd bytes are not whole filters of %zd values", view.len,
                     self->depth);
        PyBuffer_Release(&view);
        return -1;
    }
    Py_ssize_t channels = view.len / self->depth;
    self->tile = ROW_TILE_BYTES / (Py_ssize_t)(self->padded_depth * sizeof(int16_t));
    self->tile = self->tile < 2 ? 2 : self->tile;
    self->weights = PyMem_Calloc(channels * self->padded_depth, sizeof(int16_t));
    self->rows = PyMem_Calloc(self->tile * self->padded_depth, sizeof(int16_t));
    self->sums = PyMem_Malloc(self->tile * channels * sizeof(int32_t));
    if (self->weights == NULL || self->rows == NULL || self->sums == NULL) {
        PyBuffer_Release(&view);
        PyErr_NoMemory();
        return -1;
    }
    const int8_t *source = view.buf;
    for (Py_ssize_t o = 0; o < channels; o++)
        for (Py_ssize_t i = 0; i < self->depth; i++)
            self->weights[o * self->padded_depth + i] = source[o * self->depth + i];
    PyBuffer_Release(&view);
    return output_stage_init(&self->output, channels, bias, multiplier, offset, tie_threshold, tie_step, shift,
                             output_zero_point, act_min, act_max);
}

/* The im2col row of output position (out_y, out_x) of image ``image``: q - zp_in for each tap, 0 outside. */
static void
gather_row(const Convolution *self, const int8_t *image, Py_ssize_t height, Py_ssize_t width, Py_ssize_t out_y,
           Py_ssize_t out_x, int16_t *row)
{
    const Window *w = &self->window;
    const Py_ssize_t channels = self->in_channels, span = w->filter_w * channels;
    const int32_t zero_point = self->input_zero_point;
    for (Py_ssize_t filter_y = 0; filter_y < w->filter_h; filter_y++, row += span) {
        Py_ssize_t in_y = out_y * w->stride_h - w->pad_top + filter_y * w->dilation_h;
        if (in_y < 0 || in_y >= height) {
            memset(row, 0, span * sizeof(int16_t));
            continue;
        }
        for (Py_ssize_t filter_x = 0; filter_x < w->filter_w; filter_x++) {
            Py_ssize_t in_x = out_x * w->stride_w - w->pad_left + filter_x * w->dilation_w;
            int16_t *tap = row + filter_x * channels;
            if (in_x < 0 || in_x >= width) {
                memset(tap, 0, channels * sizeof(int16_t));
                continue;
            }
            widen_centered(image + (in_y * width + in_x) * channels, tap, channels, zero_point);
        }
    }
}

/* run(x, out): x int8 [N, H, W, C_in] -> out int8 [N, out_h, out_w, C_out], both C-contiguous. */
static PyObject *
Convolution_run(Convolution *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "run(x, out) takes two buffers");
        return NULL;
    }
    Py_buffer x, out;
    if (read_nhwc(args[0], &x, self->in_channels, "x") < 0)
        return NULL;
    const Py_ssize_t batch = x.shape[0], height = x.shape[1], width = x.shape[2];
    const Py_ssize_t channels = self->output.channels, depth = self->padded_depth;
    if (read_output(args[1], &out, &self->window, batch, channels) < 0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    const Py_ssize_t positions = self->window.out_h * self->window.out_w;
    int8_t *output = out.buf;
    for (Py_ssize_t n = 0; n < batch; n++) {
        const int8_t *image = (const int8_t *)x.buf + n * height * width * self->in_channels;
        for (Py_ssize_t first = 0; first < positions; first += self->tile) {
            Py_ssize_t count = positions - first < self->tile ? positions - first : self->tile;
            for (Py_ssize_t p = 0; p < count; p++) {
                Py_ssize_t position = first + p;
                gather_row(self, image, height, width, position / self->window.out_w, position % self->window.out_w,
                           self->rows + p * depth);
            }
            dot_tile(self->rows, count, self->weights, depth, channels, self->sums);
            for (Py_ssize_t p = 0; p < count; p++)
                requantize_row(&self->output, self->sums + p * channels, output + p * channels);
            output += count * channels;
        }
    }
    PyBuffer_Release(&x);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

static PyMethodDef Convolution_methods[] = {
    {"run", (PyCFunction)(void (*)(void))Convolution_run, METH_FASTCALL,
     "run(x, out): int8 x [N, H, W, C_in] -> int8 out [N, out_h, out_w, C_out]"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ConvolutionType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "imxrt.kernels._native.Convolution",
    .tp_doc = "An int8 2-D convolution over NHWC, prepared: weights int8 [C_out, filter_h * filter_w * C_in] "
              "(OHWI), the window, the input zero point, int64 per-channel bias (not folded) and rounding constants.",
    .tp_basicsize = sizeof(Convolution),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Convolution_init,
    .tp_dealloc = (destructor)Convolution_dealloc,
    .tp_methods = Convolution_methods,
};

/* ---- DepthwiseConvolution: DEPTHWISE_CONV_2D / arm_depthwise_conv_s8 ---- */

typedef struct {
    PyObject_HEAD
    Window window;
    Py_ssize_t in_channels, depth_multiplier;
    int32_t input_zero_point;
    int32_t *weights;  /* [filter_h * filter_w, C_out] */
    int32_t *sums;     /* [C_out] */
    const int8_t **sources;   /* [filter_h * filter_w]: the input pixels of one output position's taps */
    const int32_t **filters;  /* [filter_h * filter_w]: and their weights */
    int8_t *repeated;  /* depth multiplier > 1: [filter_h * filter_w, C_out], each input value repeated */
    OutputStage output;
} DepthwiseConvolution;

static void
DepthwiseConvolution_dealloc(DepthwiseConvolution *self)
{
    PyMem_Free(self->weights);
    PyMem_Free(self->sums);
    PyMem_Free(self->sources);
    PyMem_Free(self->filters);
    PyMem_Free(self->repeated);
    output_stage_free(&self->output);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
DepthwiseConvolution_init(DepthwiseConvolution *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"weights", "depth_multiplier", "window", "input_zero_point", "bias", "multiplier",
                               "offset", "tie_threshold", "tie_step", "shift", "output_zero_point", "act_min",
                               "act_max", NULL};
    PyObject *weights, *window, *bias, *multiplier, *offset, *tie_threshold, *tie_step, *shift;
    Py_ssize_t depth_multiplier;
    long long input_zero_point, output_zero_point, act_min, act_max;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OnOLOOOOOOLLL", keywords, &weights, &depth_multiplier, &window,
                                     &input_zero_point, &bias, &multiplier, &offset, &tie_threshold, &tie_step, &shift,
                                     &output_zero_point, &act_min, &act_max))
        return -1;
    if (self->weights != NULL) {
        PyErr_SetString(PyExc_TypeError, "a DepthwiseConvolution is prepared once");
        return -1;
    }
    if (read_window(window, &self->window) < 0)
        return -1;
    if (input_zero_point < -128 || input_zero_point > 127) {
        PyErr_Format(PyExc_ValueError, "input_zero_point %lld is outside [-128, 127]", input_zero_point);
        return -1;
    }
    Py_ssize_t taps = self->window.filter_h * self->window.filter_w;
    if (self->window.filter_h > MAX_CENTERED_DEPTH || taps > MAX_CENTERED_DEPTH) {
        PyErr_Format(PyExc_ValueError, "a %zdx%zd filter has more than %d taps", self->window.filter_h,
                     self->window.filter_w, MAX_CENTERED_DEPTH);
        return -1;
    }
    Py_buffer view;
    if (read_buffer(weights, &view, 1, -1, "weights (int8)", 0) < 0)
        return -1;
    Py_ssize_t channels = view.len / taps;
    if (view.len == 0 || view.len % taps != 0 || depth_multiplier < 1 || channels % depth_multiplier != 0) {
        PyErr_Format(PyExc_ValueError, "weights: %zd bytes are not %zd taps of whole groups of depth multiplier %zd",
                     view.len, taps, depth_multiplier);
        PyBuffer_Release(&view);
        return -1;
    }
    self->depth_multiplier = depth_multiplier;
    self->in_channels = channels / depth_multiplier;
    self->input_zero_point = (int32_t)input_zero_point;
    self->weights = PyMem_Malloc(view.len * sizeof(int32_t));
    self->sums = PyMem_Malloc(channels * sizeof(int32_t));
    self->sources = PyMem_Malloc(taps * sizeof(int8_t *));
    self->filters = PyMem_Malloc(taps * sizeof(int32_t *));
    self->repeated = depth_multiplier > 1 ? PyMem_Malloc(view.len) : NULL;
    if (self->weights == NULL || self->sums == NULL || self->sources == NULL || self->filters == NULL ||
        (depth_multiplier > 1 && self->repeated == NULL)) {
        PyBuffer_Release(&view);
        PyErr_NoMemory();
        return -1;
    }
    const int8_t *source = view.buf;
    for (Py_ssize_t i = 0; i < view.len; i++)
        self->weights[i] = source[i];
    PyBuffer_Release(&view);
    return output_stage_init(&self->output, channels, bias, multiplier, offset, tie_threshold, tie_step, shift,
                             output_zero_point, act_min, act_max);
}

/* sums[c] = sum_t filters[t][c] * (sources[t][c] - zp) over the taps t < taps, for c < channels. */
static void
depthwise_sums_portable(const int8_t *const *sources, const int32_t *const *filters, Py_ssize_t taps,
                        int32_t zero_point, Py_ssize_t channels, int32_t *sums)
{
    memset(sums, 0, channels * sizeof(int32_t));
    for (Py_ssize_t t = 0; t < taps; t++) {
        const int8_t *q = sources[t];
        const int32_t *w = filters[t];
        for (Py_ssize_t c = 0; c < channels; c++)
            sums[c] += w[c] * ((int32_t)q[c] - zero_point);
    }
}

#ifdef IMXRT_AVX2
/* depthwise_sums_portable eight channels at a time, each block's sum kept in a register over the taps. */
__attribute__((target("avx2")))
static void
depthwise_sums_avx2(const int8_t *const *sources, const int32_t *const *filters, Py_ssize_t taps,
                    int32_t zero_point, Py_ssize_t channels, int32_t *sums)
{
    const __m256i zero_points = _mm256_set1_epi32(zero_point);
    Py_ssize_t c = 0;
    for (; c + 16 <= channels; c += 16) {
        __m256i a = _mm256_setzero_si256(), b = a;
        for (Py_ssize_t t = 0; t < taps; t++) {
            __m128i q = _mm_loadu_si128((const __m128i *)(sources[t] + c));
            __m256i low = _mm256_sub_epi32(_mm256_cvtepi8_epi32(q), zero_points);
            __m256i high = _mm256_sub_epi32(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)), zero_points);
            a = _mm256_add_epi32(a, _mm256_mullo_epi32(low, _mm256_loadu_si256((const __m256i *)(filters[t] + c))));
            b = _mm256_add_epi32(b, _mm256_mullo_epi32(high,
                                                       _mm256_loadu_si256((const __m256i *)(filters[t] + c + 8))));
        }
        _mm256_storeu_si256((__m256i *)(sums + c), a);
        _mm256_storeu_si256((__m256i *)(sums + c + 8), b);
    }
    for (; c + 8 <= channels; c += 8) {
        __m256i a = _mm256_setzero_si256();
        for (Py_ssize_t t = 0; t < taps; t++) {
            __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sources[t] + c)));
            a = _mm256_add_epi32(a, _mm256_mullo_epi32(_mm256_sub_epi32(q, zero_points),
                                                       _mm256_loadu_si256((const __m256i *)(filters[t] + c))));
        }
        _mm256_storeu_si256((__m256i *)(sums + c), a);
    }
    for (; c < channels; c++) {
        int32_t sum = 0;
        for (Py_ssize_t t = 0; t < taps; t++)
            sum += filters[t][c] * ((int32_t)sources[t][c] - zero_point);
        sums[c] = sum;
    }
}
#endif

static void (*depthwise_sums)(const int8_t *const *, const int32_t *const *, Py_ssize_t, int32_t, Py_ssize_t,
                              int32_t *) = depthwise_sums_portable;

/* run(x, out): x int8 [N, H, W, C_in] -> out int8 [N, out_h, out_w, C_in * depth_multiplier]. */
static PyObject *
DepthwiseConvolution_run(DepthwiseConvolution *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "run(x, out) takes two buffers");
        return NULL;
    }
    Py_buffer x, out;
    if (read_nhwc(args[0], &x, self->in_channels, "x") < 0)
        return NULL;
    const Window *w = &self->window;
    const Py_ssize_t batch = x.shape[0], height = x.shape[1], width = x.shape[2];
    const Py_ssize_t in_channels = self->in_channels, channels = self->output.channels;
    const Py_ssize_t multiplier = self->depth_multiplier;
    if (read_output(args[1], &out, w, batch, channels) < 0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    int8_t *output = out.buf;
    for (Py_ssize_t n = 0; n < batch; n++) {
        const int8_t *image = (const int8_t *)x.buf + n * height * width * in_channels;
        for (Py_ssize_t out_y = 0; out_y < w->out_h; out_y++) {
            for (Py_ssize_t out_x = 0; out_x < w->out_w; out_x++, output += channels) {
                Py_ssize_t taps = 0;  /* the taps inside the input: a tap outside adds nothing */
                for (Py_ssize_t filter_y = 0; filter_y < w->filter_h; filter_y++) {
                    Py_ssize_t in_y = out_y * w->stride_h - w->pad_top + filter_y * w->dilation_h;
                    if (in_y < 0 || in_y >= height)
                        continue;
                    for (Py_ssize_t filter_x = 0; filter_x < w->filter_w; filter_x++) {
                        Py_ssize_t in_x = out_x * w->stride_w - w->pad_left + filter_x * w->dilation_w;
                        if (in_x < 0 || in_x >= width)
                            continue;
                        const int8_t *pixel = image + (in_y * width + in_x) * in_channels;
                        if (multiplier > 1) {  /* output channel c reads input channel c / multiplier */
                            int8_t *repeated = self->repeated + taps * channels;
                            for (Py_ssize_t c = 0; c < in_channels; c++)
                                memset(repeated + c * multiplier, pixel[c], multiplier);
                            pixel = repeated;
                        }
                        self->sources[taps] = pixel;
                        self->filters[taps] = self->weights + (filter_y * w->filter_w + filter_x) * channels;
                        taps++;
                    }
                }
                depthwise_sums(self->sources, self->filters, taps, self->input_zero_point, channels, self->sums);
                requantize_row(&self->output, self->sums, output);
            }
        }
    }
    PyBuffer_Release(&x);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

static PyMethodDef DepthwiseConvolution_methods[] = {
    {"run", (PyCFunction)(void (*)(void))DepthwiseConvolution_run, METH_FASTCALL,
     "run(x, out): int8 x [N, H, W, C_in] -> int8 out [N, out_h, out_w, C_in * depth_multiplier]"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DepthwiseConvolutionType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "imxrt.kernels._native.DepthwiseConvolution",
    .tp_doc = "An int8 depthwise convolution over NHWC, prepared: weights int8 [filter_h, filter_w, C_out] "
              "(output channel c reads input channel c / depth_multiplier), the window, the input zero point, "
              "int64 per-channel bias (not folded) and rounding constants.",
    .tp_basicsize = sizeof(DepthwiseConvolution),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)DepthwiseConvolution_init,
    .tp_dealloc = (destructor)DepthwiseConvolution_dealloc,
    .tp_methods = DepthwiseConvolution_methods,
};

/* ---- Pool: AVERAGE_POOL_2D / MAX_POOL_2D, arm_avgpool_s8 / arm_max_pool_s8 ---- */

typedef struct {
    PyObject_HEAD
    Window window;
    int64_t act_min, act_max;
    int32_t *values;  /* [channels]: the sums or maxima of one output position */
    Py_ssize_t capacity;
} Pool;

static void
Pool_dealloc(Pool *self)
{
    PyMem_Free(self->values);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
Pool_init(Pool *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"window", "act_min", "act_max", NULL};
    PyObject *window;
    long long act_min, act_max;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OLL", keywords, &window, &act_min, &act_max))
        return -1;
    if (read_window(window, &self->window) < 0)
        return -1;
    if (self->window.filter_h > MAX_POOL_TAPS || self->window.filter_h * self->window.filter_w > MAX_POOL_TAPS) {
        PyErr_Format(PyExc_ValueError, "a %zdx%zd window has more than %d taps", self->window.filter_h,
                     self->window.filter_w, MAX_POOL_TAPS);
        return -1;
    }
    self->act_min = act_min;
    self->act_max = act_max;
    return 0;
}

IMXRT_CLONES
static void
add_tap(int32_t *sums, const int8_t *q, Py_ssize_t channels)
{
    for (Py_ssize_t c = 0; c < channels; c++)
        sums[c] += q[c];
}

IMXRT_CLONES
static void
max_tap(int32_t *maxima, const int8_t *q, Py_ssize_t channels)
{
    for (Py_ssize_t c = 0; c < channels; c++)
        maxima[c] = q[c] > maxima[c] ? q[c] : maxima[c];
}

/* The pool of x into out; ``average``: the rounded mean, else the largest value. */
static PyObject *
Pool_run(Pool *self, PyObject *const *args, Py_ssize_t nargs, int average)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "takes two buffers: (x, out)");
        return NULL;
    }
    Py_buffer x, out;
    if (read_nhwc(args[0], &x, -1, "x") < 0)
        return NULL;
    const Window *w = &self->window;
    const Py_ssize_t batch = x.shape[0], height = x.shape[1], width = x.shape[2], channels = x.shape[3];
    if (read_output(args[1], &out, w, batch, channels) < 0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    if (channels > self->capacity) {
        int32_t *values = PyMem_Realloc(self->values, (channels ? channels : 1) * sizeof(int32_t));
        if (values == NULL) {
            PyBuffer_Release(&x);
            PyBuffer_Release(&out);
            return PyErr_NoMemory();
        }
        self->values = values;
        self->capacity = channels;
    }
    int32_t *values = self->values;
    int8_t *output = out.buf;
    for (Py_ssize_t n = 0; n < batch; n++) {
        const int8_t *image = (const int8_t *)x.buf + n * height * width * channels;
        for (Py_ssize_t out_y = 0; out_y < w->out_h; out_y++) {
            for (Py_ssize_t out_x = 0; out_x < w->out_w; out_x++, output += channels) {
                for (Py_ssize_t c = 0; c < channels; c++)
                    values[c] = average ? 0 : -128;
                int32_t count = 0;
                for (Py_ssize_t filter_y = 0; filter_y < w->filter_h; filter_y++) {
                    Py_ssize_t in_y = out_y * w->stride_h - w->pad_top + filter_y * w->dilation_h;
                    if (in_y < 0 || in_y >= height)
                        continue;
                    for (Py_ssize_t filter_x = 0; filter_x < w->filter_w; filter_x++) {
                        Py_ssize_t in_x = out_x * w->stride_w - w->pad_left + filter_x * w->dilation_w;
                        if (in_x < 0 || in_x >= width)
                            continue;
                        const int8_t *pixel = image + (in_y * width + in_x) * channels;
                        if (average)
                            add_tap(values, pixel, channels);
                        else
                            max_tap(values, pixel, channels);
                        count++;
                    }
                }
                if (count == 0) {
                    PyBuffer_Release(&x);
                    PyBuffer_Release(&out);
                    PyErr_Format(PyExc_ValueError, "the window of output position (%zd, %zd) covers only padding",
                                 out_y, out_x);
                    return NULL;
                }
                for (Py_ssize_t c = 0; c < channels; c++) {
                    int64_t value = values[c];
                    if (average)  /* half away from zero, then C's truncating division */
                        value = (value > 0 ? value + count / 2 : value - count / 2) / count;
                    if (value < self->act_min)
                        value = self->act_min;
                    if (value > self->act_max)
                        value = self->act_max;
                    output[c] = (int8_t)value;
                }
            }
        }
    }
    PyBuffer_Release(&x);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

static PyObject *
Pool_average(Pool *self, PyObject *const *args, Py_ssize_t nargs)
{
    return Pool_run(self, args, nargs, 1);
}

static PyObject *
Pool_maximum(Pool *self, PyObject *const *args, Py_ssize_t nargs)
{
    return Pool_run(self, args, nargs, 0);
}

static PyMethodDef Pool_methods[] = {
    {"average", (PyCFunction)(void (*)(void))Pool_average, METH_FASTCALL,
     "average(x, out): the mean of each window's taps inside int8 x [N, H, W, C], rounded half away from zero"},
    {"maximum", (PyCFunction)(void (*)(void))Pool_maximum, METH_FASTCALL,
     "maximum(x, out): the largest of each window's taps inside int8 x [N, H, W, C]"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PoolType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "imxrt.kernels._native.Pool",
    .tp_doc = "An int8 pooling window over NHWC with its output clamp [act_min, act_max].",
    .tp_basicsize = sizeof(Pool),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Pool_init,
    .tp_dealloc = (destructor)Pool_dealloc,
    .tp_methods = Pool_methods,
};

/* ---- the module ---- */

static int
cpu_has_avx2(void)
{
#ifdef IMXRT_AVX2
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

/* The loops the kernels run: AVX2 intrinsics, or portable C (both give the same numbers). */
static int
select_loops(int avx2)
{
    dot_tile = dot_tile_portable;
    widen_centered = widen_centered_portable;
    requantize_row = requantize_row_portable;
    depthwise_sums = depthwise_sums_portable;
#ifdef IMXRT_AVX2
    if (avx2) {
        dot_tile = dot_tile_avx2;
        widen_centered = widen_centered_avx2;
        requantize_row = requantize_row_avx2;
        depthwise_sums = depthwise_sums_avx2;
    }
#endif
    return avx2;
}

static int loops_avx2;

static PyObject *
native_loops(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(args))
{
    return PyUnicode_FromString(loops_avx2 ? "avx2" : "portable");
}

static PyObject *
native_use_loops(PyObject *Py_UNUSED(module), PyObject *name)
{
    const char *chosen = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    if (chosen == NULL || (strcmp(chosen, "avx2") != 0 && strcmp(chosen, "portable") != 0)) {
        PyErr_SetString(PyExc_ValueError, "use_loops takes 'avx2' or 'portable'");
        return NULL;
    }
    int avx2 = strcmp(chosen, "avx2") == 0;
    if (avx2 && !cpu_has_avx2()) {
        PyErr_SetString(PyExc_ValueError, "this CPU (or this build) has no AVX2 loops");
        return NULL;
    }
    loops_avx2 = select_loops(avx2);
    Py_RETURN_NONE;
}

static PyMethodDef native_functions[] = {
    {"loops", native_loops, METH_NOARGS, "loops(): the inner loops the kernels run, 'avx2' or 'portable'"},
    {"use_loops", native_use_loops, METH_O,
     "use_loops(name): run the 'avx2' (where the CPU has it) or the 'portable' loops; the numbers are the same"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "imxrt.kernels._native",
    .m_doc = "int8 kernels in C where numpy's per-call cost or float arithmetic dominates (see _native.c).",
    .m_size = -1,
    .m_methods = native_functions,
};

static int
add_type(PyObject *module, PyTypeObject *type, const char *name)
{
    if (PyType_Ready(type) < 0)
        return -1;
    Py_INCREF(type);
    if (PyModule_AddObject(module, name, (PyObject *)type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC
PyInit__native(void)
{
    loops_avx2 = select_loops(cpu_has_avx2());
    PyObject *module = PyModule_Create(&native_module);
    if (module == NULL)
        return NULL;
    if (add_type(module, &FullyConnectedType, "FullyConnected") < 0 ||
        add_type(module, &ConvolutionType, "Convolution") < 0 ||
        add_type(module, &DepthwiseConvolutionType, "DepthwiseConvolution") < 0 ||
        add_type(module, &PoolType, "Pool") < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
