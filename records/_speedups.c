/* stratalog.records._speedups: the per-record loops of the v2 record codec, in C.
 *
 * Intuition: a batch of 1000 records spends almost all of its pure-Python time in three loops
 * (records/record.py: decode_records, walk_records, encode_record): a handful of varints, two
 * slices and one object per record. This module runs the same loops in C, line for line, so
 * that a record costs tens of nanoseconds instead of a microsecond. Batch framing, CRCs and
 * compression stay in Python (they already run in C libraries).
 *
 * The record layout (details in records/record.py):
 *
 *     length varint | attributes int8 | timestamp_delta varlong | offset_delta varint
 *     | key_length varint (-1 = null) | key | value_length varint (-1 = null) | value
 *     | header_count varint | header_count x (key_length varint, key, value_length varint, value)
 *
 * Contract with the pure-Python reference (records/record.py), checked by
 * tests/unit/records/test_accel.py over random, truncated and corrupted input:
 *
 *   - the same results for valid input (records compare equal; keys and values are bytes);
 *   - the same exception class (stratalog.records.errors.CorruptRecordError) with the same
 *     message for invalid input. The reading order is deliberately the reference's, including
 *     its quirks (a one- or two-byte varint running past the region end is "missing" or
 *     "truncated" record; a longer one reports the varint reader's own message), because the
 *     message names what the reference names;
 *   - every read is checked against the end of the region first: no input makes this code read
 *     outside the buffer it was given, and no allocation is proportional to a declared count.
 *
 * Records are created exactly as the reference creates them: object.__new__(Record) and the
 * five slots filled (the reference goes through the slot descriptors, this code writes the slot
 * pointers whose offsets it reads from those descriptors at import, after checking them).
 *
 * Every function keeps no state between calls other than the classes it imported at module
 * initialisation, so it is as thread-safe as the reference. They hold the GIL for their whole
 * run except where they say otherwise: walk_records's first pass over a large region and the
 * log cleaner's offset map functions at the end (which also hash keys: key_digest), whose loops
 * touch only exported buffers.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <string.h>

#ifndef Py_T_OBJECT_EX
#define Py_T_OBJECT_EX T_OBJECT_EX
#endif
#ifndef Py_READONLY
#define Py_READONLY READONLY
#endif

#define MAX_VARINT_SIZE 5
#define MAX_VARLONG_SIZE 10
#define INT32_MAX_VALUE 2147483647LL
#define INT32_MIN_VALUE (-2147483647LL - 1)

/* Classes imported once at module initialisation (strong references, never released: the
 * module is never unloaded). */
static PyObject *CorruptRecordError;
static PyTypeObject *RecordType;
static PyObject *RecordsWalkType;
static PyObject *RecordsSpanType;
static PyObject *EmptyTuple;

/* Byte offsets of Record's five slots inside a Record object. */
static Py_ssize_t slot_offset, slot_timestamp, slot_key, slot_value, slot_headers;

#define SET_SLOT(obj, slot, value) (*(PyObject **)((char *)(obj) + (slot)) = (value))

/* ------------------------------------------------------------------------------------------ */
/* Reading: a cursor over one records region and the reference's error messages.               */

typedef struct {
    const uint8_t *data;
    Py_ssize_t end;      /* length of the region; every read checks position < end first */
    Py_ssize_t position; /* next byte to read */
    Py_ssize_t index;    /* the record being read */
    Py_ssize_t start;    /* its position */
    long long count;     /* records the batch declares */
} Cursor;

/* A cursor at the start of the region in view, which declares count records. */
static inline Cursor
cursor_over(const Py_buffer *view, long long count)
{
    return (Cursor){
        .data = (const uint8_t *)view->buf,
        .end = view->len,
        .position = 0,
        .index = 0,
        .start = 0,
        .count = count,
    };
}

/* CorruptRecordError("record {index} (at records position {start}): {what}"). Returns -1. */
static int
corrupt(const Cursor *c, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    PyObject *what = PyUnicode_FromFormatV(format, args);
    va_end(args);
    if (what != NULL) {
        PyErr_Format(CorruptRecordError, "record %zd (at records position %zd): %U",
                     c->index, c->start, what);
        Py_DECREF(what);
    }
    return -1;
}

/* The reference's error for a one- or two-byte read past the end of the region (an IndexError
 * there, translated by its _ran_out). Returns -1. */
static int
ran_out(const Cursor *c)
{
    if (c->start >= c->end) {
        return corrupt(c,
                       "missing: the batch declares %lld records but its %zd bytes of records "
                       "end after %zd",
                       c->count, c->end, c->index);
    }
    return corrupt(c, "truncated: the records region ends at %zd", c->end);
}

/* varint.read_varint / read_varlong: LEB128 of up to max_size bytes, bits beyond 32 (64)
 * dropped, then zig-zag decoded. Errors carry varint.py's messages, unprefixed, as there. */
static int __attribute__((noinline))
read_varint_full(Cursor *c, int max_size, int64_t *value)
{
    const char *what = max_size == MAX_VARINT_SIZE ? "varint" : "varlong";
    Py_ssize_t position = c->position;
    uint64_t raw = 0;
    int shift = 0;
    for (Py_ssize_t i = position; i < position + max_size; i++) {
        if (i >= c->end) {
            PyErr_Format(CorruptRecordError,
                         "%s at position %zd is truncated: the buffer ends at %zd after %zd of "
                         "its bytes",
                         what, position, c->end, i - position);
            return -1;
        }
        uint8_t byte = c->data[i];
        raw |= (uint64_t)(byte & 0x7F) << shift; /* shift <= 63: bits past 64 are dropped */
        if (byte < 0x80) {
            if (max_size == MAX_VARINT_SIZE) {
                raw &= 0xFFFFFFFFu;
            }
            *value = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            c->position = i + 1;
            return 0;
        }
        shift += 7;
    }
    PyErr_Format(CorruptRecordError,
                 "%s at position %zd is too long: byte %d still has its continuation bit set "
                 "(at most %d bytes)",
                 what, position, max_size, max_size);
    return -1;
}

/* read_field near the end of the region: every byte read is checked against it. One- and
 * two-byte varints inline (a read past the end is ran_out, as the reference's IndexError),
 * longer ones through read_varint_full. */
static int __attribute__((noinline))
read_field_checked(Cursor *c, int max_size, int64_t *value)
{
    Py_ssize_t p = c->position;
    if (p >= c->end) {
        return ran_out(c);
    }
    uint8_t b = c->data[p];
    if (b < 0x80) {
        *value = (int64_t)(b >> 1) ^ -(int64_t)(b & 1);
        c->position = p + 1;
        return 0;
    }
    if (p + 1 >= c->end) {
        return ran_out(c);
    }
    uint8_t b2 = c->data[p + 1];
    if (b2 < 0x80) {
        uint32_t raw = (uint32_t)(b & 0x7F) | ((uint32_t)b2 << 7);
        *value = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
        c->position = p + 2;
        return 0;
    }
    return read_varint_full(c, max_size, value);
}

/* A record field as the reference's hot loops read it, with read_field_checked's results and
 * errors. Away from the end of the region (three bytes left at least) the first three bytes
 * need no bounds check, so one- to three-byte varints (three: offset and timestamp deltas from
 * 8,192 to 1,048,575, most records of a large batch; 21 bits need no 32-bit mask) are decoded
 * inline; a fourth byte goes to read_varint_full. A walk of 1 MiB of 100-byte records took 247
 * instructions a record before (callgrind), with this function not inlined. */
static inline __attribute__((always_inline)) int
read_field(Cursor *restrict c, int max_size, int64_t *restrict value)
{
    Py_ssize_t p = c->position;
    if (p + 3 > c->end) {
        return read_field_checked(c, max_size, value);
    }
    const uint8_t *d = c->data + p;
    uint32_t raw = d[0];
    if (raw < 0x80) {
        c->position = p + 1;
    }
    else if (d[1] < 0x80) {
        raw = (raw & 0x7F) | ((uint32_t)d[1] << 7);
        c->position = p + 2;
    }
    else if (d[2] < 0x80) {
        raw = (raw & 0x7F) | ((uint32_t)(d[1] & 0x7F) << 7) | ((uint32_t)d[2] << 14);
        c->position = p + 3;
    }
    else {
        return read_varint_full(c, max_size, value);
    }
    *value = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 0;
}

/* What one record holds, as positions in the region; filled by read_record. */
typedef struct {
    int64_t timestamp_delta;
    int64_t offset_delta;
    Py_ssize_t key_position; /* key_size -1: null key */
    int64_t key_size;
    Py_ssize_t value_position; /* value_size -1: null value */
    int64_t value_size;
} Fields;

/* record._read_headers: the headers block at the cursor (its count included). With headers not
 * NULL, *headers receives the new tuple of (str, bytes | None) pairs; otherwise the block is only
 * checked (header keys are not decoded: decoding with "replace" never fails). */
