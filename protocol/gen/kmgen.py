#!/usr/bin/env python3
"""kmgen: reads kmproxy's message definitions (protocol/spec/*.kms, see FORMAT.md) and writes
km_messages.h (C structs, enums, typed wrappers) and km_messages.c (descriptor tables) for the
generic codec engine in protocol/codec*.c.  Standard library only, so a fresh Debian can build."""

import argparse
import os
import re
import shlex
import sys

PRIMITIVES = {
    "bool": ("bool", "KM_T_BOOL"),
    "int8": ("int8_t", "KM_T_INT8"),
    "int16": ("int16_t", "KM_T_INT16"),
    "uint16": ("uint16_t", "KM_T_UINT16"),
    "int32": ("int32_t", "KM_T_INT32"),
    "uint32": ("uint32_t", "KM_T_UINT32"),
    "int64": ("int64_t", "KM_T_INT64"),
    "float64": ("double", "KM_T_FLOAT64"),
    "uuid": ("km_uuid", "KM_T_UUID"),
    "string": ("km_str", "KM_T_STRING"),
    "bytes": ("km_bytes", "KM_T_BYTES"),
    "records": ("km_bytes", "KM_T_RECORDS"),
}
INT_TYPES = {"int8", "int16", "uint16", "int32", "uint32", "int64"}
C_KEYWORDS = {"default", "int", "char", "long", "short", "struct", "union", "enum", "case", "switch",
              "if", "else", "for", "while", "do", "return", "static", "const", "signed", "unsigned",
              "void", "register", "auto", "extern", "goto", "break", "continue", "sizeof", "typedef",
              "volatile", "float", "double", "inline", "restrict", "bool", "unknown_tags"}
VER_MAX = 32767


class SpecError(Exception):
    pass


def snake(name):
    """ControllerId -> controller_id, isKRaftController -> is_kraft_controller."""
    s = name.replace("KRaft", "Kraft")
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", s)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    return s.lower()


def c_field_name(name):
    s = snake(name)
    return s + "_" if s in C_KEYWORDS else s


def parse_versions(text, where):
    if text == "none":
        return (1, 0)
    m = re.fullmatch(r"(\d+)(\+|-(\d+))?", text)
    if not m:
        raise SpecError(f"{where}: bad versions '{text}'")
    lo = int(m.group(1))
    if m.group(2) == "+":
        return (lo, VER_MAX)
    if m.group(3) is not None:
        return (lo, int(m.group(3)))
    return (lo, lo)


class Field:
    def __init__(self, tokens, where):
        if len(tokens) < 3:
            raise SpecError(f"{where}: a field needs a name, a type and versions")
        self.name, self.type, vers = tokens[0], tokens[1], tokens[2]
        self.where = where
        self.versions = parse_versions(vers, where)
        self.nullable = (1, 0)
        self.tagged = (1, 0)
        self.tag = -1
        self.flexible = None
        self.ignorable = False
        self.default = None
        self.children = []
        for tok in tokens[3:]:
            key, _, val = tok.partition("=")
            if key == "nullable":
                self.nullable = parse_versions(val, where)
            elif key == "tagged":
                self.tagged = parse_versions(val, where)
            elif key == "tag":
                self.tag = int(val)
            elif key == "flexible":
                self.flexible = parse_versions(val, where)
            elif key == "ignorable":
                self.ignorable = True
            elif key == "default":
                self.default = val
            else:
                raise SpecError(f"{where}: unknown attribute '{tok}'")
        if (self.tag >= 0) != (self.tagged[0] <= self.tagged[1]):
            raise SpecError(f"{where}: tag and tagged go together")

    @property
    def is_array(self):
        return self.type.startswith("[]")

    @property
    def base(self):
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self):
        return self.base not in PRIMITIVES


class Struct:
    def __init__(self, name, fields):
        self.name = name
        self.fields = fields
        self.cname = None


class Message:
    def __init__(self, tokens, where):
        if len(tokens) < 2:
            raise SpecError(f"{where}: message needs a name")
        self.name = tokens[1]
        attrs = dict(t.split("=", 1) for t in tokens[2:])
        self.kind = attrs.get("kind")
        if self.kind not in ("request", "response", "header", "metadata", "data"):
            raise SpecError(f"{where}: bad kind '{self.kind}'")
        self.key = int(attrs.get("key", "-1"))
        self.valid = parse_versions(attrs.get("valid", "0"), where)
        self.flexible = parse_versions(attrs.get("flexible", "none"), where)
        self.fields = []
        self.structs = {}
        self.cname = "km_" + snake(self.name)


