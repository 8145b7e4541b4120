#!/usr/bin/env python3
"""The crate's public API as text, and a check of it against a baseline.

    public_api.py list  RUSTDOC_JSON            print the API, one line an item
    public_api.py check RUSTDOC_JSON BASELINE CHANGELOG

The listing comes from rustdoc's JSON output (format 57, which the stable
toolchain 1.95 writes under RUSTC_BOOTSTRAP=1): every item reachable by a
public path, each on one line with its signature, the fields and variants
of types, their `#[non_exhaustive]` and `#[repr]`, the traits they
implement (auto traits included: losing `Send` breaks users) and the
methods of their inherent impls. Blanket impls are left out, and so are
the values of constants. A type is named by its public path when it has
one, so a move between private modules changes nothing.

`check` compares the listing with BASELINE, the API of the last release.
A line of the baseline that is gone (an item removed, or changed: its new
form is an added line) must be named in the `## Unreleased` section of
CHANGELOG; added lines are allowed. It exits 1, naming what is missing,
when one is not. Only Python's standard library is used.
"""

import json
import re
import sys

FORMAT = 57
CRATE = "reqwest_pace"


class Api:
    def __init__(self, doc):
        if doc.get("format_version") != FORMAT:
            sys.exit(
                f"rustdoc JSON format {doc.get('format_version')}, this script reads {FORMAT}: "
                "update .ci/public_api.py for the toolchain"
            )
        self.index = doc["index"]
        self.paths = doc["paths"]
        self.root = str(doc["root"])
        self.public = {}  # item id -> its first public path
        self.lines = set()

    # ------------------------------------------------------------ walking

    def walk(self):
        # Breadth first, in sorted order, so that each item's first public
        # path is the shortest and the same on every run.
        queue = [(self.root, [])]
        seen_modules = set()
        while queue:
            next_queue = []
            for mid, path in queue:
                if mid in seen_modules:
                    continue
                seen_modules.add(mid)
                module = self.index[mid]["inner"]["module"]
                for child, name in self.children(module):
                    item = self.index.get(child)
                    child_path = path + [name]
                    if item is None:
                        # A re-export of another crate's item.
                        target = self.paths.get(child)
                        shown = "::".join(target["path"]) if target else "?"
                        self.lines.add(f"pub use {'::'.join(child_path)} = {shown}")
                        continue
                    self.public.setdefault(child, "::".join(child_path))
                    if "module" in item["inner"]:
                        self.lines.add(f"pub mod {'::'.join(child_path)}")
                        next_queue.append((child, child_path))
            queue = sorted(next_queue, key=lambda q: q[1])
        for iid, path in sorted(self.public.items(), key=lambda p: p[1]):
            self.item(self.index[iid], path)

    def children(self, module):
        out = []
        for cid in module["items"]:
            item = self.index.get(str(cid))
            if item is None or item["visibility"] != "public":
                continue
            inner = item["inner"]
            if "use" in inner:
                use = inner["use"]
                if use["id"] is None:
                    continue
                target = str(use["id"])
                if use["is_glob"]:
                    glob = self.index.get(target)
                    if glob is not None and "module" in glob["inner"]:
                        out.extend(self.children(glob["inner"]["module"]))
                    continue
                out.append((target, use["name"]))
            elif item["name"] is not None:
                out.append((str(cid), item["name"]))
        return out

    # ------------------------------------------------------------ items

    def attrs(self, item):
        kept = []
        for attr in item.get("attrs", []):
            if attr == "non_exhaustive":
                kept.append("#[non_exhaustive]")
            elif isinstance(attr, dict) and "repr" in attr:
                kept.append("#[repr(" + json.dumps(attr["repr"], sort_keys=True) + ")]")
        return "".join(a + " " for a in kept)

    def item(self, item, path):
        inner = item["inner"]
        kind = next(iter(inner))
        body = inner[kind]
        attrs = self.attrs(item)
        deprecated = " #[deprecated]" if item.get("deprecation") else ""
        if kind == "module":
            return
        if kind == "struct":
            self.struct(body, path, attrs + deprecated)
        elif kind == "enum":
            self.enum(body, path, attrs + deprecated)
        elif kind == "union":
            self.add(f"{attrs}pub union {path}{self.generics(body['generics'])}")
            self.fields(body["fields"], path, body.get("has_stripped_fields"))
            self.impls(body["impls"], path)
        elif kind == "function":
            self.add(attrs + self.function(body, path) + deprecated)
        elif kind == "trait":
            self.trait(body, path, attrs + deprecated)
        elif kind == "type_alias":
            self.add(
                f"{attrs}pub type {path}{self.generics(body['generics'])} = "
                f"{self.ty(body['type'])}{self.where(body['generics'])}"
            )
        elif kind == "constant":
            self.add(f"{attrs}pub const {path}: {self.ty(body['type'])}")
        elif kind == "static":
            mutable = "mut " if body.get("is_mutable") else ""
            self.add(f"{attrs}pub static {mutable}{path}: {self.ty(body['type'])}")
        elif kind in ("macro", "proc_macro"):
            self.add(f"pub macro {path}")
        else:
            self.add(f"pub {kind} {path}")

    def add(self, line):
        self.lines.add(re.sub(r"\s+", " ", line).strip())

    def struct(self, body, path, attrs):
        generics = self.generics(body["generics"])
        where = self.where(body["generics"])
        shape = body["kind"]
        if shape == "unit":
            self.add(f"{attrs}pub struct {path}{generics}{where}")
        elif "tuple" in shape:
            fields = [self.field_type(f) for f in shape["tuple"]]
            self.add(f"{attrs}pub struct {path}{generics}({', '.join(fields)}){where}")
        else:
            plain = shape["plain"]
            stripped = " (and private fields)" if plain["has_stripped_fields"] else ""
            self.add(f"{attrs}pub struct {path}{generics}{where}{stripped}")
            self.fields(plain["fields"], path, False)
        self.impls(body["impls"], path)

    def field_type(self, fid):
        if fid is None:
            return "_"
        field = self.index[str(fid)]
        if field["visibility"] != "public":
            return "_"
        return "pub " + self.ty(field["inner"]["struct_field"])

    def fields(self, ids, path, stripped):
        for fid in ids:
            field = self.index[str(fid)]
            if field["visibility"] == "public":
                self.add(
                    f"pub field {path}::{field['name']}: {self.ty(field['inner']['struct_field'])}"
                )

    def enum(self, body, path, attrs):
        stripped = " (and hidden variants)" if body["has_stripped_variants"] else ""
        self.add(
            f"{attrs}pub enum {path}{self.generics(body['generics'])}"
            f"{self.where(body['generics'])}{stripped}"
        )
        for vid in body["variants"]:
            variant = self.index[str(vid)]
            v = variant["inner"]["variant"]
            shape = v["kind"]
            vattrs = self.attrs(variant)
            vpath = f"{path}::{variant['name']}"
            if shape == "plain":
                self.add(f"{vattrs}variant {vpath}")
            elif "tuple" in shape:
                fields = [self.field_type(f).removeprefix("pub ") for f in shape["tuple"]]
                self.add(f"{vattrs}variant {vpath}({', '.join(fields)})")
            else:
                st = shape["struct"]
                fields = []
                for fid in st["fields"]:
                    f = self.index[str(fid)]
                    fields.append(f"{f['name']}: {self.ty(f['inner']['struct_field'])}")
                if st["has_stripped_fields"]:
                    fields.append("..")
                self.add(f"{vattrs}variant {vpath} {{ {', '.join(fields)} }}")
        self.impls(body["impls"], path)

    def function(self, body, path, prefix="pub "):
        header = body["header"]
        quals = "".join(
            word + " "
            for word, on in (
                ("const", header["is_const"]),
                ("async", header["is_async"]),
                ("unsafe", header["is_unsafe"]),
            )
            if on
        )
        abi = header.get("abi", "Rust")
        if abi != "Rust":
            quals += f'extern "{abi if isinstance(abi, str) else next(iter(abi))}" '
        sig = body["sig"]
        inputs = []
        for name, ty in sig["inputs"]:
            inputs.append(self.self_param(ty) if name == "self" else f"{name}: {self.ty(ty)}")
        out = f" -> {self.ty(sig['output'])}" if sig["output"] is not None else ""
        variadic = ", ..." if sig.get("is_c_variadic") else ""
        return (
            f"{prefix}{quals}fn {path}{self.generics(body['generics'])}"
            f"({', '.join(inputs)}{variadic}){out}{self.where(body['generics'])}"
        )

    def self_param(self, ty):
        if ty == {"generic": "Self"}:
            return "self"
        ref = ty.get("borrowed_ref")
        if ref and ref["type"] == {"generic": "Self"}:
            lifetime = ref["lifetime"] + " " if ref["lifetime"] else ""
            return f"&{lifetime}{'mut ' if ref['is_mutable'] else ''}self"
        return f"self: {self.ty(ty)}"

    def trait(self, body, path, attrs):
        quals = ("unsafe " if body["is_unsafe"] else "") + ("auto " if body["is_auto"] else "")
        bounds = self.bounds(body["bounds"])
        dyn = " (dyn-compatible)" if body.get("is_dyn_compatible") else ""
        self.add(
            f"{attrs}pub {quals}trait {path}{self.generics(body['generics'])}"
            f"{': ' + bounds if bounds else ''}{self.where(body['generics'])}{dyn}"
        )
        for iid in body["items"]:
            self.assoc(self.index[str(iid)], path, in_trait=True)
        for iid in body.get("implementations", []):
            impl = self.index.get(str(iid))
            if impl is None or impl["inner"]["impl"].get("blanket_impl") is not None:
                continue
            self.add(self.impl_head(impl["inner"]["impl"]))

    def assoc(self, item, owner, in_trait, context=""):
        inner = item["inner"]
        kind = next(iter(inner))
        body = inner[kind]
        path = f"{owner}::{item['name']}"
        attrs = self.attrs(item)
        if kind == "function":
            provided = " (provided)" if in_trait and body["has_body"] else ""
            prefix = "" if in_trait else "pub "
            self.add(attrs + self.function(body, path, prefix) + provided + context)
        elif kind == "assoc_const":
            self.add(f"{'' if in_trait else 'pub '}const {path}: {self.ty(body['type'])}{context}")
        elif kind == "assoc_type":
            bounds = self.bounds(body.get("bounds", []))
            value = f" = {self.ty(body['type'])}" if body.get("type") else ""
            self.add(
                f"type {path}{self.generics(body['generics'])}"
                f"{': ' + bounds if bounds else ''}{value}"
            )

    def impls(self, ids, path):
        for iid in ids:
            impl = self.index.get(str(iid))
            if impl is None:
                continue
            body = impl["inner"]["impl"]
            if body.get("blanket_impl") is not None:
                continue
            if body["trait"] is None:
                # The impl's own parameters and bounds belong to each of its
                # methods: tightening them breaks callers too.
                context = ""
                if body["generics"]["params"] or body["generics"]["where_predicates"]:
                    context = (
                        f" [in impl{self.generics(body['generics'])} {self.ty(body['for'])}"
                        f"{self.where(body['generics'])}]"
                    )
                for aid in body["items"]:
                    item = self.index[str(aid)]
                    if item["visibility"] == "public":
                        self.assoc(item, path, in_trait=False, context=context)
                continue
            head = self.impl_head(body)
            self.add(head)
            for aid in body["items"]:
                item = self.index[str(aid)]
                if "assoc_type" in item["inner"]:
                    value = item["inner"]["assoc_type"].get("type")
                    if value is not None:
                        self.add(f"{head} :: type {item['name']} = {self.ty(value)}")

    def impl_head(self, body):
        negative = "!" if body["is_negative"] else ""
        unsafe = "unsafe " if body["is_unsafe"] else ""
        return (
            f"{unsafe}impl{self.generics(body['generics'])} {negative}{self.path(body['trait'])} "
            f"for {self.ty(body['for'])}{self.where(body['generics'])}"
        )

    # ------------------------------------------------------------ types

    def name_of(self, pid, written):
        pid = str(pid) if pid is not None else None
        if pid in self.public:
            return self.public[pid]
        if pid in self.paths:
            entry = self.paths[pid]
            if entry.get("crate_id") == 0:
                # A crate item without a public path (sealed, private).
                return "::".join(entry["path"][1:])
            return "::".join(entry["path"])
        return written

    def path(self, p):
        name = self.name_of(p.get("id"), p.get("path") or p.get("name"))
        return name + self.args(p.get("args"))

    def args(self, args):
        if not args:
            return ""
        if "angle_bracketed" in args:
            ab = args["angle_bracketed"]
            parts = [self.arg(a) for a in ab["args"]]
            parts += [self.constraint(c) for c in ab["constraints"]]
            return f"<{', '.join(parts)}>" if parts else ""
        if "parenthesized" in args:
            pa = args["parenthesized"]
            out = f" -> {self.ty(pa['output'])}" if pa.get("output") else ""
            return f"({', '.join(self.ty(t) for t in pa['inputs'])}){out}"
        return "(..)"

    def arg(self, a):
        if a == "infer":
            return "_"
        if "lifetime" in a:
            return a["lifetime"]
        if "type" in a:
            return self.ty(a["type"])
        if "const" in a:
            return a["const"].get("expr", "_")
        return json.dumps(a, sort_keys=True)

    def constraint(self, c):
        head = c["name"] + self.args(c.get("args"))
        binding = c["binding"]
        if "equality" in binding:
            eq = binding["equality"]
            value = self.ty(eq["type"]) if "type" in eq else eq.get("constant", {}).get("expr", "_")
            return f"{head} = {value}"
        return f"{head}: {self.bounds(binding['constraint'])}"

    def ty(self, t):
        if t is None:
            return "()"
        if isinstance(t, str):
            return "_" if t == "infer" else t
        kind = next(iter(t))
        v = t[kind]
        if kind == "resolved_path":
            return self.path(v)
        if kind == "primitive":
            return v
        if kind == "generic":
            return v
        if kind == "tuple":
            return f"({', '.join(self.ty(x) for x in v)}{',' if len(v) == 1 else ''})"
        if kind == "slice":
            return f"[{self.ty(v)}]"
        if kind == "array":
            return f"[{self.ty(v['type'])}; {v['len']}]"
        if kind == "borrowed_ref":
            lifetime = v["lifetime"] + " " if v["lifetime"] else ""
            return f"&{lifetime}{'mut ' if v['is_mutable'] else ''}{self.ty(v['type'])}"
        if kind == "raw_pointer":
            return f"*{'mut' if v['is_mutable'] else 'const'} {self.ty(v['type'])}"
        if kind == "dyn_trait":
            parts = [self.poly(p) for p in v["traits"]]
            if v.get("lifetime"):
                parts.append(v["lifetime"])
            return f"dyn {' + '.join(parts)}"
        if kind == "impl_trait":
            return f"impl {self.bounds(v)}"
        if kind == "function_pointer":
            sig = v["sig"]
            ins = ", ".join(self.ty(x[1]) for x in sig["inputs"])
            out = f" -> {self.ty(sig['output'])}" if sig["output"] is not None else ""
            return f"fn({ins}){out}"
        if kind == "qualified_path":
            trait = self.path(v["trait"]) if v.get("trait") else ""
            self_ty = self.ty(v["self_type"])
            head = f"<{self_ty} as {trait}>" if trait else self_ty
            return f"{head}::{v['name']}{self.args(v.get('args'))}"
        if kind == "pat":
            return self.ty(v["type"])
        return json.dumps(t, sort_keys=True)

    def poly(self, p):
        hr = self.hrtb(p.get("generic_params", []))
        return hr + self.path(p["trait"])

    def hrtb(self, params):
        if not params:
            return ""
        return "for<" + ", ".join(p["name"] for p in params) + "> "

    def bounds(self, bounds):
        out = []
        for b in bounds:
            if "trait_bound" in b:
                tb = b["trait_bound"]
                modifier = {"maybe": "?", "maybe_const": "~const "}.get(tb.get("modifier"), "")
                out.append(modifier + self.hrtb(tb.get("generic_params", [])) + self.path(tb["trait"]))
            elif "outlives" in b:
                out.append(b["outlives"])
            elif "use" in b:
                names = [u if isinstance(u, str) else next(iter(u.values())) for u in b["use"]]
                out.append(f"use<{', '.join(names)}>")
        return " + ".join(out)

    def generics(self, g):
        params = []
        for p in g["params"]:
            kind = p["kind"]
            if "lifetime" in kind:
                outlives = kind["lifetime"]["outlives"]
                params.append(p["name"] + (": " + " + ".join(outlives) if outlives else ""))
            elif "type" in kind:
                tk = kind["type"]
                if tk.get("is_synthetic"):
                    continue
                bounds = self.bounds(tk["bounds"])
                default = f" = {self.ty(tk['default'])}" if tk.get("default") else ""
                params.append(p["name"] + (": " + bounds if bounds else "") + default)
            elif "const" in kind:
                ck = kind["const"]
                default = f" = {ck['default']}" if ck.get("default") else ""
                params.append(f"const {p['name']}: {self.ty(ck['type'])}{default}")
        return f"<{', '.join(params)}>" if params else ""

    def where(self, g):
        preds = []
        for w in g["where_predicates"]:
            if "bound_predicate" in w:
                bp = w["bound_predicate"]
                preds.append(
                    self.hrtb(bp.get("generic_params", []))
                    + f"{self.ty(bp['type'])}: {self.bounds(bp['bounds'])}"
                )
            elif "lifetime_predicate" in w:
                lp = w["lifetime_predicate"]
                preds.append(f"{lp['lifetime']}: {' + '.join(lp['outlives'])}")
            elif "eq_predicate" in w:
                ep = w["eq_predicate"]
                rhs = self.ty(ep["rhs"]["type"]) if "type" in ep["rhs"] else "_"
                preds.append(f"{self.ty(ep['lhs'])} = {rhs}")
        return f" where {', '.join(preds)}" if preds else ""