static int
read_headers(Cursor *c, Py_ssize_t record_end, PyObject **headers)
{
    int64_t count;
    if (read_varint_full(c, MAX_VARINT_SIZE, &count) < 0) {
        return -1;
    }
    if (count < 0 || count > record_end - c->position) {
        /* Each header takes at least two bytes, so a count above the bytes left is impossible;
         * the tuple below is therefore bounded by the region's size. */
        return corrupt(c, "invalid header count %lld with %zd bytes left", (long long)count,
                       record_end - c->position);
    }
    PyObject *tuple = NULL;
    if (headers != NULL) {
        tuple = PyTuple_New((Py_ssize_t)count);
        if (tuple == NULL) {
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        int64_t key_size, value_size;
        if (read_varint_full(c, MAX_VARINT_SIZE, &key_size) < 0) {
            goto error;
        }
        if (key_size < 0 || key_size > record_end - c->position) {
            corrupt(c, "invalid header key length %lld", (long long)key_size);
            goto error;
        }
        Py_ssize_t key_position = c->position;
        c->position += (Py_ssize_t)key_size;
        if (read_varint_full(c, MAX_VARINT_SIZE, &value_size) < 0) {
            goto error;
        }
        Py_ssize_t value_position = c->position;
        if (value_size < 0) {
            if (value_size != -1) {
                corrupt(c, "invalid header value length %lld", (long long)value_size);
                goto error;
            }
        }
        else {
            if (value_size > record_end - c->position) {
                corrupt(c, "header value length %lld runs past record", (long long)value_size);
                goto error;
            }
            c->position += (Py_ssize_t)value_size;
        }
        if (tuple != NULL) {
            PyObject *key = PyUnicode_DecodeUTF8((const char *)c->data + key_position,
                                                 (Py_ssize_t)key_size, "replace");
            if (key == NULL) {
                goto error;
            }
            PyObject *value;
            if (value_size < 0) {
                value = Py_NewRef(Py_None);
            }
            else {
                value = PyBytes_FromStringAndSize((const char *)c->data + value_position,
                                                  (Py_ssize_t)value_size);
                if (value == NULL) {
                    Py_DECREF(key);
                    goto error;
                }
            }
            PyObject *pair = PyTuple_Pack(2, key, value);
            Py_DECREF(key);
            Py_DECREF(value);
            if (pair == NULL) {
                goto error;
            }
            PyTuple_SET_ITEM(tuple, i, pair);
        }
    }
    if (headers != NULL) {
        *headers = tuple;
    }
    return 0;
error:
    Py_XDECREF(tuple); /* unfilled items are NULL, which tuple deallocation skips */
    return -1;
}

/* One record at the cursor, in the reference's reading order, with its checks. The cursor
 * ends after the record. *headers receives the headers tuple (a new reference, or a new
 * reference to the empty tuple) when headers is not NULL. */
static int
read_record(Cursor *restrict c, Fields *restrict f, PyObject **headers)
{
    int64_t size;
    c->start = c->position;
    if (read_field(c, MAX_VARINT_SIZE, &size) < 0) {
        return -1;
    }
    /* size is an int32 and position <= end, so the sum cannot overflow. */
    Py_ssize_t record_end = c->position + (Py_ssize_t)size;
    if (size < 0 || record_end > c->end) {
        return corrupt(c, "length %lld but %zd bytes remain in the batch", (long long)size,
                       c->end - c->position);
    }
    c->position += 1; /* attributes: unused, ignored as Kafka does */
    if (read_field(c, MAX_VARLONG_SIZE, &f->timestamp_delta) < 0 ||
        read_field(c, MAX_VARINT_SIZE, &f->offset_delta) < 0 ||
        read_field(c, MAX_VARINT_SIZE, &f->key_size) < 0) {
        return -1;
    }
    f->key_position = c->position;
    if (f->key_size < 0) {
        if (f->key_size != -1) {
            return corrupt(c, "invalid key length %lld", (long long)f->key_size);
        }
    }
    else {
        if (f->key_size > record_end - c->position) {
            return corrupt(c, "key length %lld runs past the record", (long long)f->key_size);
        }
        c->position += (Py_ssize_t)f->key_size;
    }
    if (read_field(c, MAX_VARINT_SIZE, &f->value_size) < 0) {
        return -1;
    }
    f->value_position = c->position;
    if (f->value_size < 0) {
        if (f->value_size != -1) {
            return corrupt(c, "invalid value length %lld", (long long)f->value_size);
        }
    }
    else {
        if (f->value_size > record_end - c->position) {
            return corrupt(c, "value length %lld runs past the record",
                           (long long)f->value_size);
        }
        c->position += (Py_ssize_t)f->value_size;
    }
    if (c->position >= c->end) {
        return ran_out(c);
    }
    if (c->data[c->position] == 0) { /* no headers: the common case */
        c->position += 1;
        if (headers != NULL) {
            *headers = Py_NewRef(EmptyTuple);
        }
    }
    else if (read_headers(c, record_end, headers) < 0) {
        return -1;
    }
    if (c->position != record_end) {
        if (headers != NULL) {
            Py_CLEAR(*headers);
        }
        return corrupt(c, "consumed %zd bytes but its length field says %zd",
                       c->position - c->start, record_end - c->start);
    }
    return 0;
}

/* The common record read fast: every field inside the record, varints of one to three bytes,
 * no headers. Returns 1 with *f filled and the cursor after the record, exactly what
 * read_record(c, f, NULL) would give; 0, with the cursor untouched, for anything else (a longer
 * varint, headers, a field past the record, every malformed record), which read_record then
 * reads with its checks and errors. Bounds come from the record's own end, so once the size is
 * read nothing is checked against the region again; the values are read as read_field reads
 * them, so a record this accepts decodes to the same fields. */
#define PLAIN_VARINT(q, limit, out)                                                            \
    do {                                                                                       \
        if ((limit) - (q) < 3) {                                                               \
            return 0;                                                                          \
        }                                                                                      \
        uint32_t raw_ = (q)[0];                                                                \
        if (raw_ < 0x80) {                                                                     \
            (q) += 1;                                                                          \
        }                                                                                      \
        else if ((q)[1] < 0x80) {                                                              \
            raw_ = (raw_ & 0x7F) | ((uint32_t)(q)[1] << 7);                                    \
            (q) += 2;                                                                          \
        }                                                                                      \
        else if ((q)[2] < 0x80) {                                                              \
            raw_ = (raw_ & 0x7F) | ((uint32_t)((q)[1] & 0x7F) << 7) | ((uint32_t)(q)[2] << 14); \
            (q) += 3;                                                                          \
        }                                                                                      \
        else {                                                                                 \
            return 0;                                                                          \
        }                                                                                      \
        (out) = (int64_t)(raw_ >> 1) ^ -(int64_t)(raw_ & 1);                                   \
    } while (0)

static inline __attribute__((always_inline)) int
read_plain_record(Cursor *restrict c, Fields *restrict f)
{
    const uint8_t *start = c->data + c->position;
    const uint8_t *q = start;
    int64_t size;
    PLAIN_VARINT(q, c->data + c->end, size);
    /* The smallest record: attributes, four one-byte varints, no headers. */
    if (size < 6 || size > (c->data + c->end) - q) {
        return 0;
    }
    const uint8_t *record_end = q + size;
    q += 1; /* attributes: unused, ignored as Kafka does */
    PLAIN_VARINT(q, record_end, f->timestamp_delta);
    PLAIN_VARINT(q, record_end, f->offset_delta);
    PLAIN_VARINT(q, record_end, f->key_size);
    f->key_position = q - c->data;
    if (f->key_size >= 0) {
        if (f->key_size > record_end - q) {
            return 0;
        }
        q += f->key_size;
    }
    else if (f->key_size != -1) {
        return 0;
    }
    PLAIN_VARINT(q, record_end, f->value_size);
    f->value_position = q - c->data;
    if (f->value_size >= 0) {
        if (f->value_size > record_end - q) {
            return 0;
        }
        q += f->value_size;
    }
    else if (f->value_size != -1) {
        return 0;
    }
    /* No headers (a count of zero) ends the record exactly. */
    if (record_end - q != 1 || *q != 0) {
        return 0;
    }
    c->start = c->position;
    c->position = record_end - c->data;
    return 1;
}

#undef PLAIN_VARINT

/* The reference's check after the last record. */
static int
check_region_consumed(const Cursor *c)
{
    if (c->position != c->end) {
        PyErr_Format(CorruptRecordError,
                     "incorrect declared batch size: %zd bytes remain after the %lld declared "
                     "records (records region of %zd bytes)",
                     c->end - c->position, c->count, c->end);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Argument parsing for METH_FASTCALL | METH_KEYWORDS: positional or keyword, like the         */
/* reference's signatures.                                                                      */

static int
parse_args(const char *function, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
           const char *const *names, Py_ssize_t required, Py_ssize_t total, PyObject **out)
{
    if (nargs > total) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %zd arguments (%zd given)", function,
                     total, nargs);
        return -1;
    }
    if (kwnames == NULL && nargs >= required) { /* the common call: positional only */
        for (Py_ssize_t i = 0; i < total; i++) {
            out[i] = i < nargs ? args[i] : NULL;
        }
        return 0;
    }
    for (Py_ssize_t i = 0; i < total; i++) {
        out[i] = i < nargs ? args[i] : NULL;
    }
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t i = 0;
        while (i < total && PyUnicode_CompareWithASCIIString(name, names[i]) != 0) {
            i++;
        }
        if (i == total) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'",
                         function, name);
            return -1;
        }
        if (out[i] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", function,
                         names[i]);
            return -1;
        }
        out[i] = args[nargs + k];
    }
    for (Py_ssize_t i = 0; i < required; i++) {
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", function,
                         names[i]);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Decoding.                                                                                    */

/* base + delta as a Python int: int64 arithmetic when base fits and the sum does not overflow,
 * Python arithmetic otherwise (the reference adds Python ints, which never overflow). */
static PyObject *
add_delta(PyObject *base, int base_fits, long long base_value, int64_t delta)
{
    long long sum;
    if (base_fits && !__builtin_add_overflow(base_value, (long long)delta, &sum)) {
        return PyLong_FromLongLong(sum);
    }
    PyObject *delta_object = PyLong_FromLongLong((long long)delta);
    if (delta_object == NULL) {
        return NULL;
    }
    PyObject *sum_object = PyNumber_Add(base, delta_object);
    Py_DECREF(delta_object);
    return sum_object;
}

static int
as_int64(PyObject *value, long long *out)
{
    int overflow = 0;
    *out = 0;
    if (!PyLong_Check(value)) {
        return 0;
    }
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *out = v;
    return overflow == 0;
}

static PyObject *
bytes_or_none(const Cursor *c, Py_ssize_t position, int64_t size)
{
    if (size < 0) {
        return Py_NewRef(Py_None);
    }
    return PyBytes_FromStringAndSize((const char *)c->data + position, (Py_ssize_t)size);
}

/* What decode_records and decode_columns share: their arguments, parsed. */
typedef struct {
    Py_buffer view;
    PyObject *base_offset;
    PyObject *base_timestamp;
    PyObject *timestamp_override; /* NULL: CreateTime */
    long long base_offset_value, base_timestamp_value;
    int base_offset_fits, base_timestamp_fits;
    Cursor cursor;
} DecodeArgs;

static const char *const decode_names[] = {
    "data", "count", "base_offset", "base_timestamp", "timestamp_override",
};