def parse_block(lines, start, indent, where_file):
    """Parses consecutive field lines at `indent`; returns (fields, next index)."""
    fields = []
    i = start
    while i < len(lines):
        lineno, raw = lines[i]
        depth = (len(raw) - len(raw.lstrip(" "))) // 2
        if depth < indent:
            break
        if depth > indent:
            raise SpecError(f"{where_file}:{lineno}: unexpected indentation")
        field = Field(shlex.split(raw.strip()), f"{where_file}:{lineno}")
        i += 1
        if i < len(lines):
            next_depth = (len(lines[i][1]) - len(lines[i][1].lstrip(" "))) // 2
            if next_depth > indent:
                field.children, i = parse_block(lines, i, indent + 1, where_file)
        fields.append(field)
    return fields, i


def parse_file(path):
    lines = []
    with open(path) as f:
        for n, raw in enumerate(f, 1):
            raw = raw.rstrip("\n")
            if raw.strip() and not raw.strip().startswith("#"):
                lines.append((n, raw))
    if not lines or not lines[0][1].startswith("message "):
        raise SpecError(f"{path}: must start with a message line")
    msg = Message(shlex.split(lines[0][1]), f"{path}:{lines[0][0]}")
    msg.fields, i = parse_block(lines, 1, 1, path)
    while i < len(lines):
        lineno, raw = lines[i]
        toks = raw.split()
        if toks[0] != "struct" or len(toks) != 3:
            raise SpecError(f"{path}:{lineno}: expected 'struct Name versions'")
        fields, i = parse_block(lines, i + 1, 1, path)
        add_struct(msg, Struct(toks[1], fields), f"{path}:{lineno}")
    for st in list(msg.structs.values()):
        collect_inline(msg, st.fields)
    collect_inline(msg, msg.fields)
    msg.root = Struct(msg.name, msg.fields)
    msg.root.cname = msg.cname
    return msg


def add_struct(msg, st, where):
    if st.name in msg.structs:
        raise SpecError(f"{where}: struct {st.name} defined twice")
    # LeaderAndIsrRequest's LeaderAndIsrPartitionState -> km_leader_and_isr_request_partition_state
    base = re.sub(r"(Request|Response|Record|Message)$", "", msg.name)
    short = st.name[len(base):] if st.name.startswith(base) and len(st.name) > len(base) else st.name
    st.cname = f"{msg.cname}_{snake(short)}"
    if any(o.cname == st.cname for o in msg.structs.values()):
        st.cname = f"{msg.cname}_{snake(st.name)}"
    if any(o.cname == st.cname for o in msg.structs.values()):
        raise SpecError(f"{where}: struct {st.name} clashes with another C name")
    msg.structs[st.name] = st


def collect_inline(msg, fields):
    for f in fields:
        if f.children:
            add_struct(msg, Struct(f.base, f.children), f.where)
            collect_inline(msg, f.children)


def resolve(msg, f):
    if not f.is_struct:
        return None
    st = msg.structs.get(f.base)
    if st is None:
        raise SpecError(f"{f.where}: unknown type {f.base}")
    return st


def c_member(msg, f):
    if f.is_array:
        elem = resolve(msg, f).cname if f.is_struct else PRIMITIVES[f.base][0]
        return f"KM_ARRAY_OF({elem}) {c_field_name(f.name)};"
    if f.is_struct:
        st = resolve(msg, f)
        ptr = "*" if f.nullable[0] <= f.nullable[1] else ""
        return f"{st.cname} {ptr}{c_field_name(f.name)};"
    return f"{PRIMITIVES[f.base][0]} {c_field_name(f.name)};"


def struct_order(msg):
    """Structs in definition order: a struct embedded by value comes before its user."""
    done, order = set(), []

    def visit(st):
        if st.name in done:
            return
        done.add(st.name)
        for f in st.fields:
            if f.is_struct:
                visit(resolve(msg, f))
        order.append(st)

    for st in msg.structs.values():
        visit(st)
    return order


def parse_int_default(f):
    d = f.default
    try:
        return int(d, 0)
    except ValueError:
        raise SpecError(f"{f.where}: bad integer default '{d}'")


