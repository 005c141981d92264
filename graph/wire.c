/*
 * A pre-flight walk over protobuf wire bytes, driven by the protobuf-c
 * descriptors, before protobuf-c unpacks them.  It uses an explicit stack
 * (no recursion) and rejects, with a message naming the field and byte
 * offset: truncation, lengths past the end, wrong wire types for known
 * fields, malformed varints, groups, and nesting deeper than a limit —
 * so protobuf-c's own recursive unpack never sees hostile nesting.
 */
#include <string.h>

#include "internal.h"

enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };

struct frame {
    const ProtobufCMessageDescriptor *desc; /* NULL: opaque (unknown field) */
    size_t end;
    const char *field; /* field that opened this frame, for messages */
};

enum { VARINT_OK, VARINT_TRUNCATED, VARINT_MALFORMED };

/* Reads a varint; MALFORMED when longer than 10 bytes or over 64 bits. */
static int read_varint(const uint8_t *buf, size_t *pos, size_t end, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*pos >= end)
            return VARINT_TRUNCATED;
        uint8_t b = buf[(*pos)++];
        if (shift == 63 && (b & 0x7f) > 1)
            return VARINT_MALFORMED;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return VARINT_OK;
        }
    }
    return VARINT_MALFORMED;
}

/* A packed payload of a scalar field must hold whole elements. */
static bool packed_ok(const uint8_t *buf, size_t pos, size_t len, int wire)
{
    if (wire == WIRE_I64)
        return len % 8 == 0;
    if (wire == WIRE_I32)
        return len % 4 == 0;
    uint64_t v;
    for (size_t end = pos + len; pos < end;)
        if (read_varint(buf, &pos, end, &v) != VARINT_OK)
            return false;
    return true;
}

/* Wire type a field of this descriptor must use (packed repeated scalars
 * may also come length-delimited). */
static int expected_wire(const ProtobufCFieldDescriptor *f)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_BOOL: case PROTOBUF_C_TYPE_ENUM:
        return WIRE_VARINT;
    case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_SFIXED64: case PROTOBUF_C_TYPE_DOUBLE:
        return WIRE_I64;
    case PROTOBUF_C_TYPE_FIXED32: case PROTOBUF_C_TYPE_SFIXED32: case PROTOBUF_C_TYPE_FLOAT:
        return WIRE_I32;
    default:
        return WIRE_LEN;
    }
}

static void path_of(const struct frame *st, int depth, char *buf, size_t len)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 1; i <= depth && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%s", i > 1 ? "." : "", st[i].field);
}

static const char *wire_name(int w)
{
    static const char *names[] = {"varint", "64-bit", "length-delimited", "group start",
                                  "group end", "32-bit", "invalid (6)", "invalid (7)"};
    return names[w & 7];
}

enum gf_status gf_wire_check(const uint8_t *buf, size_t len,
                             const ProtobufCMessageDescriptor *root, int max_depth,
                             bool *known)
{
    bool dummy;
    known = known ? known : &dummy;
    *known = false;
    struct frame st[128];
    char path[512];
    if (max_depth > 126)
        max_depth = 126;
    int depth = 0;
    st[0] = (struct frame){root, len, root->short_name};
    size_t pos = 0;
    for (;;) {
        while (depth > 0 && pos == st[depth].end)
            depth--;
        if (pos == len && depth == 0)
            return GF_OK;
        const struct frame *fr = &st[depth];
        size_t start = pos;
        uint64_t key;
        int vr = read_varint(buf, &pos, fr->end, &key);
        if (vr != VARINT_OK) {
            path_of(st, depth, path, sizeof(path));
            return gf_error(GF_ERR_PARSE, "%s field key at byte %zu%s%s",
                            vr == VARINT_TRUNCATED ? "truncated" : "malformed varint in", start,
                            *path ? " inside " : "", path);
        }
        uint64_t number = key >> 3;
        int wire = (int)(key & 7);
        if (number == 0 || number > 536870911u) {
            path_of(st, depth, path, sizeof(path));
            return gf_error(GF_ERR_PARSE, "invalid field number %llu at byte %zu%s%s",
                            (unsigned long long)number, start, *path ? " inside " : "", path);
        }
        const ProtobufCFieldDescriptor *f =
            fr->desc ? protobuf_c_message_descriptor_get_field(fr->desc, (unsigned)number)
                     : NULL;
        if (f) {
            int want = expected_wire(f);
            bool packed_ok = f->label == PROTOBUF_C_LABEL_REPEATED && want != WIRE_LEN &&
                             wire == WIRE_LEN;
            if (wire != want && !packed_ok) {
                path_of(st, depth, path, sizeof(path));
                return gf_error(GF_ERR_PARSE,
                                "field '%s%s%s' at byte %zu has wire type %s, expected %s",
                                path, *path ? "." : "", f->name, start, wire_name(wire),
                                wire_name(want));
            }
            if (depth == 0)
                *known = true;
        }
        uint64_t v;
        switch (wire) {
        case WIRE_VARINT:
            if ((vr = read_varint(buf, &pos, fr->end, &v)) != VARINT_OK)
                goto bad_varint;
            break;
        case WIRE_I64:
        case WIRE_I32: {
            size_t n = wire == WIRE_I64 ? 8 : 4;
            if (fr->end - pos < n)
                goto truncated;
            pos += n;
            break;
        }
        case WIRE_LEN:
            if ((vr = read_varint(buf, &pos, fr->end, &v)) != VARINT_OK)
                goto bad_varint;
            if (v > fr->end - pos) {
                path_of(st, depth, path, sizeof(path));
                return gf_error(GF_ERR_PARSE,
                                "field '%s%s%s' at byte %zu declares %llu bytes but only %zu "
                                "remain",
                                path, *path ? "." : "", f ? f->name : "(unknown)", start,
                                (unsigned long long)v, fr->end - pos);
            }
            if (f && f->type != PROTOBUF_C_TYPE_MESSAGE && expected_wire(f) != WIRE_LEN &&
                !packed_ok(buf, pos, (size_t)v, expected_wire(f))) {
                path_of(st, depth, path, sizeof(path));
                return gf_error(GF_ERR_PARSE, "packed field '%s%s%s' at byte %zu does not hold "
                                "whole %s values", path, *path ? "." : "", f->name, start,
                                wire_name(expected_wire(f)));
            }
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
                if (depth + 1 > max_depth) {
                    path_of(st, depth, path, sizeof(path));
                    return gf_error(GF_ERR_INVALID,
                                    "messages nested deeper than %d levels (at byte %zu, "
                                    "inside %.200s...)",
                                    max_depth, start, path);
                }
                depth++;
                st[depth] = (struct frame){f->descriptor, pos + (size_t)v, f->name};
            } else {
                pos += (size_t)v;
            }
            break;
        default: {
            path_of(st, depth, path, sizeof(path));
            return gf_error(GF_ERR_PARSE, "unsupported wire type %s at byte %zu%s%s",
                            wire_name(wire), start, *path ? " inside " : "", path);
        }
        }
        continue;
bad_varint:
        if (vr == VARINT_MALFORMED) {
            path_of(st, depth, path, sizeof(path));
            return gf_error(GF_ERR_PARSE, "malformed varint in field '%s%s%s' at byte %zu",
                            path, *path ? "." : "", f ? f->name : "(unknown)", start);
        }
truncated:
        path_of(st, depth, path, sizeof(path));
        return gf_error(GF_ERR_PARSE, "truncated field '%s%s%s' at byte %zu", path,
                        *path ? "." : "", f ? f->name : "(unknown)", start);
    }
}