static int
parse_decode_args(const char *function, PyObject *const *args, Py_ssize_t nargs,
                  PyObject *kwnames, DecodeArgs *a)
{
    PyObject *values[5];
    if (parse_args(function, args, nargs, kwnames, decode_names, 4, 5, values) < 0) {
        return -1;
    }
    long long count = PyLong_AsLongLong(values[1]);
    if (count == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (PyObject_GetBuffer(values[0], &a->view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    a->base_offset = values[2];
    a->base_timestamp = values[3];
    a->timestamp_override = values[4] == Py_None ? NULL : values[4];
    a->base_offset_fits = as_int64(values[2], &a->base_offset_value);
    a->base_timestamp_fits = as_int64(values[3], &a->base_timestamp_value);
    a->cursor = cursor_over(&a->view, count);
    return 0;
}

/* The offset and timestamp objects of the record just read. */
static int
record_numbers(const DecodeArgs *a, const Fields *f, PyObject **offset, PyObject **timestamp)
{
    *offset = add_delta(a->base_offset, a->base_offset_fits, a->base_offset_value,
                        f->offset_delta);
    if (*offset == NULL) {
        return -1;
    }
    if (a->timestamp_override != NULL) {
        *timestamp = Py_NewRef(a->timestamp_override);
    }
    else {
        *timestamp = add_delta(a->base_timestamp, a->base_timestamp_fits,
                               a->base_timestamp_value, f->timestamp_delta);
    }
    if (*timestamp == NULL) {
        Py_CLEAR(*offset);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(decode_records_doc,
"decode_records(data, count, base_offset, base_timestamp, timestamp_override=None)\n"
"--\n\n"
"Decode exactly ``count`` records filling all of ``data`` (any buffer); a list of Record.\n\n"
"Same results and CorruptRecordError messages as stratalog.records.record.decode_records.");

static PyObject *
decode_records(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    DecodeArgs a;
    if (parse_decode_args("decode_records", args, nargs, kwnames, &a) < 0) {
        return NULL;
    }
    Cursor *c = &a.cursor;
    PyObject *records = PyList_New(0);
    if (records == NULL) {
        goto error;
    }
    for (c->index = 0; c->index < c->count; c->index++) {
        Fields f;
        PyObject *headers, *offset, *timestamp, *key, *value;
        if (read_record(c, &f, &headers) < 0) {
            goto error;
        }
        if (record_numbers(&a, &f, &offset, &timestamp) < 0) {
            Py_DECREF(headers);
            goto error;
        }
        key = bytes_or_none(c, f.key_position, f.key_size);
        value = key == NULL ? NULL : bytes_or_none(c, f.value_position, f.value_size);
        PyObject *record = value == NULL ? NULL : RecordType->tp_alloc(RecordType, 0);
        if (record == NULL) {
            Py_XDECREF(key);
            Py_XDECREF(value);
            Py_DECREF(offset);
            Py_DECREF(timestamp);
            Py_DECREF(headers);
            goto error;
        }
        /* The record holds ints, bytes, None and a tuple of (str, bytes | None) pairs, none
         * of which can refer back to it: it can never be part of a reference cycle, so the
         * cycle collector need not track it (CPython untracks such tuples and dicts the same
         * way). Tracked, it makes every gen-0 collection during a decode traverse the batch:
         * half the cost of decode_records. */
        PyObject_GC_UnTrack(record);
        /* A fresh object's slots are NULL; each takes over one reference. */
        SET_SLOT(record, slot_offset, offset);
        SET_SLOT(record, slot_timestamp, timestamp);
        SET_SLOT(record, slot_key, key);
        SET_SLOT(record, slot_value, value);
        SET_SLOT(record, slot_headers, headers);
        int appended = PyList_Append(records, record);
        Py_DECREF(record);
        if (appended < 0) {
            goto error;
        }
    }
    if (check_region_consumed(c) < 0) {
        goto error;
    }
    PyBuffer_Release(&a.view);
    return records;
error:
    Py_XDECREF(records);
    PyBuffer_Release(&a.view);
    return NULL;
}

PyDoc_STRVAR(decode_columns_doc,
"decode_columns(data, count, base_offset, base_timestamp, timestamp_override=None)\n"
"--\n\n"
"Decode like decode_records, into five lists: (offsets, timestamps, keys, values, headers).");

static PyObject *
decode_columns(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    DecodeArgs a;
    if (parse_decode_args("decode_columns", args, nargs, kwnames, &a) < 0) {
        return NULL;
    }
    Cursor *c = &a.cursor;
    PyObject *columns[5] = {NULL, NULL, NULL, NULL, NULL};
    for (int i = 0; i < 5; i++) {
        if ((columns[i] = PyList_New(0)) == NULL) {
            goto error;
        }
    }
    for (c->index = 0; c->index < c->count; c->index++) {
        Fields f;
        PyObject *fields[5] = {NULL, NULL, NULL, NULL, NULL};
        if (read_record(c, &f, &fields[4]) < 0) {
            goto error;
        }
        int failed = record_numbers(&a, &f, &fields[0], &fields[1]) < 0 ||
                     (fields[2] = bytes_or_none(c, f.key_position, f.key_size)) == NULL ||
                     (fields[3] = bytes_or_none(c, f.value_position, f.value_size)) == NULL;
        for (int i = 0; i < 5; i++) {
            if (!failed && PyList_Append(columns[i], fields[i]) < 0) {
                failed = 1;
            }
            Py_XDECREF(fields[i]);
        }
        if (failed) {
            goto error;
        }
    }
    if (check_region_consumed(c) < 0) {
        goto error;
    }
    PyBuffer_Release(&a.view);
    PyObject *result = PyTuple_Pack(5, columns[0], columns[1], columns[2], columns[3],
                                    columns[4]);
    for (int i = 0; i < 5; i++) {
        Py_DECREF(columns[i]);
    }
    return result;
error:
    for (int i = 0; i < 5; i++) {
        Py_XDECREF(columns[i]);
    }
    PyBuffer_Release(&a.view);
    return NULL;
}

static int int_argument(PyObject *value, const char *what, const char *range, long long *out);

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "decode_arrow writes Arrow's little-endian buffers with native stores"
#endif

/* One binary column (keys or values) being filled in Arrow's layout: a validity bitmap (bit i
 * set: record i present; least significant bit first), int32 offsets (n + 1 of them) and the
 * bytes. Every buffer is a bytes object sized for the most records and bytes the region can
 * hold, shrunk at the end. */
typedef struct {
    PyObject *validity, *offsets, *data;
    Py_ssize_t nulls, data_size;
} BinaryColumn;

static int
binary_column_init(BinaryColumn *column, Py_ssize_t capacity, Py_ssize_t data_capacity)
{
    column->nulls = 0;
    column->data_size = 0;
    column->validity = PyBytes_FromStringAndSize(NULL, (capacity + 7) / 8);
    column->offsets = PyBytes_FromStringAndSize(NULL, (capacity + 1) * 4);
    column->data = PyBytes_FromStringAndSize(NULL, data_capacity);
    if (column->validity == NULL || column->offsets == NULL || column->data == NULL) {
        return -1;
    }
    memset(PyBytes_AS_STRING(column->validity), 0, (size_t)((capacity + 7) / 8));
    memset(PyBytes_AS_STRING(column->offsets), 0, 4);
    return 0;
}

static void
binary_column_clear(BinaryColumn *column)
{
    Py_CLEAR(column->validity);
    Py_CLEAR(column->offsets);
    Py_CLEAR(column->data);
}

/* Record i's field: size -1 (null) or size bytes at source. */
static inline void
binary_column_put(BinaryColumn *column, Py_ssize_t i, const uint8_t *source, int64_t size)
{
    if (size < 0) {
        column->nulls++;
    }
    else {
        ((uint8_t *)PyBytes_AS_STRING(column->validity))[i >> 3] |= (uint8_t)(1u << (i & 7));
        memcpy(PyBytes_AS_STRING(column->data) + column->data_size, source, (size_t)size);
        column->data_size += (Py_ssize_t)size;
    }
    int32_t end = (int32_t)column->data_size;
    memcpy(PyBytes_AS_STRING(column->offsets) + (i + 1) * 4, &end, 4);
}

/* Shrink to n records; the validity bitmap becomes None when nothing is null. */
static int
binary_column_finish(BinaryColumn *column, Py_ssize_t n)
{
    if (_PyBytes_Resize(&column->validity, (n + 7) / 8) < 0 ||
        _PyBytes_Resize(&column->offsets, (n + 1) * 4) < 0 ||
        _PyBytes_Resize(&column->data, column->data_size) < 0) {
        return -1;
    }
    if (column->nulls == 0) {
        Py_SETREF(column->validity, Py_NewRef(Py_None));
    }
    return 0;
}

PyDoc_STRVAR(decode_arrow_doc,
"decode_arrow(data, count, base_offset, base_timestamp, timestamp_override=None,\n"
"             from_offset=None, until_offset=None, with_headers=False)\n"
"--\n\n"
"Decode like decode_columns, straight into Arrow's buffer layout, keeping only the records\n"
"with from_offset <= offset < until_offset (None: no bound). Returns (n, offsets, timestamps,\n"
"key_validity, key_nulls, key_offsets, key_data, value_validity, value_nulls, value_offsets,\n"
"value_data, headers): offsets and timestamps are n little-endian int64s, each binary column\n"
"a validity bitmap (None: no nulls), its null count, n + 1 int32 offsets and the bytes;\n"
"headers is the list of header tuples with with_headers, else None. Every record is checked\n"
"as decode_columns checks it; an offset outside int64 is a CorruptRecordError, a timestamp\n"
"outside int64 (base + delta) is wrapped to 64 bits, as Kafka's Java reader adds them.");

static const char *const decode_arrow_names[] = {
    "data", "count", "base_offset", "base_timestamp", "timestamp_override",
    "from_offset", "until_offset", "with_headers",
};

static int
optional_int64(PyObject *object, long long fallback, long long *out)
{
    if (object == NULL || object == Py_None) {
        *out = fallback;
        return 0;
    }
    return int_argument(object, "offset", "int64", out);
}

static PyObject *
decode_arrow(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames)
{
    PyObject *v[8];
    if (parse_args("decode_arrow", args, nargs, kwnames, decode_arrow_names, 4, 8, v) < 0) {
        return NULL;
    }
    long long count, base_offset, base_timestamp, override = 0, from_offset, until_offset;
    int with_headers = v[7] == NULL ? 0 : PyObject_IsTrue(v[7]);
    if (with_headers < 0 || int_argument(v[1], "count", "int64", &count) < 0 ||
        int_argument(v[2], "base_offset", "int64", &base_offset) < 0 ||
        int_argument(v[3], "base_timestamp", "int64", &base_timestamp) < 0 ||
        optional_int64(v[5], INT64_MIN, &from_offset) < 0 ||
        optional_int64(v[6], INT64_MAX, &until_offset) < 0) {
        return NULL;
    }
    int has_override = v[4] != NULL && v[4] != Py_None;
    if (has_override && !PyLong_Check(v[4])) {
        PyErr_Format(PyExc_TypeError, "timestamp_override must be an int or None, not %.100s",
                     Py_TYPE(v[4])->tp_name);
        return NULL;
    }
    if (has_override) {
        /* Its low 64 bits: a timestamp outside int64 is wrapped, as every record's is below. */
        unsigned long long low_bits = PyLong_AsUnsignedLongLongMask(v[4]);
        if (low_bits == (unsigned long long)-1 && PyErr_Occurred()) {
            return NULL;
        }
        override = (long long)low_bits;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(v[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    Cursor c = cursor_over(&view, count);
    /* A record takes at least 7 bytes, so no more than this many can be read before the
     * region runs out (a larger declared count fails then): the buffers are bounded by the
     * region's size, whatever the count says. */
    Py_ssize_t capacity = count < 0 ? 0 : (count < view.len / 7 + 1 ? (Py_ssize_t)count
                                                                     : view.len / 7 + 1);
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, capacity * 8);
    PyObject *timestamps = PyBytes_FromStringAndSize(NULL, capacity * 8);
    PyObject *headers = with_headers ? PyList_New(0) : Py_NewRef(Py_None);
    BinaryColumn keys = {0}, values = {0};
    PyObject *result = NULL;
    if (offsets == NULL || timestamps == NULL || headers == NULL ||
        binary_column_init(&keys, capacity, view.len) < 0 ||
        binary_column_init(&values, capacity, view.len) < 0) {
        goto done;
    }
    int64_t *offset_out = (int64_t *)PyBytes_AS_STRING(offsets);
    int64_t *timestamp_out = (int64_t *)PyBytes_AS_STRING(timestamps);
    Py_ssize_t n = 0, first_outside = -1;
    for (c.index = 0; c.index < c.count; c.index++) {
        Fields f;
        PyObject *record_headers = NULL;
        if (!(!with_headers && read_plain_record(&c, &f)) &&
            read_record(&c, &f, with_headers ? &record_headers : NULL) < 0) {
            goto done;
        }
        long long offset, timestamp = override;
        if (!has_override) {
            /* Java's long addition (DefaultRecord.readFrom): wraps past int64's ends. In
             * unsigned arithmetic, where wrapping is defined; the conversion back is two's
             * complement on every compiler this builds with. */
            timestamp = (long long)((unsigned long long)base_timestamp +
                                    (unsigned long long)f.timestamp_delta);
        }
        if (__builtin_add_overflow(base_offset, (long long)f.offset_delta, &offset)) {
            /* Reported after the walk: an error in the bytes of a later record comes first,
             * as in the reference, which decodes everything before it looks at the sums. */
            if (first_outside < 0) {
                first_outside = c.index;
            }
            Py_XDECREF(record_headers);
            continue;
        }
        if (offset < from_offset || offset >= until_offset) {
            Py_XDECREF(record_headers);
            continue;
        }
        if (n >= capacity) { /* cannot happen (see capacity); a guard, not a code path */
            Py_XDECREF(record_headers);
            corrupt(&c, "more records than %zd bytes can hold", view.len);
            goto done;
        }
        offset_out[n] = offset;
        timestamp_out[n] = timestamp;
        binary_column_put(&keys, n, c.data + f.key_position, f.key_size);
        binary_column_put(&values, n, c.data + f.value_position, f.value_size);
        if (with_headers) {
            int appended = PyList_Append(headers, record_headers);
            Py_DECREF(record_headers);
            if (appended < 0) {
                goto done;
            }
        }
        n++;
    }
    if (check_region_consumed(&c) < 0) {
        goto done;
    }
    if (first_outside >= 0) {
        PyErr_Format(CorruptRecordError,
                     "record %zd: its offset is outside int64 (base offset %lld)",
                     first_outside, base_offset);
        goto done;
    }
    if (_PyBytes_Resize(&offsets, n * 8) < 0 ||
        _PyBytes_Resize(&timestamps, n * 8) < 0 || binary_column_finish(&keys, n) < 0 ||
        binary_column_finish(&values, n) < 0) {
        goto done;
    }
    result = Py_BuildValue("(nOOOnOOOnOOO)", n, offsets, timestamps, keys.validity, keys.nulls,
                           keys.offsets, keys.data, values.validity, values.nulls,
                           values.offsets, values.data, headers);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(timestamps);
    Py_XDECREF(headers);
    binary_column_clear(&keys);
    binary_column_clear(&values);
    PyBuffer_Release(&view);
    return result;
}

/* What walk_records learns, record by record. */
typedef struct {
    int64_t min_ts, max_ts, offset_of_max, first_offset_delta, offset_delta;
    int has_null_key, contiguous;
} Walk;

static inline void
walk_start(Walk *w)
{
    *w = (Walk){.offset_of_max = -1, .first_offset_delta = -1, .offset_delta = -1,
                .contiguous = 1};
}

static inline void
walk_note(Walk *w, const Fields *f, Py_ssize_t index)
{
    w->offset_delta = f->offset_delta;
    if (f->offset_delta != index) {
        w->contiguous = 0;
    }
    if (index == 0) {
        w->min_ts = w->max_ts = f->timestamp_delta;
        w->offset_of_max = w->first_offset_delta = f->offset_delta;
    }
    else if (f->timestamp_delta > w->max_ts) {
        w->max_ts = f->timestamp_delta;
        w->offset_of_max = f->offset_delta;
    }
    else if (f->timestamp_delta < w->min_ts) {
        w->min_ts = f->timestamp_delta;
    }
    if (f->key_size < 0) {
        w->has_null_key = 1;
    }
}

/* Regions at least this large are first walked without the GIL. */
#define WALK_WITHOUT_GIL_MIN_BYTES (64 * 1024)

/* The walk of a region of plain records only (read_plain_record), calling no Python API, so
 * that it can run without the GIL. Returns 1 when every declared record was plain and they
 * fill the region exactly (then *w is what the checked walk would give), 0 otherwise. */
static int
walk_plain_region(Cursor *c, Walk *w)
{
    walk_start(w);
    for (c->index = 0; c->index < c->count; c->index++) {
        Fields f;
        if (!read_plain_record(c, &f)) {
            return 0;
        }
        walk_note(w, &f, c->index);
    }
    return c->position == c->end;
}

PyDoc_STRVAR(walk_records_doc,
"walk_records(data, count)\n"
"--\n\n"
"Check the structure of ``count`` records filling ``data`` without building them; a\n"
"RecordsWalk. Same results and errors as stratalog.records.record.walk_records.");

static const char *const walk_names[] = {"data", "count"};

static PyObject *
walk_records(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *values[2];
    if (parse_args("walk_records", args, nargs, kwnames, walk_names, 2, 2, values) < 0) {
        return NULL;
    }
    long long count = PyLong_AsLongLong(values[1]);
    if (count == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(values[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    Walk w;
    Cursor c = cursor_over(&view, count);
    int walked = 0;
    if (view.len >= WALK_WITHOUT_GIL_MIN_BYTES) {
        /* A large region is first walked with the GIL released (the server's appends validate
         * a MiB per request: other threads run meanwhile). That pass takes plain records only
         * and raises nothing; any other region is walked again below, with the GIL, by the
         * path that reads every record and reports errors. The buffer export keeps the memory
         * alive; a bytearray cannot be resized while exported. */
        Py_BEGIN_ALLOW_THREADS
        walked = walk_plain_region(&c, &w);
        Py_END_ALLOW_THREADS
        if (!walked) {
            c = cursor_over(&view, count);
        }
    }
    if (!walked) {
        walk_start(&w);
        for (c.index = 0; c.index < c.count; c.index++) {
            Fields f;
            if (!read_plain_record(&c, &f) && read_record(&c, &f, NULL) < 0) {
                PyBuffer_Release(&view);
                return NULL;
            }
            walk_note(&w, &f, c.index);
        }
        if (check_region_consumed(&c) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    PyBuffer_Release(&view);
    return PyObject_CallFunction(RecordsWalkType, "OLLLLLOO", values[1],
                                 (long long)w.first_offset_delta, (long long)w.min_ts,
                                 (long long)w.max_ts, (long long)w.offset_of_max,
                                 (long long)w.offset_delta, w.has_null_key ? Py_True : Py_False,
                                 w.contiguous ? Py_True : Py_False);
}

/* ------------------------------------------------------------------------------------------ */
/* Finding records: record.find_records, the framing walk of a point read.                     */

/* One framing field for find_records: one- to three-byte varints inline when three bytes are
 * left, anything else through read_varint_full (its message, prefixed with the record's). */
static inline __attribute__((always_inline)) int
span_field(Cursor *restrict c, int max_size, Py_ssize_t record_end, int64_t *restrict value)
{
    Py_ssize_t p = c->position;
    const uint8_t *d = c->data + p;
    int done = 0;
    if (p >= 0 && p + 3 <= c->end) {
        uint32_t raw = d[0];
        done = 1;
        if (raw < 0x80) {
            c->position = p + 1;
        }
        else if (d[1] < 0x80) {
            raw = (raw & 0x7F) | ((uint32_t)d[1] << 7);
            c->position = p + 2;
        }
        else if (d[2] < 0x80) {
            raw = (raw & 0x7F) | ((uint32_t)(d[1] & 0x7F) << 7) | ((uint32_t)d[2] << 14);
            c->position = p + 3;
        }
        else {
            done = 0;
        }
        if (done) {
            *value = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
        }
    }
    if (!done && read_varint_full(c, max_size, value) < 0) {
        PyObject *type, *message, *traceback;
        PyErr_Fetch(&type, &message, &traceback);
        PyErr_NormalizeException(&type, &message, &traceback);
        if (message != NULL) {
            corrupt(c, "%S", message);
        }
        Py_XDECREF(type);
        Py_XDECREF(message);
        Py_XDECREF(traceback);
        return -1;
    }
    if (c->position > record_end) {
        return corrupt(c, "its framing runs past its length");
    }
    return 0;
}

PyDoc_STRVAR(find_records_doc,
"find_records(data, count, from_offset_delta, max_records, max_bytes,\n"
"             from_timestamp_delta=-2**63)\n"
"--\n\n"
"The span of the records a read from from_offset_delta takes; a RecordsSpan. Same results\n"
"and errors as stratalog.records.record.find_records.");

static const char *const find_names[] = {"data", "count", "from_offset_delta", "max_records",
                                         "max_bytes", "from_timestamp_delta"};

static PyObject *
find_records(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *values[6];
    if (parse_args("find_records", args, nargs, kwnames, find_names, 5, 6, values) < 0) {
        return NULL;
    }
    long long numbers[5] = {0, 0, 0, 0, LLONG_MIN};
    for (int i = 0; i < 5; i++) {
        if (values[i + 1] == NULL) {
            continue;
        }
        numbers[i] = PyLong_AsLongLong(values[i + 1]);
        if (numbers[i] == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    long long count = numbers[0], from_delta = numbers[1], max_records = numbers[2],
              max_bytes = numbers[3], from_ts_delta = numbers[4];
    if (max_records < 1 || max_bytes < 0) {
        PyErr_Format(PyExc_ValueError,
                     "max_records must be >= 1 and max_bytes >= 0, got %lld, %lld",
                     max_records, max_bytes);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(values[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    Cursor c = cursor_over(&view, count);
    long long taken = 0;
    int64_t first_delta = -1, last_delta = -1, max_ts = 0;
    Py_ssize_t span_start = 0, span_end = 0;
    int through_last = 1;
    for (c.index = 0; c.index < count; c.index++) {
        c.start = c.position;
        if (c.position >= c.end) {
            corrupt(&c, "missing: the batch declares %lld records but its %zd bytes of records "
                        "end after %zd", count, c.end, c.index);
            goto error;
        }
        int64_t size, timestamp_delta, offset_delta;
        if (span_field(&c, MAX_VARINT_SIZE, c.end, &size) < 0) {
            goto error;
        }
        if (size < 0 || size > c.end - c.position) {
            corrupt(&c, "length %lld but %zd bytes remain in the batch", (long long)size,
                    c.end - c.position);
            goto error;
        }
        Py_ssize_t record_end = c.position + (Py_ssize_t)size;
        c.position += 1; /* attributes */
        if (span_field(&c, MAX_VARLONG_SIZE, record_end, &timestamp_delta) < 0 ||
            span_field(&c, MAX_VARINT_SIZE, record_end, &offset_delta) < 0) {
            goto error;
        }
        c.position = record_end;
        if (taken == 0 && (offset_delta < from_delta || timestamp_delta < from_ts_delta)) {
            continue;
        }
        if (taken == 0) {
            span_start = c.start;
            first_delta = offset_delta;
            max_ts = timestamp_delta;
        }
        else if (record_end - span_start > max_bytes) {
            span_end = c.start;
            through_last = 0;
            break;
        }
        else if (timestamp_delta > max_ts) {
            max_ts = timestamp_delta;
        }
        taken++;
        last_delta = offset_delta;
        span_end = record_end;
        if (taken == max_records && c.index + 1 < count) {
            through_last = 0;
            break;
        }
    }
    if (through_last) {
        if (check_region_consumed(&c) < 0) {
            goto error;
        }
        if (taken == 0) {
            span_start = span_end = c.end;
        }
    }
    PyBuffer_Release(&view);
    return PyObject_CallFunction(RecordsSpanType, "nnLLLLO", span_start, span_end, taken,
                                 (long long)first_delta, (long long)last_delta,
                                 (long long)max_ts, through_last ? Py_True : Py_False);
error:
    PyBuffer_Release(&view);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding.                                                                                    */

/* Zig-zag LEB128: the encoding of varint.varint_bytes / varlong_bytes (equal for int32). */
static inline int
varint_size(int64_t value)
{
    uint64_t raw = value < 0 ? ~((uint64_t)value << 1) : (uint64_t)value << 1;
    int size = 1;
    while (raw > 0x7F) {
        raw >>= 7;
        size++;
    }
    return size;
}

static inline uint8_t *
write_varint(uint8_t *out, int64_t value)
{
    uint64_t raw = value < 0 ? ~((uint64_t)value << 1) : (uint64_t)value << 1;
    while (raw > 0x7F) {
        *out++ = (uint8_t)((raw & 0x7F) | 0x80);
        raw >>= 7;
    }
    *out++ = (uint8_t)raw;
    return out;
}

/* varint.varint_bytes's ValueError for a value outside int32. */
static int
check_int32(long long value)
{
    if (value < INT32_MIN_VALUE || value > INT32_MAX_VALUE) {
        PyErr_Format(PyExc_ValueError, "varint value %lld is outside int32", value);
        return -1;
    }
    return 0;
}

/* An int64 argument; varint.py's ValueError when it does not fit. */
static int
int_argument(PyObject *value, const char *what, const char *range, long long *out)
{
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (*out == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow != 0) {
        PyErr_Format(PyExc_ValueError, "%s value %S is outside %s", what, value, range);
        return -1;
    }
    return 0;
}

/* A key, value or header value: None (null) or a buffer, held in *view while encoding. */
typedef struct {
    Py_buffer view;
    int present;
} Blob;

static int
get_blob(PyObject *object, Blob *blob)
{
    blob->present = 0;
    if (object == Py_None) {
        return 0;
    }
    if (PyObject_GetBuffer(object, &blob->view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    blob->present = 1;
    if (check_int32(blob->view.len) < 0) {
        PyBuffer_Release(&blob->view);
        blob->present = 0;
        return -1;
    }
    return 0;
}

static void
release_blob(Blob *blob)
{
    if (blob->present) {
        PyBuffer_Release(&blob->view);
        blob->present = 0;
    }
}

static Py_ssize_t
blob_size(const Blob *blob)
{
    return blob->present ? varint_size(blob->view.len) + blob->view.len : 1;
}

static uint8_t *
write_blob(uint8_t *out, const Blob *blob)
{
    if (!blob->present) {
        *out++ = 0x01; /* varint -1: null */
        return out;
    }
    out = write_varint(out, blob->view.len);
    if (blob->view.len > 0) {
        memcpy(out, blob->view.buf, (size_t)blob->view.len);
    }
    return out + blob->view.len;
}

/* One header while encoding: its UTF-8 key (owned by the str) and its value. */
typedef struct {
    const char *key;
    Py_ssize_t key_size;
    Blob value;
} HeaderField;

/* Resize the bytearray out to size_bytes. PyByteArray_Resize over-allocates by only 1/8 when it
 * grows, so a batch built record by record would be copied about 8 times over in reallocations;
 * growing to 1.5x first and shrinking back (which only moves the end marker while at least
 * half of the allocation stays used) makes that about 3 times. */
static int
resize_for_append(PyObject *out, Py_ssize_t size_bytes)
{
    if (size_bytes >= ((PyByteArrayObject *)out)->ob_alloc &&
        size_bytes <= PY_SSIZE_T_MAX / 3 * 2) {
        if (PyByteArray_Resize(out, size_bytes + size_bytes / 2) < 0) {
            if (!PyErr_ExceptionMatches(PyExc_MemoryError)) {
                return -1; /* BufferError: the bytearray is exported */
            }
            PyErr_Clear(); /* the exact size may still fit */
        }
    }
    return PyByteArray_Resize(out, size_bytes);
}

/* Append one record to the bytearray out: record.encode_record from its offset delta on (the
 * deltas already in range). Returns the bytes appended, or -1 with an exception set and out
 * unchanged. headers may be NULL (none). */
static Py_ssize_t
encode_into(PyObject *out, long long offset_delta, long long timestamp_delta, PyObject *key_object,
            PyObject *value_object, PyObject *headers_object)
{
    Blob key, value;
    HeaderField *headers = NULL;
    PyObject *header_items = NULL; /* PySequence_Fast of the headers */
    Py_ssize_t header_count = 0, headers_filled = 0, result = -1;
    value.present = 0;
    /* The reference's order of checks: (timestamp, offset by the caller), key, value, headers. */
    if (check_int32(offset_delta) < 0 || get_blob(key_object, &key) < 0) {
        return -1;
    }
    if (get_blob(value_object, &value) < 0) {
        goto done;
    }
    Py_ssize_t body_size = 1 + varint_size(timestamp_delta) + varint_size(offset_delta) +
                           blob_size(&key) + blob_size(&value);
    int has_headers = headers_object == NULL ? 0 : PyObject_IsTrue(headers_object);
    if (has_headers < 0) {
        goto done;
    }
    if (has_headers) {
        header_items = PySequence_Fast(headers_object, "headers must be a sequence");
        if (header_items == NULL) {
            goto done;
        }
        header_count = PySequence_Fast_GET_SIZE(header_items);
        if (check_int32(header_count) < 0) {
            goto done;
        }
        headers = PyMem_Calloc((size_t)header_count, sizeof(HeaderField));
        if (headers == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        body_size += varint_size(header_count);
        for (Py_ssize_t i = 0; i < header_count; i++) {
            PyObject *pair = PySequence_Fast(PySequence_Fast_GET_ITEM(header_items, i),
                                             "a header must be a (key, value) pair");
            if (pair == NULL) {
                goto done;
            }
            if (PySequence_Fast_GET_SIZE(pair) != 2) {
                PyErr_Format(PyExc_ValueError,
                             "a header must be a (key, value) pair, not %zd items",
                             PySequence_Fast_GET_SIZE(pair));
                Py_DECREF(pair);
                goto done;
            }
            PyObject *header_key = PySequence_Fast_GET_ITEM(pair, 0);
            PyObject *header_value = PySequence_Fast_GET_ITEM(pair, 1);
            HeaderField *h = &headers[i];
            if (!PyUnicode_Check(header_key)) {
                PyErr_Format(PyExc_TypeError, "a header key must be a str, not %.100s",
                             Py_TYPE(header_key)->tp_name);
                Py_DECREF(pair);
                goto done;
            }
            /* The UTF-8 form is cached in the str, which header_items keeps alive. */
            h->key = PyUnicode_AsUTF8AndSize(header_key, &h->key_size);
            if (h->key == NULL || check_int32(h->key_size) < 0 ||
                get_blob(header_value, &h->value) < 0) {
                Py_DECREF(pair);
                goto done;
            }
            Py_DECREF(pair); /* the items stay alive in header_items */
            headers_filled = i + 1;
            body_size += varint_size(h->key_size) + h->key_size + blob_size(&h->value);
        }
    }
    else {
        body_size += 1; /* header count 0 */
    }
    if (check_int32(body_size) < 0) {
        goto done;
    }
    Py_ssize_t total = varint_size(body_size) + body_size;
    Py_ssize_t old_size = PyByteArray_GET_SIZE(out);
    if (total > PY_SSIZE_T_MAX - old_size) {
        PyErr_NoMemory();
        goto done;
    }
    if (resize_for_append(out, old_size + total) < 0) {
        goto done;
    }
    uint8_t *p = (uint8_t *)PyByteArray_AS_STRING(out) + old_size;
    p = write_varint(p, body_size);
    *p++ = 0; /* attributes */
    p = write_varint(p, timestamp_delta);
    p = write_varint(p, offset_delta);
    p = write_blob(p, &key);
    p = write_blob(p, &value);
    if (has_headers) {
        p = write_varint(p, header_count);
        for (Py_ssize_t i = 0; i < header_count; i++) {
            p = write_varint(p, headers[i].key_size);
            if (headers[i].key_size > 0) {
                memcpy(p, headers[i].key, (size_t)headers[i].key_size);
            }
            p += headers[i].key_size;
            p = write_blob(p, &headers[i].value);
        }
    }
    else {
        *p++ = 0;
    }
    result = total;
done:
    release_blob(&key);
    release_blob(&value);
    for (Py_ssize_t i = 0; i < headers_filled; i++) {
        release_blob(&headers[i].value);
    }
    PyMem_Free(headers);
    Py_XDECREF(header_items);
    return result;
}

PyDoc_STRVAR(encode_record_doc,
"encode_record(out, offset_delta, timestamp_delta, key, value, headers=())\n"
"--\n\n"
"Append one encoded record to the bytearray ``out``; return the number of bytes appended.\n\n"
"Same bytes and errors (ValueError, UnicodeEncodeError; ``out`` untouched then) as\n"
"stratalog.records.record.encode_record.");

static const char *const encode_names[] = {
    "out", "offset_delta", "timestamp_delta", "key", "value", "headers",
};

static PyObject *
encode_record(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs,
              PyObject *kwnames)
{
    PyObject *values[6];
    if (parse_args("encode_record", args, nargs, kwnames, encode_names, 5, 6, values) < 0) {
        return NULL;
    }
    PyObject *out = values[0];
    if (!PyByteArray_Check(out)) {
        PyErr_Format(PyExc_TypeError, "encode_record() needs a bytearray to append to, not %.100s",
                     Py_TYPE(out)->tp_name);
        return NULL;
    }
    long long timestamp_delta, offset_delta;
    if (int_argument(values[2], "varlong", "int64", &timestamp_delta) < 0 ||
        int_argument(values[1], "varint", "int32", &offset_delta) < 0) {
        return NULL;
    }
    Py_ssize_t written =
        encode_into(out, offset_delta, timestamp_delta, values[3], values[4], values[5]);
    return written < 0 ? NULL : PyLong_FromSsize_t(written);
}

/* ------------------------------------------------------------------------------------------ */
/* RecordsWriter: a records region being built, the state of a BatchBuilder.                    */

typedef struct {
    PyObject_HEAD
    PyObject *records; /* bytearray; NULL until __init__ */
    Py_ssize_t count;
    long long base_timestamp;
    long long max_timestamp;
} RecordsWriter;

static int
writer_init(RecordsWriter *self, PyObject *args, PyObject *kwds)
{
    static char *no_arguments[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":RecordsWriter", no_arguments)) {
        return -1;
    }
    PyObject *records = PyByteArray_FromStringAndSize(NULL, 0);
    if (records == NULL) {
        return -1;
    }
    Py_XSETREF(self->records, records);
    self->count = 0;
    self->base_timestamp = 0;
    self->max_timestamp = 0;
    return 0;
}

static void
writer_dealloc(RecordsWriter *self)
{
    Py_XDECREF(self->records);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The timestamp argument of append/append_values, after checking the writer was initialised. */
static int
writer_timestamp(RecordsWriter *self, PyObject *object, long long *timestamp)
{
    if (self->records == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "RecordsWriter.__init__() was not called");
        return -1;
    }
    int overflow = 0;
    *timestamp = PyLong_AsLongLongAndOverflow(object, &overflow);
    if (*timestamp == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow != 0) {
        PyErr_Format(PyExc_ValueError, "timestamp %S is outside int64", object);
        return -1;
    }
    return 0;
}

/* The delta of timestamp (given as object) from the writer's first timestamp (from itself
 * when the writer is empty), or the reference's error when it leaves int64. */
static int
writer_timestamp_delta(RecordsWriter *self, PyObject *object, long long timestamp,
                       long long *delta)
{
    long long base_timestamp = self->count == 0 ? timestamp : self->base_timestamp;
    if (!__builtin_sub_overflow(timestamp, base_timestamp, delta)) {
        return 0;
    }
    /* The reference subtracts Python ints and encode_record refuses the result. */
    PyObject *base = PyLong_FromLongLong(base_timestamp);
    PyObject *difference = base == NULL ? NULL : PyNumber_Subtract(object, base);
    if (difference != NULL) {
        PyErr_Format(PyExc_ValueError, "varlong value %S is outside int64", difference);
    }
    Py_XDECREF(base);
    Py_XDECREF(difference);
    return -1;
}

static const char *const append_names[] = {"timestamp", "key", "value", "headers"};

PyDoc_STRVAR(writer_append_doc,
"append(timestamp, key, value, headers=())\n"
"--\n\n"
"Encode one record at the next offset delta and return that delta (see BatchBuilder.append).");

static PyObject *
writer_append(RecordsWriter *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *values[4];
    if (parse_args("append", args, nargs, kwnames, append_names, 3, 4, values) < 0) {
        return NULL;
    }
    long long timestamp, timestamp_delta;
    if (writer_timestamp(self, values[0], &timestamp) < 0 ||
        writer_timestamp_delta(self, values[0], timestamp, &timestamp_delta) < 0) {
        return NULL;
    }
    Py_ssize_t count = self->count;
    /* encode_into changes nothing on error, so neither does append. */
    if (encode_into(self->records, count, timestamp_delta, values[1], values[2], values[3]) < 0) {
        return NULL;
    }
    if (count == 0) {
        self->base_timestamp = self->max_timestamp = timestamp;
    }
    else if (timestamp > self->max_timestamp) {
        self->max_timestamp = timestamp;
    }
    self->count = count + 1;
    return PyLong_FromSsize_t(count);
}

static const char *const append_values_names[] = {"timestamp", "values", "start", "max_bytes"};

PyDoc_STRVAR(writer_append_values_doc,
"append_values(timestamp, values, start=0, max_bytes=None)\n"
"--\n\n"
"Append values[start:] as records stamped ``timestamp`` with a null key and no headers, in\n"
"order, while the records region grows by at most ``max_bytes`` in all (None: no limit).\n"
"Return (stop, bytes_added): stop is the index of the first value not appended. The same\n"
"records as append() once per value; all or nothing on error (see PyRecordsWriter).");

/* The body size (after the length varint) of a record with a null key, no headers and a value of
 * value_size bytes (-1: null) at the given deltas: attributes, deltas, key, value, header count. */
static Py_ssize_t
value_record_body_size(long long timestamp_delta, long long offset_delta, Py_ssize_t value_size)
{
    return 1 + varint_size(timestamp_delta) + varint_size(offset_delta) + 1 +
           (value_size < 0 ? 1 : varint_size(value_size) + value_size) + 1;
}

static PyObject *
writer_append_values(RecordsWriter *self, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames)
{
    PyObject *a[4];
    if (parse_args("append_values", args, nargs, kwnames, append_values_names, 2, 4, a) < 0) {
        return NULL;
    }
    long long timestamp;
    if (writer_timestamp(self, a[0], &timestamp) < 0) {
        return NULL;
    }
    PyObject *values = a[1];
    if (!PyList_Check(values) && !PyTuple_Check(values)) {
        PyErr_Format(PyExc_TypeError, "values must be a list or tuple, not %.100s",
                     Py_TYPE(values)->tp_name);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(values);
    Py_ssize_t start = 0, max_bytes = PY_SSIZE_T_MAX;
    if (a[2] != NULL && a[2] != Py_None) {
        start = PyLong_AsSsize_t(a[2]);
        if (start == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (start < 0 || start > n) {
            PyErr_Format(PyExc_ValueError, "start %zd is outside [0, %zd]", start, n);
            return NULL;
        }
    }
    if (a[3] != NULL && a[3] != Py_None) {
        max_bytes = PyLong_AsSsize_t(a[3]);
        if (max_bytes == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (max_bytes < 0) {
            PyErr_Format(PyExc_ValueError, "max_bytes must not be negative, got %zd", max_bytes);
            return NULL;
        }
    }
    Py_ssize_t count = self->count;
    long long timestamp_delta;
    if (writer_timestamp_delta(self, a[0], timestamp, &timestamp_delta) < 0) {
        return NULL;
    }
    /* Pass 1: check every value and find where the budget ends. Only bytes and None are
     * accepted, so no Python code runs until the writes are done and the list cannot change
     * under the second pass. */
    PyObject **items = PySequence_Fast_ITEMS(values);
    Py_ssize_t added = 0, stop = start;
    for (; stop < n; stop++) {
        PyObject *value = items[stop];
        Py_ssize_t value_size = -1;
        if (value != Py_None) {
            if (!PyBytes_Check(value)) {
                PyErr_Format(PyExc_TypeError, "values[%zd] must be bytes or None, not %.100s",
                             stop, Py_TYPE(value)->tp_name);
                return NULL;
            }
            value_size = PyBytes_GET_SIZE(value);
            if (check_int32(value_size) < 0) {
                return NULL;
            }
        }
        long long offset_delta = (long long)count + (stop - start);
        if (check_int32(offset_delta) < 0) {
            return NULL;
        }
        Py_ssize_t body_size = value_record_body_size(timestamp_delta, offset_delta, value_size);
        Py_ssize_t size = varint_size(body_size) + body_size;
        if (size > max_bytes - added) {
            break;
        }
        added += size;
    }
    if (stop == start) {
        return Py_BuildValue("(nn)", stop, (Py_ssize_t)0);
    }
    PyObject *out = self->records;
    Py_ssize_t old_size = PyByteArray_GET_SIZE(out);
    if (added > PY_SSIZE_T_MAX - old_size) {
        return PyErr_NoMemory();
    }
    if (resize_for_append(out, old_size + added) < 0) {
        return NULL;
    }
    /* Pass 2: write. */
    uint8_t *p = (uint8_t *)PyByteArray_AS_STRING(out) + old_size;
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *value = items[i];
        Py_ssize_t value_size = value == Py_None ? -1 : PyBytes_GET_SIZE(value);
        long long offset_delta = (long long)count + (i - start);
        p = write_varint(p, value_record_body_size(timestamp_delta, offset_delta, value_size));
        *p++ = 0; /* attributes */
        p = write_varint(p, timestamp_delta);
        p = write_varint(p, offset_delta);
        *p++ = 0x01; /* key: varint -1, null */
        if (value_size < 0) {
            *p++ = 0x01;
        }
        else {
            p = write_varint(p, value_size);
            if (value_size > 0) {
                memcpy(p, PyBytes_AS_STRING(value), (size_t)value_size);
            }
            p += value_size;
        }
        *p++ = 0; /* header count */
    }
    if (count == 0) {
        self->base_timestamp = self->max_timestamp = timestamp;
    }
    else if (timestamp > self->max_timestamp) {
        self->max_timestamp = timestamp;
    }
    self->count = count + (stop - start);
    return Py_BuildValue("(nn)", stop, added);
}

static PyMethodDef writer_methods[] = {
    {"append", (PyCFunction)(void (*)(void))writer_append, METH_FASTCALL | METH_KEYWORDS,
     writer_append_doc},
    {"append_values", (PyCFunction)(void (*)(void))writer_append_values,
     METH_FASTCALL | METH_KEYWORDS, writer_append_values_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef writer_members[] = {
    {"_records", Py_T_OBJECT_EX, offsetof(RecordsWriter, records), Py_READONLY,
     "the encoded records region (bytearray)"},
    {"records_count", T_PYSSIZET, offsetof(RecordsWriter, count), Py_READONLY,
     "records appended so far"},
    {"_base_timestamp", T_LONGLONG, offsetof(RecordsWriter, base_timestamp), Py_READONLY,
     "the first record's timestamp (0 before the first append)"},
    {"_max_timestamp", T_LONGLONG, offsetof(RecordsWriter, max_timestamp), Py_READONLY,
     "the largest timestamp appended (0 before the first append)"},
    {NULL, 0, 0, 0, NULL},
};

PyDoc_STRVAR(writer_doc,
"RecordsWriter()\n"
"--\n\n"
"The records region of a batch being built: records appended with offset deltas 0, 1, ...\n"
"and timestamp deltas from the first record's timestamp, plus the count and the first and\n"
"largest timestamps. The base of BatchBuilder; same behaviour as accel.PyRecordsWriter.\n"
"Not thread-safe (one producer task owns a builder).");

static PyTypeObject RecordsWriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stratalog.records._speedups.RecordsWriter",
    .tp_basicsize = sizeof(RecordsWriter),
    .tp_dealloc = (destructor)writer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = writer_doc,
    .tp_methods = writer_methods,
    .tp_members = writer_members,
    .tp_init = (initproc)writer_init,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------------------------------ */
/* The log cleaner's offset map (server/storage/offset_map.py): key digests, and the map's     */
/* puts and lookups for a whole records region, run without the GIL.                            */
/*
 * The cleaner maps every key of a log's dirty section and then looks every record up again;
 * in Python that is a digest and a probe per record (~1.2 us), and the thread holds the GIL
 * for all of it against the server's event loop. Here one call does a records region: the
 * buffers are exported (the table is a bytearray, which cannot be resized while exported), the
 * GIL is released and the loop calls no Python API. Every call is a point where the event loop
 * can take the GIL back.
 *
 * The table: ``slots`` slots of 24 bytes, [0, 16) the key's digest (all zero: empty), [16, 24)
 * the offset, big-endian int64. A key's digest is MurmurHash3_x64_128 (Austin Appleby, public
 * domain) with seed MAP_DIGEST_SEED, output h1 then h2 each as 8 little-endian bytes (the reference's
 * canonical byte order); a probe starts at slot (digest[0:8] big-endian) mod slots and goes on
 * linearly, wrapping. records/key_digest.py and OffsetMap's Python methods are the reference
 * (tests/unit/storage/test_offset_map_accel.py compares them).
 *
 * The records are read with skim_record: the record framing only (sizes, key, value, headers
 * skipped), no Python objects. A region it cannot read (corrupt, or fewer/more records than
 * declared) makes the function return None: the caller then takes the reference path, whose
 * decoder raises the CorruptRecordError with its message.
 */

#define MAP_SLOT_BYTES 24
#define MAP_DIGEST_BYTES 16

static inline uint64_t
rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t
fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

static inline uint64_t
load_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static inline void
store_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static inline uint64_t
load_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

static inline void
store_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

/* The seed: not 0, under which the empty key's digest is all zero (an empty slot). */
#define MAP_DIGEST_SEED 0x9747b28cULL

/* MurmurHash3_x64_128(data, len, MAP_DIGEST_SEED) into out[16]: h1, h2, little-endian. */
static void
murmur3_x64_128(const uint8_t *data, size_t len, uint8_t out[MAP_DIGEST_BYTES])
{
    const uint64_t c1 = 0x87c37b91114253d5ULL;
    const uint64_t c2 = 0x4cf5ad432745937fULL;
    uint64_t h1 = MAP_DIGEST_SEED, h2 = MAP_DIGEST_SEED;
    size_t blocks = len / 16;
    for (size_t i = 0; i < blocks; i++) {
        uint64_t k1 = load_le64(data + 16 * i);
        uint64_t k2 = load_le64(data + 16 * i + 8);
        k1 *= c1;
        k1 = rotl64(k1, 31);
        k1 *= c2;
        h1 ^= k1;
        h1 = rotl64(h1, 27);
        h1 += h2;
        h1 = h1 * 5 + 0x52dce729;
        k2 *= c2;
        k2 = rotl64(k2, 33);
        k2 *= c1;
        h2 ^= k2;
        h2 = rotl64(h2, 31);
        h2 += h1;
        h2 = h2 * 5 + 0x38495ab5;
    }
    const uint8_t *tail = data + 16 * blocks;
    size_t rest = len & 15;
    uint64_t k1 = 0, k2 = 0;
    for (size_t i = rest; i > 8; i--) {
        k2 ^= (uint64_t)tail[i - 1] << (8 * (i - 9));
    }
    if (rest > 8) {
        k2 *= c2;
        k2 = rotl64(k2, 33);
        k2 *= c1;
        h2 ^= k2;
    }
    for (size_t i = rest < 8 ? rest : 8; i > 0; i--) {
        k1 ^= (uint64_t)tail[i - 1] << (8 * (i - 1));
    }
    if (rest > 0) {
        k1 *= c1;
        k1 = rotl64(k1, 31);
        k1 *= c2;
        h1 ^= k1;
    }
    h1 ^= (uint64_t)len;
    h2 ^= (uint64_t)len;
    h1 += h2;
    h2 += h1;
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 += h2;
    h2 += h1;
    store_le64(out, h1);
    store_le64(out + 8, h2);
}

static inline int
slot_is_empty(const uint8_t *slot)
{
    static const uint8_t zero[MAP_DIGEST_BYTES] = {0};
    return memcmp(slot, zero, MAP_DIGEST_BYTES) == 0;
}

/* The position of digest's slot, or of the empty slot where it would go; -1 when every slot
 * holds another key (OffsetMap._slot_of). */
static Py_ssize_t
map_slot_of(const uint8_t *table, Py_ssize_t slots, const uint8_t *digest)
{
    Py_ssize_t slot = (Py_ssize_t)(load_be64(digest) % (uint64_t)slots);
    for (Py_ssize_t n = 0; n < slots; n++) {
        const uint8_t *s = table + slot * MAP_SLOT_BYTES;
        if (memcmp(s, digest, MAP_DIGEST_BYTES) == 0 || slot_is_empty(s)) {
            return slot * MAP_SLOT_BYTES;
        }
        if (++slot == slots) {
            slot = 0;
        }
    }
    return -1;
}

/* One varint (max_size 5, 32 bits kept) or varlong (10) at *q before end, zig-zag decoded, as
 * read_varint_full reads it. Returns 0 when it runs past end or is too long. */
static inline int
skim_varint(const uint8_t **q, const uint8_t *end, int max_size, int64_t *value)
{
    const uint8_t *p = *q;
    uint64_t raw = 0;
    int shift = 0;
    for (int i = 0; i < max_size; i++) {
        if (p >= end) {
            return 0;
        }
        uint8_t byte = *p++;
        raw |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            if (max_size == MAX_VARINT_SIZE) {
                raw &= 0xFFFFFFFFu;
            }
            *value = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            *q = p;
            return 1;
        }
        shift += 7;
    }
    return 0;
}

/* The record at c->position: its offset delta, key and value (headers skipped); the cursor
 * ends after it. Returns 0 if it is not a well-formed record (the reference decoder would
 * raise). Calls no Python API. */
static int
skim_record(Cursor *c, Fields *f)
{
    const uint8_t *q = c->data + c->position;
    const uint8_t *end = c->data + c->end;
    int64_t size, header_count, skipped;
    if (!skim_varint(&q, end, MAX_VARINT_SIZE, &size) || size < 0 || size > end - q) {
        return 0;
    }
    const uint8_t *record_end = q + size;
    if (q >= record_end) {
        return 0;
    }
    q += 1; /* attributes */
    if (!skim_varint(&q, record_end, MAX_VARLONG_SIZE, &f->timestamp_delta) ||
        !skim_varint(&q, record_end, MAX_VARINT_SIZE, &f->offset_delta) ||
        !skim_varint(&q, record_end, MAX_VARINT_SIZE, &f->key_size)) {
        return 0;
    }
    f->key_position = q - c->data;
    if (f->key_size >= 0) {
        if (f->key_size > record_end - q) {
            return 0;
        }
        q += f->key_size;
    }
    else if (f->key_size != -1) {
        return 0;
    }
    if (!skim_varint(&q, record_end, MAX_VARINT_SIZE, &f->value_size)) {
        return 0;
    }
    f->value_position = q - c->data;
    if (f->value_size >= 0) {
        if (f->value_size > record_end - q) {
            return 0;
        }
        q += f->value_size;
    }
    else if (f->value_size != -1) {
        return 0;
    }
    if (!skim_varint(&q, record_end, MAX_VARINT_SIZE, &header_count) || header_count < 0 ||
        header_count > record_end - q) {
        return 0;
    }
    for (int64_t i = 0; i < header_count; i++) {
        if (!skim_varint(&q, record_end, MAX_VARINT_SIZE, &skipped) || skipped < 0 ||
            skipped > record_end - q) {
            return 0;
        }
        q += skipped;
        if (!skim_varint(&q, record_end, MAX_VARINT_SIZE, &skipped) || skipped < -1 ||
            skipped > record_end - q) {
            return 0;
        }
        if (skipped > 0) {
            q += skipped;
        }
    }
    if (q != record_end) {
        return 0;
    }
    c->position = record_end - c->data;
    return 1;
}

/* An int argument as a long long: the TypeError or OverflowError of PyLong_AsLongLong. */
static int
int64_arg(PyObject *value, long long *out)
{
    *out = PyLong_AsLongLong(value);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

PyDoc_STRVAR(key_digest_doc,
"key_digest(key)\n"
"--\n\n"
"The offset map's 16-byte digest of ``key`` (MurmurHash3_x64_128, seed 0x9747b28c, h1 and\n"
"h2 little-endian). Same result as stratalog.records.key_digest.key_digest_reference.");

static PyObject *
key_digest(PyObject *Py_UNUSED(module), PyObject *key)
{
    Py_buffer view;
    if (PyObject_GetBuffer(key, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    uint8_t digest[MAP_DIGEST_BYTES];
    murmur3_x64_128((const uint8_t *)view.buf, (size_t)view.len, digest);
    PyBuffer_Release(&view);
    return PyBytes_FromStringAndSize((const char *)digest, MAP_DIGEST_BYTES);
}

/* The table and records buffers of a map call, exported; 0 on success. */
static int
map_buffers(const char *function, PyObject *table, PyObject *records, Py_buffer *table_view,
            Py_buffer *records_view, Py_ssize_t *slots)
{
    if (PyObject_GetBuffer(table, table_view, PyBUF_WRITABLE) < 0) {
        return -1;
    }
    *slots = table_view->len / MAP_SLOT_BYTES;
    if (*slots < 1) {
        PyBuffer_Release(table_view);
        PyErr_Format(PyExc_ValueError, "%s(): the table holds no slot (%zd bytes)", function,
                     table_view->len);
        return -1;
    }
    if (PyObject_GetBuffer(records, records_view, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(table_view);
        return -1;
    }
    return 0;
}

static const char *const map_put_names[] = {"table", "records", "count", "base_offset",
                                            "start", "entries", "max_entries"};

PyDoc_STRVAR(map_put_records_doc,
"map_put_records(table, records, count, base_offset, start, entries, max_entries)\n"
"--\n\n"
"Put key -> offset into the offset map ``table`` (a bytearray of 24-byte slots holding\n"
"``entries`` keys, at most ``max_entries``) for every keyed record of the ``count`` records\n"
"filling ``records`` whose offset (``base_offset`` + delta) is at least ``start``, in order.\n"
"Returns ``(entries, latest_offset, full)``: the keys held now, the largest offset put (-1:\n"
"none) and whether a new key found the map full (the records from it on are not put). None\n"
"when the region is not ``count`` well-formed records (some keys may be put by then). Runs\n"
"without the GIL.");

static PyObject *
map_put_records(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames)
{
    PyObject *v[7];
    if (parse_args("map_put_records", args, nargs, kwnames, map_put_names, 7, 7, v) < 0) {
        return NULL;
    }
    long long count, base_offset, start, entries, max_entries;
    if (int64_arg(v[2], &count) < 0 || int64_arg(v[3], &base_offset) < 0 ||
        int64_arg(v[4], &start) < 0 || int64_arg(v[5], &entries) < 0 ||
        int64_arg(v[6], &max_entries) < 0) {
        return NULL;
    }
    if (base_offset < 0 || base_offset > INT64_MAX - INT32_MAX_VALUE) {
        Py_RETURN_NONE; /* offsets the sum below could overflow: the reference decides */
    }
    Py_buffer table_view, records_view;
    Py_ssize_t slots;
    if (map_buffers("map_put_records", v[0], v[1], &table_view, &records_view, &slots) < 0) {
        return NULL;
    }
    uint8_t *table = (uint8_t *)table_view.buf;
    long long latest = -1;
    int full = 0, ok = 1;
    Py_BEGIN_ALLOW_THREADS
    Cursor c = cursor_over(&records_view, count);
    for (c.index = 0; c.index < count; c.index++) {
        Fields f;
        if (!skim_record(&c, &f)) {
            ok = 0;
            break;
        }
        long long offset = base_offset + (long long)f.offset_delta;
        if (f.key_size < 0 || offset < start) {
            continue;
        }
        uint8_t digest[MAP_DIGEST_BYTES];
        murmur3_x64_128(c.data + f.key_position, (size_t)f.key_size, digest);
        Py_ssize_t position = map_slot_of(table, slots, digest);
        if (position < 0) {
            full = 1;
            break;
        }
        uint8_t *slot = table + position;
        if (slot_is_empty(slot)) {
            if (entries >= max_entries) {
                full = 1;
                break;
            }
            memcpy(slot, digest, MAP_DIGEST_BYTES);
            entries++;
        }
        store_be64(slot + MAP_DIGEST_BYTES, (uint64_t)offset);
        if (offset > latest) {
            latest = offset;
        }
    }
    if (ok && !full && c.position != c.end) {
        ok = 0;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&records_view);
    PyBuffer_Release(&table_view);
    if (!ok) {
        Py_RETURN_NONE;
    }
    return Py_BuildValue("LLO", entries, latest, full ? Py_True : Py_False);
}

static const char *const map_retain_names[] = {"table", "records", "count", "base_offset",
                                               "latest_mapped", "retain_deletes"};

PyDoc_STRVAR(map_retain_records_doc,
"map_retain_records(table, records, count, base_offset, latest_mapped, retain_deletes)\n"
"--\n\n"
"The cleaner's keep/drop decision for each of the ``count`` records filling ``records``\n"
"against the offset map ``table``: bytes of ``count`` entries, 1 to keep the record, 0 to\n"
"drop it. Kept: a record past ``latest_mapped``, or a keyed record whose offset is at least\n"
"its key's mapped offset with a value (or a null value when ``retain_deletes``). None when\n"
"the region is not ``count`` well-formed records. Runs without the GIL.");

static PyObject *
map_retain_records(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs,
                   PyObject *kwnames)
{
    PyObject *v[6];
    if (parse_args("map_retain_records", args, nargs, kwnames, map_retain_names, 6, 6, v) < 0) {
        return NULL;
    }
    long long count, base_offset, latest_mapped;
    if (int64_arg(v[2], &count) < 0 || int64_arg(v[3], &base_offset) < 0 ||
        int64_arg(v[4], &latest_mapped) < 0) {
        return NULL;
    }
    int retain_deletes = PyObject_IsTrue(v[5]);
    if (retain_deletes < 0) {
        return NULL;
    }
    if (base_offset < 0 || base_offset > INT64_MAX - INT32_MAX_VALUE) {
        Py_RETURN_NONE; /* offsets the sum below could overflow: the reference decides */
    }
    Py_buffer table_view, records_view;
    Py_ssize_t slots;
    if (map_buffers("map_retain_records", v[0], v[1], &table_view, &records_view, &slots) < 0) {
        return NULL;
    }
    /* A record takes at least 7 bytes: a count above the region's size cannot be right (and
     * the mask below stays bounded by the region). */
    if (count < 0 || count > records_view.len) {
        PyBuffer_Release(&records_view);
        PyBuffer_Release(&table_view);
        Py_RETURN_NONE;
    }
    PyObject *mask = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count);
    if (mask == NULL) {
        PyBuffer_Release(&records_view);
        PyBuffer_Release(&table_view);
        return NULL;
    }
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(mask);
    const uint8_t *table = (const uint8_t *)table_view.buf;
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    Cursor c = cursor_over(&records_view, count);
    for (c.index = 0; c.index < count; c.index++) {
        Fields f;
        if (!skim_record(&c, &f)) {
            ok = 0;
            break;
        }
        long long offset = base_offset + (long long)f.offset_delta;
        uint8_t keep;
        if (offset > latest_mapped) {
            keep = 1;
        }
        else if (f.key_size < 0) {
            keep = 0;
        }
        else {
            uint8_t digest[MAP_DIGEST_BYTES];
            murmur3_x64_128(c.data + f.key_position, (size_t)f.key_size, digest);
            Py_ssize_t position = map_slot_of(table, slots, digest);
            long long mapped = -1;
            if (position >= 0 && !slot_is_empty(table + position)) {
                mapped = (long long)load_be64(table + position + MAP_DIGEST_BYTES);
            }
            keep = offset >= mapped && (f.value_size >= 0 || retain_deletes);
        }
        out[c.index] = keep;
    }
    if (ok && c.position != c.end) {
        ok = 0;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&records_view);
    PyBuffer_Release(&table_view);
    if (!ok) {
        Py_DECREF(mask);
        Py_RETURN_NONE;
    }
    return mask;
}

PyDoc_STRVAR(map_clear_doc,
"map_clear(table)\n"
"--\n\n"
"Zero the offset map ``table`` (a writable buffer) in place, without the GIL: a 128 MiB map\n"
"takes tens of milliseconds to zero, which the event loop would otherwise wait out.");

static PyObject *
map_clear(PyObject *Py_UNUSED(module), PyObject *table)
{
    Py_buffer view;
    if (PyObject_GetBuffer(table, &view, PyBUF_WRITABLE) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    memset(view.buf, 0, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------------------ */
/* __consumer_offsets: the offset commits of one batch, for a group coordinator's load.         */
/*                                                                                              */
/* The byte layout is records/consumer_offsets.py's (Kafka's OffsetCommitKey and                */
/* OffsetCommitValue schemas, records/schemas/), big-endian, strings an int16 length and UTF-8: */
/*                                                                                              */
/*     key   = record_type int16 (0 or 1) | group string | topic string | partition int32       */
/*     value = version int16 (0-3) | offset int64 | leaderEpoch int32 (3+) | metadata string     */
/*             | commitTimestamp int64 | expireTimestamp int64 (1 only)                          */
/*                                                                                              */
/* Bytes after either message are ignored, as the schema readers ignore them. Anything else     */
/* (another record type, value version 4 with its tagged fields, a short or invalid message, a  */
/* negative string length, invalid UTF-8, a key or value that is not bytes) is not this        */
/* reader's: its row is None and the caller decodes that record through the schema readers,    */
/* which raise the error that names the problem. So this code raises only for bad arguments or  */
/* memory.                                                                                      */

/* An int16 string at *p (before end): its bytes, or 0 when it does not fit or is negative. */
static inline int
read_string16(const uint8_t **p, const uint8_t *end, const uint8_t **bytes, Py_ssize_t *length)
{
    if (end - *p < 2) {
        return 0;
    }
    int16_t n = (int16_t)(((uint16_t)(*p)[0] << 8) | (*p)[1]);
    if (n < 0 || end - *p - 2 < n) {
        return 0;
    }
    *bytes = *p + 2;
    *length = n;
    *p += 2 + n;
    return 1;
}

static inline int64_t
read_int64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v = (v << 8) | p[i];
    }
    return (int64_t)v;
}

static inline int32_t
read_int32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}

/* A string of a key, shared with the previous key's when the bytes are the same (a group
 * commits many partitions of one topic at once: one group and one topic object for them all).
 * The memo holds references to the key it read the bytes from and to the string; the caller
 * releases them. Returns a new reference, or NULL (the UnicodeDecodeError, or memory). */
typedef struct {
    PyObject *source; /* the key holding bytes */
    const uint8_t *bytes;
    Py_ssize_t length;
    PyObject *object;
} SharedString;

static PyObject *
shared_string(SharedString *shared, PyObject *source, const uint8_t *bytes, Py_ssize_t length)
{
    if (shared->object != NULL && shared->length == length &&
        memcmp(shared->bytes, bytes, (size_t)length) == 0) {
        return Py_NewRef(shared->object);
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)bytes, length, NULL);
    if (text == NULL) {
        return NULL;
    }
    Py_XSETREF(shared->source, Py_NewRef(source));
    Py_XSETREF(shared->object, Py_NewRef(text));
    shared->bytes = bytes;
    shared->length = length;
    return text;
}

static void
shared_string_release(SharedString *shared)
{
    Py_CLEAR(shared->source);
    Py_CLEAR(shared->object);
}

/* The row of one record: (group, (topic, partition), value) with value a value_type of
 * (offset, leader_epoch, metadata, commit_timestamp, expire_timestamp, record_offset), or None
 * for a tombstone; Py_None (a new reference) when the record is not this reader's; NULL on an
 * error (memory). */
static PyObject *
offset_commit_row(PyObject *key, PyObject *value, PyObject *record_offset,
                  PyTypeObject *value_type, PyObject *partitions, SharedString *group_memo,
                  SharedString *topic_memo, PyObject **timestamp_memo)
{
    if (!PyBytes_CheckExact(key) || (value != Py_None && !PyBytes_CheckExact(value))) {
        Py_RETURN_NONE;
    }
    const uint8_t *p = (const uint8_t *)PyBytes_AS_STRING(key);
    const uint8_t *end = p + PyBytes_GET_SIZE(key);
    const uint8_t *group, *topic;
    Py_ssize_t group_length, topic_length;
    if (end - p < 2 || p[0] != 0 || p[1] > 1) { /* record type 0 or 1 */
        Py_RETURN_NONE;
    }
    p += 2;
    if (!read_string16(&p, end, &group, &group_length) ||
        !read_string16(&p, end, &topic, &topic_length) || end - p < 4) {
        Py_RETURN_NONE;
    }
    int32_t partition = read_int32(p);

    /* The value's fields, read before any object is made. */
    int64_t offset = 0, commit_timestamp = 0, expire_timestamp = -1;
    int32_t leader_epoch = -1;
    const uint8_t *metadata = NULL;
    Py_ssize_t metadata_length = 0;
    if (value != Py_None) {
        const uint8_t *q = (const uint8_t *)PyBytes_AS_STRING(value);
        const uint8_t *value_end = q + PyBytes_GET_SIZE(value);
        if (value_end - q < 2 || q[0] != 0 || q[1] > 3) { /* versions 0-3 */
            Py_RETURN_NONE;
        }
        int version = q[1];
        q += 2;
        if (value_end - q < 8) {
            Py_RETURN_NONE;
        }
        offset = read_int64(q);
        q += 8;
        if (version >= 3) {
            if (value_end - q < 4) {
                Py_RETURN_NONE;
            }
            leader_epoch = read_int32(q);
            q += 4;
        }
        if (!read_string16(&q, value_end, &metadata, &metadata_length) || value_end - q < 8) {
            Py_RETURN_NONE;
        }
        commit_timestamp = read_int64(q);
        q += 8;
        if (version == 1) {
            if (value_end - q < 8) {
                Py_RETURN_NONE;
            }
            expire_timestamp = read_int64(q);
        }
    }

    PyObject *value_row = NULL, *topic_partition = NULL, *row = NULL;
    PyObject *group_object = NULL, *topic_object = NULL, *partition_object = NULL;
    PyObject *metadata_object = NULL;
    if (value != Py_None) {
        /* Metadata first: invalid UTF-8 there makes the row None before anything is shared. */
        metadata_object = PyUnicode_DecodeUTF8((const char *)metadata, metadata_length, NULL);
        if (metadata_object == NULL) {
            goto failed;
        }
    }
    group_object = shared_string(group_memo, key, group, group_length);
    if (group_object == NULL) {
        goto failed;
    }
    topic_object = shared_string(topic_memo, key, topic, topic_length);
    if (topic_object == NULL) {
        goto failed;
    }
    partition_object = PyLong_FromLong(partition);
    if (partition_object == NULL) {
        goto failed;
    }
    topic_partition = PyTuple_Pack(2, topic_object, partition_object);
    Py_CLEAR(topic_object); /* the tuple holds them now */
    Py_CLEAR(partition_object);
    if (topic_partition == NULL) {
        goto failed;
    }
    /* Strings and ints only: no cycle can pass through it, and the store keeps one per
     * committed offset, which the collector need not scan (it would untrack it later). */
    PyObject_GC_UnTrack(topic_partition);
    if (partitions != NULL) { /* one tuple per partition for every group that commits it */
        PyObject *shared = PyDict_SetDefault(partitions, topic_partition, topic_partition);
        if (shared == NULL) {
            goto failed;
        }
        Py_SETREF(topic_partition, Py_NewRef(shared));
    }
    if (value == Py_None) {
        value_row = Py_NewRef(Py_None);
    } else {
        PyObject *timestamp;
        if (*timestamp_memo != NULL && PyLong_AsLongLong(*timestamp_memo) == commit_timestamp) {
            timestamp = Py_NewRef(*timestamp_memo); /* a batch's commits share their time */
        } else {
            timestamp = PyLong_FromLongLong(commit_timestamp);
            if (timestamp == NULL) {
                goto failed;
            }
            Py_XSETREF(*timestamp_memo, Py_NewRef(timestamp));
        }
        PyObject *fields[6] = {PyLong_FromLongLong(offset), PyLong_FromLong(leader_epoch),
                               metadata_object, timestamp,
                               PyLong_FromLongLong(expire_timestamp), Py_NewRef(record_offset)};
        metadata_object = NULL;
        value_row = value_type->tp_alloc(value_type, 6);
        int ok = value_row != NULL;
        for (int i = 0; i < 6; i++) {
            ok = ok && fields[i] != NULL;
        }
        if (!ok) {
            for (int i = 0; i < 6; i++) {
                Py_XDECREF(fields[i]);
            }
            goto failed;
        }
        for (int i = 0; i < 6; i++) {
            PyTuple_SET_ITEM(value_row, i, fields[i]);
        }
        PyObject_GC_UnTrack(value_row);
    }
    row = PyTuple_New(3);
    if (row == NULL) {
        goto failed;
    }
    PyTuple_SET_ITEM(row, 0, group_object);
    PyTuple_SET_ITEM(row, 1, topic_partition);
    PyTuple_SET_ITEM(row, 2, value_row);
    /* Untracked parts only: the collections a load of a million rows triggers skip it. */
    PyObject_GC_UnTrack(row);
    return row;

failed:
    Py_XDECREF(metadata_object);
    Py_XDECREF(group_object);
    Py_XDECREF(topic_object);
    Py_XDECREF(topic_partition);
    Py_XDECREF(value_row);
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            return NULL;
        }
        PyErr_Clear();
    }
    Py_RETURN_NONE;
}

static const char *const offset_commit_rows_names[] = {"offsets", "keys", "values",
                                                       "value_type", "partitions"};

PyDoc_STRVAR(offset_commit_rows_doc,
"offset_commit_rows(offsets, keys, values, value_type, partitions=None)\n"
"--\n\n"
"The offset commits among one batch's records of __consumer_offsets (three lists of one\n"
"length: record offsets, keys, values), one row per record: (group, (topic, partition),\n"
"value) with value a ``value_type`` of (offset, leader_epoch, metadata, commit_timestamp_ms,\n"
"expire_timestamp_ms, record_offset), or None for a tombstone; None for a record this reader\n"
"does not read (not an offset commit, value version 4, or bytes that do not parse: decode it\n"
"through the schema readers). ``value_type``: a tuple subclass with no fields of its own (a\n"
"NamedTuple). ``partitions``: None, or a dict the caller keeps over many calls (a load), in\n"
"which each (topic, partition) tuple is kept once and shared by the rows. Same rows as\n"
"stratalog.records.consumer_offsets.offset_commit_rows_reference.");

static PyObject *
offset_commit_rows(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs,
                   PyObject *kwnames)
{
    PyObject *a[5];
    if (parse_args("offset_commit_rows", args, nargs, kwnames, offset_commit_rows_names, 4, 5,
                   a) < 0) {
        return NULL;
    }
    PyObject *partitions = a[4] == Py_None ? NULL : a[4];
    if (partitions != NULL && !PyDict_CheckExact(partitions)) {
        PyErr_SetString(PyExc_TypeError, "offset_commit_rows(): partitions must be a dict or None");
        return NULL;
    }
    PyObject *offsets = a[0], *keys = a[1], *values = a[2];
    if (!PyList_Check(offsets) || !PyList_Check(keys) || !PyList_Check(values)) {
        PyErr_SetString(PyExc_TypeError,
                        "offset_commit_rows(): offsets, keys and values must be lists");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(offsets) != count || PyList_GET_SIZE(values) != count) {
        PyErr_Format(PyExc_ValueError,
                     "offset_commit_rows(): %zd offsets, %zd keys and %zd values: the lists "
                     "must have one length",
                     PyList_GET_SIZE(offsets), count, PyList_GET_SIZE(values));
        return NULL;
    }
    if (!PyType_Check(a[3]) || !PyType_IsSubtype((PyTypeObject *)a[3], &PyTuple_Type) ||
        ((PyTypeObject *)a[3])->tp_basicsize != PyTuple_Type.tp_basicsize ||
        ((PyTypeObject *)a[3])->tp_itemsize != PyTuple_Type.tp_itemsize ||
        ((PyTypeObject *)a[3])->tp_dictoffset != 0 ||
        ((PyTypeObject *)a[3])->tp_weaklistoffset != 0) {
        PyErr_SetString(PyExc_TypeError,
                        "offset_commit_rows(): value_type must be a tuple subclass without "
                        "fields of its own (a NamedTuple)");
        return NULL;
    }
    PyTypeObject *value_type = (PyTypeObject *)a[3];
    PyObject *rows = PyList_New(count);
    if (rows == NULL) {
        return NULL;
    }
    SharedString group_memo = {0}, topic_memo = {0};
    PyObject *timestamp_memo = NULL;
    int rows_failed = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *row = offset_commit_row(PyList_GET_ITEM(keys, i), PyList_GET_ITEM(values, i),
                                          PyList_GET_ITEM(offsets, i), value_type, partitions,
                                          &group_memo, &topic_memo, &timestamp_memo);
        if (row == NULL) {
            rows_failed = 1;
            break;
        }
        PyList_SET_ITEM(rows, i, row);
    }
    Py_XDECREF(timestamp_memo);
    shared_string_release(&group_memo);
    shared_string_release(&topic_memo);
    if (rows_failed) {
        Py_DECREF(rows); /* its unset items are NULL, which the list's dealloc skips */
        return NULL;
    }
    return rows;
}

/* ------------------------------------------------------------------------------------------ */
/* Module initialisation.                                                                       */

/* The byte offset of Record's slot `name`, after checking that it is a plain object slot. */
static int
slot_of(const char *name, Py_ssize_t *offset)
{
    PyObject *descriptor = PyDict_GetItemString(RecordType->tp_dict, name); /* borrowed */
    if (descriptor == NULL || !Py_IS_TYPE(descriptor, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_ImportError, "stratalog.records.record.Record.%s is not a slot", name);
        return -1;
    }
    PyMemberDef *member = ((PyMemberDescrObject *)descriptor)->d_member;
    if (member->type != Py_T_OBJECT_EX || (member->flags & Py_READONLY) ||
        member->offset < (Py_ssize_t)sizeof(PyObject) ||
        member->offset + (Py_ssize_t)sizeof(PyObject *) > RecordType->tp_basicsize) {
        PyErr_Format(PyExc_ImportError,
                     "stratalog.records.record.Record.%s is not a plain object slot", name);
        return -1;
    }
    *offset = member->offset;
    return 0;
}

static PyMethodDef methods[] = {
    {"decode_records", (PyCFunction)(void (*)(void))decode_records,
     METH_FASTCALL | METH_KEYWORDS, decode_records_doc},
    {"decode_columns", (PyCFunction)(void (*)(void))decode_columns,
     METH_FASTCALL | METH_KEYWORDS, decode_columns_doc},
    {"walk_records", (PyCFunction)(void (*)(void))walk_records, METH_FASTCALL | METH_KEYWORDS,
     walk_records_doc},
    {"find_records", (PyCFunction)(void (*)(void))find_records, METH_FASTCALL | METH_KEYWORDS,
     find_records_doc},
    {"decode_arrow", (PyCFunction)(void (*)(void))decode_arrow, METH_FASTCALL | METH_KEYWORDS,
     decode_arrow_doc},
    {"encode_record", (PyCFunction)(void (*)(void))encode_record, METH_FASTCALL | METH_KEYWORDS,
     encode_record_doc},
    {"key_digest", (PyCFunction)key_digest, METH_O, key_digest_doc},
    {"map_clear", (PyCFunction)map_clear, METH_O, map_clear_doc},
    {"map_put_records", (PyCFunction)(void (*)(void))map_put_records,
     METH_FASTCALL | METH_KEYWORDS, map_put_records_doc},
    {"map_retain_records", (PyCFunction)(void (*)(void))map_retain_records,
     METH_FASTCALL | METH_KEYWORDS, map_retain_records_doc},
    {"offset_commit_rows", (PyCFunction)(void (*)(void))offset_commit_rows,
     METH_FASTCALL | METH_KEYWORDS, offset_commit_rows_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "stratalog.records._speedups",
    .m_doc = "The per-record loops of stratalog.records.record in C (use stratalog.records.accel).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    PyObject *errors = PyImport_ImportModule("stratalog.records.errors");
    if (errors == NULL) {
        return NULL;
    }
    CorruptRecordError = PyObject_GetAttrString(errors, "CorruptRecordError");
    Py_DECREF(errors);
    if (CorruptRecordError == NULL) {
        return NULL;
    }
    PyObject *record = PyImport_ImportModule("stratalog.records.record");
    if (record == NULL) {
        return NULL;
    }
    PyObject *record_type = PyObject_GetAttrString(record, "Record");
    RecordsWalkType = PyObject_GetAttrString(record, "RecordsWalk");
    RecordsSpanType = PyObject_GetAttrString(record, "RecordsSpan");
    Py_DECREF(record);
    if (record_type == NULL || RecordsWalkType == NULL || RecordsSpanType == NULL) {
        Py_XDECREF(record_type);
        return NULL;
    }
    if (!PyType_Check(record_type)) {
        Py_DECREF(record_type);
        PyErr_SetString(PyExc_ImportError, "stratalog.records.record.Record is not a class");
        return NULL;
    }
    RecordType = (PyTypeObject *)record_type;
    if (slot_of("offset", &slot_offset) < 0 || slot_of("timestamp", &slot_timestamp) < 0 ||
        slot_of("key", &slot_key) < 0 || slot_of("value", &slot_value) < 0 ||
        slot_of("headers", &slot_headers) < 0) {
        return NULL;
    }
    EmptyTuple = PyTuple_New(0);
    if (EmptyTuple == NULL) {
        return NULL;
    }
    if (PyType_Ready(&RecordsWriterType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "RecordsWriter", (PyObject *)&RecordsWriterType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