def default_init(f):
    """C initializer fragments for the descriptor's default members."""
    d = f.default
    if d == "null":
        if f.nullable[0] > f.nullable[1]:
            raise SpecError(f"{f.where}: default null on a field that is never nullable")
        return ".default_null = true"
    if d is None:
        return ""
    if f.is_array or f.is_struct:
        raise SpecError(f"{f.where}: only null can be the default of an array or struct")
    if f.base == "bool":
        if d not in ("true", "false"):
            raise SpecError(f"{f.where}: bool default must be true or false")
        return f".default_int = {1 if d == 'true' else 0}"
    if f.base in INT_TYPES:
        return f".default_int = {parse_int_default(f)}LL"
    if f.base == "float64":
        return f".default_float = {float(d)!r}"
    if f.base == "string":
        return ".default_str = " + '"' + d.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise SpecError(f"{f.where}: type {f.base} takes no default but null")


def ver_init(v):
    return f"{{{v[0]}, {v[1]}}}"


def field_desc(msg, st, f):
    ctype = "KM_T_ARRAY" if f.is_array else ("KM_T_STRUCT" if f.is_struct else PRIMITIVES[f.base][1])
    elem = ("KM_T_STRUCT" if f.is_struct else PRIMITIVES[f.base][1]) if f.is_array else "KM_T_BOOL"
    sub = f"&{resolve(msg, f).cname}_sdesc" if f.is_struct else "NULL"
    by_ptr = "true" if (f.is_struct and not f.is_array and f.nullable[0] <= f.nullable[1]) else "false"
    parts = [
        f'.name = "{f.name}"', f'.json_name = "{f.name[0].lower() + f.name[1:]}"',
        f".type = {ctype}", f".elem = {elem}", f".sub = {sub}",
        f".versions = {ver_init(f.versions)}", f".nullable = {ver_init(f.nullable)}",
        f".tagged = {ver_init(f.tagged)}",
        f".flexible = {ver_init(f.flexible or (1, 0))}",
        f".has_flexible_override = {'true' if f.flexible else 'false'}",
        f".ignorable = {'true' if f.ignorable else 'false'}",
        f".struct_by_pointer = {by_ptr}", f".tag = {f.tag}",
        f".offset = offsetof({st.cname}, {c_field_name(f.name)})",
    ]
    extra = default_init(f)
    if extra:
        parts.append(extra)
    return "    { " + ", ".join(parts) + " },"


def check_tags(msg, st):
    seen = {}
    for f in st.fields:
        if f.tag >= 0:
            if f.tag in seen:
                raise SpecError(f"{f.where}: tag {f.tag} already used by {seen[f.tag]}")
            seen[f.tag] = f.name


def emit_header(msgs):
    out = ["/* Generated by protocol/gen/kmgen.py from the protocol/spec definitions. Do not edit. */",
           "#ifndef KM_MESSAGES_H", "#define KM_MESSAGES_H", ""]
    out.append("enum km_api_key {")
    for m in sorted((m for m in msgs if m.kind == "request"), key=lambda m: m.key):
        out.append(f"    KM_API_{snake(m.name[:-len('Request')]).upper()} = {m.key},")
    out += ["};", "", "enum km_metadata_record_type {"]
    for m in sorted((m for m in msgs if m.kind == "metadata"), key=lambda m: m.key):
        out.append(f"    KM_MDR_{snake(m.name).upper()} = {m.key},")
    out += ["};", ""]
    for m in msgs:
        for st in struct_order(m) + [m.root]:
            out.append(f"typedef struct {st.cname} {st.cname};")
    out.append("")
    for m in msgs:
        for st in struct_order(m) + [m.root]:
            out.append(f"struct {st.cname} {{")
            out += [f"    {c_member(m, f)}" for f in st.fields]
            out += ["    km_raw_tags unknown_tags;", "};", ""]
        n = m.cname
        out += [
            f"extern const km_message_desc {n}_desc;",
            f"static inline void {n}_init({n} *m) {{ km_init({n}_desc.root, m); }}",
            f"static inline int {n}_encode(const {n} *m, int16_t version, km_buf *out, km_err *err)",
            f"{{ return km_encode(&{n}_desc, version, m, out, err); }}",
            f"static inline int {n}_decode({n} *m, int16_t version, const uint8_t *data, size_t len,",
            f"    km_arena *arena, km_err *err)",
            f"{{ return km_decode(&{n}_desc, version, data, len, m, arena, NULL, err); }}", ""]
    out.append("#endif")
    return "\n".join(out) + "\n"