def listing(json_path):
    with open(json_path, encoding="utf-8") as f:
        api = Api(json.load(f))
    api.walk()
    return sorted(api.lines)


# ---------------------------------------------------------------- check

KEYWORDS = {
    "pub", "mod", "struct", "enum", "union", "variant", "field", "fn", "const",
    "async", "unsafe", "extern", "trait", "auto", "type", "static", "mut",
    "macro", "use",
}


def key_of(line):
    """The item a line is about, as a path without the crate's name: the
    type of an impl, or the path after the keywords."""
    line = re.sub(r"^(#\[[^\]]*\]\s*)+", "", line)
    if line.startswith(("impl", "unsafe impl")):
        after = line.rsplit(" for ", 1)[-1]
        return re.match(r"[A-Za-z0-9_:]*", after).group(0)
    words = line.split(" ")
    while words and (words[0] in KEYWORDS or words[0].startswith('"')):
        words.pop(0)
    return re.match(r"[A-Za-z0-9_:]*", " ".join(words)).group(0)


def unreleased(changelog):
    text = open(changelog, encoding="utf-8").read()
    start = text.find("## Unreleased")
    if start < 0:
        return ""
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def mentioned(key, section):
    """Whether the section names `key` in backticks: the whole path, or a
    tail of it from its first type on (`GiveUp::TimeLimit` or
    `retry::GiveUp::TimeLimit` for `retry::GiveUp::TimeLimit`,
    `RateLimitSignal` for `headers::RateLimitSignal`), or, for a path of
    modules and functions only, its last two segments (`zoo::gcra`)."""
    spans = set()
    for span in re.findall(r"`([^`]+)`", section):
        head = re.match(r"[A-Za-z0-9_:]*", span.removeprefix(CRATE + "::")).group(0)
        if head:
            spans.add(head)
    # An associated item's key ends in `::` (`Dialect::ALL::`).
    segments = key.rstrip(":").split("::")
    first_type = next((i for i, s in enumerate(segments) if s[:1].isupper()), None)
    least = len(segments) - first_type if first_type is not None else min(2, len(segments))
    return any("::".join(segments[-n:]) in spans for n in range(least, len(segments) + 1))


def check(json_path, baseline_path, changelog):
    current = set(listing(json_path))
    with open(baseline_path, encoding="utf-8") as f:
        baseline = {l.rstrip("\n") for l in f if l.strip() and not l.startswith("//")}
    gone = sorted(baseline - current)
    added = sorted(current - baseline)
    section = unreleased(changelog)
    missing = [line for line in gone if not mentioned(key_of(line), section)]
    print(
        f"public API: {len(current)} lines; against the baseline {len(added)} added, "
        f"{len(gone)} removed or changed, {len(gone) - len(missing)} of those named in "
        f"CHANGELOG.md's Unreleased section"
    )
    if missing:
        print(
            "\nRemoved or changed since the baseline, and not named in backticks in "
            "CHANGELOG.md's `## Unreleased` section (a breaking change must be):"
        )
        for line in missing:
            print(f"  {key_of(line)}:  {line}")
        new = [l for l in added if key_of(l) in {key_of(m) for m in missing}]
        if new:
            print("\nwhat the current API has in their place:")
            for line in new:
                print(f"  {line}")
        return 1
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "list":
        for line in listing(argv[2]):
            print(line)
        return 0
    if len(argv) == 5 and argv[1] == "check":
        return check(argv[2], argv[3], argv[4])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