def emit_keyed_lookup(msgs):
    """km_find_keyed_message: a switch per kind (the compiler makes jump tables); the proxy looks
    up every frame's API, and a walk over every message cost more than the frame's parsing."""
    out = ["const km_message_desc *km_find_keyed_message(km_msg_kind kind, int16_t api_key)", "{",
           "    switch (kind) {"]
    for kind in ("request", "response", "metadata"):
        out += [f"    case KM_K_{kind.upper()}:", "        switch (api_key) {"]
        for m in sorted((m for m in msgs if m.kind == kind), key=lambda m: m.key):
            out.append(f"        case {m.key}: return &{m.cname}_desc;")
        out += ["        default: return NULL;", "        }"]
    out += ["    default: return NULL;", "    }", "}", ""]
    return out


def emit_source(msgs):
    out = ["/* Generated by protocol/gen/kmgen.py from the protocol/spec definitions. Do not edit. */",
           '#include "km_codec.h"', "", "#include <stddef.h>", ""]
    for m in msgs:
        for st in struct_order(m) + [m.root]:
            out.append(f"static const km_struct_desc {st.cname}_sdesc;")
    out.append("")
    for m in msgs:
        for st in struct_order(m) + [m.root]:
            check_tags(m, st)
            fields = f"{st.cname}_fields"
            if st.fields:
                out.append(f"static const km_field {fields}[] = {{")
                out += [field_desc(m, st, f) for f in st.fields]
                out.append("};")
            out += [f"static const km_struct_desc {st.cname}_sdesc = {{",
                    f'    .name = "{st.name}", .size = sizeof({st.cname}),',
                    f"    .unknown_tags_offset = offsetof({st.cname}, unknown_tags),",
                    f"    .nfields = {len(st.fields)}, .fields = {fields if st.fields else 'NULL'},", "};"]
        kind = "KM_K_" + m.kind.upper()
        out += [f"const km_message_desc {m.cname}_desc = {{",
                f'    .name = "{m.name}", .kind = {kind}, .api_key = {m.key},',
                f"    .valid = {ver_init(m.valid)}, .flexible = {ver_init(m.flexible)},",
                f"    .root = &{m.cname}_sdesc,", "};", ""]
    out.append("static const km_message_desc *const KM_ALL_MESSAGES[] = {")
    out += [f"    &{m.cname}_desc," for m in msgs]
    out += ["    NULL,", "};", "",
            "const km_message_desc *const *km_all_messages(void) { return KM_ALL_MESSAGES; }", ""]
    out += emit_keyed_lookup(msgs)
    out.append("const char *km_api_name(int16_t api_key)\n{\n    switch (api_key) {")
    for m in sorted((m for m in msgs if m.kind == "request"), key=lambda m: m.key):
        out.append(f'    case {m.key}: return "{snake(m.name[:-len("Request")]).upper()}";')
    out += ["    default: return NULL;", "    }", "}"]
    return "\n".join(out) + "\n"


def validate(msgs):
    keys = {}
    for m in msgs:
        if m.kind in ("request", "response", "metadata"):
            if m.key < 0:
                raise SpecError(f"{m.name}: {m.kind} needs key=")
            k = (m.kind, m.key)
            if k in keys:
                raise SpecError(f"{m.name}: key {m.key} already used by {keys[k]}")
            keys[k] = m.name
        for st in list(m.structs.values()) + [m.root]:
            for f in st.fields:
                resolve(m, f)
                if f.default is not None:
                    default_init(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("specs", nargs="+")
    args = ap.parse_args()
    try:
        msgs = [parse_file(p) for p in sorted(args.specs)]
        validate(msgs)
        header, source = emit_header(msgs), emit_source(msgs)
    except SpecError as e:
        print(f"kmgen: {e}", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    for name, text in (("km_messages.h", header), ("km_messages.c", source)):
        path = os.path.join(args.out, name)
        old = open(path).read() if os.path.exists(path) else None
        if old != text:  # keep mtimes stable so an unchanged spec rebuilds nothing
            with open(path, "w") as f:
                f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
