#!/usr/bin/env python3
"""The public API of the `ptxspec` crate, one item a line, from rustdoc's
JSON (nightly: `cargo +nightly rustdoc -p ptxspec --lib -- -Z
unstable-options --output-format json`): every public module, type,
function, constant, trait and re-export reachable from the crate's root,
and the public methods, fields and variants of its own types — functions
and methods with their signatures, fields with their types, variants with
their fields — so that a changed signature changes the list. Types are
named by their last path segment (`Result<Image, Error>`), as the code
reads. A re-export of another
crate's item is listed by both paths; where ptxspec-core's JSON is given
too (the second argument), a re-exported type of core is listed with its
methods, fields and variants as this crate's own are. `#[non_exhaustive]`
on a type or a variant is listed (`attr`): adding or removing it is a
change of the contract. A trait is listed with its methods (`trait-method`,
`(provided)` where it has a body: a required one added breaks implementors)
and associated items; a type with the traits it implements (`impl Trait for
Type`, the auto traits `Send`, `Sync`, `Unpin`, `UnwindSafe` and
`RefUnwindSafe` among them, `!Trait` where they are not): a dependent relies
on each.

Every public enum, this crate's or re-exported from ptxspec-core, must be
`#[non_exhaustive]` (a new variant is then not a breaking change): one that
is not is named on standard error and the exit status is 1.

    ci/public_api.py target/doc/ptxspec.json target/doc/ptxspec_core.json > api/ptxspec.txt

With `--list-only`, the list alone: the rules above are not checked (an old
release's API, listed to compare, is what it was).
"""
import json
import os
import re
import sys

list_only = "--list-only" in sys.argv
if list_only:
    sys.argv.remove("--list-only")
doc = json.load(open(sys.argv[1]))
index = doc["index"]
# ptxspec-core's JSON, where given: the items the facade re-exports from it
# are listed with their methods, fields, variants and attributes too.
core = json.load(open(sys.argv[2])) if len(sys.argv) > 2 else None
# The index the walk reads now (this crate's, or core's for its items).
current = {"index": index}


def item(i):
    return current["index"].get(str(i))


def core_item(path):
    """ptxspec-core's item at `path` (as rustdoc's `paths` names it, crate
    first), or None."""
    if core is None:
        return None
    want = list(path)
    want[0] = "ptxspec_core"
    for i, p in core["paths"].items():
        if p.get("crate_id") == 0 and p.get("path") == want:
            return core["index"].get(i)
    return None


def public(it):
    return it is not None and it.get("visibility") == "public"


lines = set()
# Public enums not marked #[non_exhaustive], by the path that exports them.
exhaustive = []
# Types re-exported from core that its JSON does not hold.
missing_in_core = []
CORE_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "ptxspec-core", "src")


def non_exhaustive(attrs):
    """Whether rustdoc's attributes (strings or objects, by format) mark it."""
    return any("non_exhaustive" in json.dumps(a) for a in attrs or [])


def core_enum_is_non_exhaustive(core_path):
    """Whether ptxspec-core's enum at `core_path` (its public path, as
    rustdoc's `paths` gives it) is declared #[non_exhaustive]: its
    declaration is looked for in the sources of that module."""
    name, module = core_path[-1], core_path[1:-1]
    base = os.path.join(CORE_SRC, *module)
    files = [base + ".rs"] if os.path.isfile(base + ".rs") else []
    for root, _, names in os.walk(base):
        files += [os.path.join(root, n) for n in names if n.endswith(".rs")]
    found = False
    decl = re.compile(r"((?:#\[[^\n]*\]\s*|///[^\n]*\n\s*)*)pub enum " + re.escape(name) + r"\b")
    for f in files:
        for m in decl.finditer(open(f).read()):
            found = True
            if "#[non_exhaustive]" not in m.group(1):
                return False
    return found


def ty(t):
    """A type of rustdoc's JSON as Rust writes it, paths by their last
    segment."""
    if t is None:
        return "()"
    kind, v = next(iter(t.items()))
    if kind == "resolved_path":
        return v["path"].split("::")[-1] + generic_args(v.get("args"))
    if kind in ("generic", "primitive"):
        return v
    if kind == "borrowed_ref":
        lifetime = f"{v['lifetime']} " if v.get("lifetime") else ""
        return f"&{lifetime}{'mut ' if v['is_mutable'] else ''}{ty(v['type'])}"
    if kind == "raw_pointer":
        return f"*{'mut' if v['is_mutable'] else 'const'} {ty(v['type'])}"
    if kind == "slice":
        return f"[{ty(v)}]"
    if kind == "array":
        return f"[{ty(v['type'])}; {v['len']}]"
    if kind == "tuple":
        return "(" + ", ".join(ty(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if kind == "impl_trait":
        return "impl " + " + ".join(bound(b) for b in v)
    if kind == "dyn_trait":
        traits = [poly(p) for p in v.get("traits", [])]
        if v.get("lifetime"):
            traits.append(v["lifetime"])
        return "dyn " + " + ".join(traits)
    if kind == "qualified_path":
        trait = v.get("trait")
        self_ty = ty(v["self_type"])
        if trait:
            return f"<{self_ty} as {trait['path'].split('::')[-1]}>::{v['name']}"
        return f"{self_ty}::{v['name']}"
    return kind


def generic_args(args):
    if not args or "angle_bracketed" not in args:
        if args and "parenthesized" in args:
            p = args["parenthesized"]
            out = f" -> {ty(p['output'])}" if p.get("output") else ""
            return "(" + ", ".join(ty(x) for x in p["inputs"]) + ")" + out
        return ""
    a = args["angle_bracketed"]
    parts = []
    for arg in a.get("args", []):
        k, v = next(iter(arg.items()))
        parts.append(ty(v) if k == "type" else v if k == "lifetime" else json.dumps(v))
    for c in a.get("constraints", []):
        b = c.get("binding", {})
        if "equality" in b:
            eq = b["equality"]
            parts.append(f"{c['name']} = {ty(eq['type']) if 'type' in eq else json.dumps(eq)}")
        else:
            parts.append(f"{c['name']}: " + " + ".join(bound(x) for x in b.get("constraint", [])))
    return "<" + ", ".join(parts) + ">" if parts else ""


def poly(p):
    return p["trait"]["path"].split("::")[-1] + generic_args(p["trait"].get("args"))


def bound(b):
    if "trait_bound" in b:
        t = b["trait_bound"]
        prefix = "?" if t.get("modifier") == "maybe" else ""
        return prefix + t["trait"]["path"].split("::")[-1] + generic_args(t["trait"].get("args"))
    if "outlives" in b:
        return b["outlives"]
    return json.dumps(b)


def signature(f):
    """`<generics>(inputs) -> output` of a function item's `inner`."""
    params = []
    for g in f["generics"]["params"]:
        kind = g["kind"]
        if "lifetime" in kind:
            params.append(g["name"])
        elif "type" in kind and not kind["type"].get("is_synthetic"):
            bounds = kind["type"].get("bounds", [])
            params.append(g["name"] + (": " + " + ".join(bound(b) for b in bounds) if bounds else ""))
        elif "const" in kind:
            params.append(f"const {g['name']}: {ty(kind['const']['type'])}")
    inputs = []
    for name, t in f["sig"]["inputs"]:
        if name == "self":
            inputs.append({"Self": "self", "&Self": "&self", "&mut Self": "&mut self"}.get(ty(t), f"self: {ty(t)}"))
        else:
            inputs.append(f"{name}: {ty(t)}")
    out = f["sig"].get("output")
    text = ("<" + ", ".join(params) + ">" if params else "") + "(" + ", ".join(inputs) + ")"
    # An `unsafe fn` says so: making a function unsafe (or safe) changes
    # its contract, and the list.
    unsafe = " unsafe" if f.get("header", {}).get("is_unsafe") else ""
    return unsafe + text + (f" -> {ty(out)}" if out is not None else "")


def variant_fields(vi):
    kind = vi["inner"]["variant"]["kind"]
    if kind == "plain":
        return ""
    if "tuple" in kind:
        return "(" + ", ".join(ty(item(f)["inner"]["struct_field"]) if f is not None and item(f) else "_" for f in kind["tuple"]) + ")"
    fields = [item(f) for f in kind["struct"]["fields"]]
    return " { " + ", ".join(f"{fi['name']}: {ty(fi['inner']['struct_field'])}" for fi in fields if fi) + " }"


def walk_type(it, path):
    """Public fields, variants, inherent methods and attributes of a type."""
    kind, inner = next(iter(it["inner"].items()))
    if kind == "enum" and not non_exhaustive(it.get("attrs")):
        exhaustive.append(path)
    if non_exhaustive(it.get("attrs")):
        lines.add(f"attr {path} #[non_exhaustive]")
    fields = []
    if kind == "struct":
        k = inner.get("kind", {})
        if isinstance(k, dict) and "plain" in k:
            fields = k["plain"].get("fields", [])
    for f in fields:
        fi = item(f)
        if public(fi):
            lines.add(f"field {path}::{fi['name']}: {ty(fi['inner']['struct_field'])}")
    if kind == "enum":
        for v in inner.get("variants", []):
            vi = item(v)
            if vi:
                lines.add(f"variant {path}::{vi['name']}{variant_fields(vi)}")
                if non_exhaustive(vi.get("attrs")):
                    lines.add(f"attr {path}::{vi['name']} #[non_exhaustive]")
    for impl_id in inner.get("impls", []):
        imp = item(impl_id)
        if not imp:
            continue
        ii = imp["inner"]["impl"]
        if ii.get("blanket_impl"):
            continue
        if ii.get("trait") is not None:
            # A trait it implements (auto traits are the synthetic ones).
            trait = ii["trait"]["path"].split("::")[-1] + generic_args(ii["trait"].get("args"))
            negative = "!" if ii.get("is_negative") else ""
            auto = " (auto)" if ii.get("is_synthetic") else ""
            lines.add(f"impl {negative}{trait} for {path}{auto}")
            continue
        for m in ii.get("items", []):
            mi = item(m)
            if public(mi):
                mk, mv = next(iter(mi["inner"].items()))
                if mk == "function":
                    lines.add(f"method {path}::{mi['name']}{signature(mv)}")
                elif mk == "constant":
                    lines.add(f"constant {path}::{mi['name']}: {ty(mv['type'])}")
                else:
                    lines.add(f"{mk} {path}::{mi['name']}")


def walk_trait(inner, path):
    """A trait's methods and associated items."""
    for m in inner.get("items", []):
        mi = item(m)
        if mi is None:
            continue
        mk, mv = next(iter(mi["inner"].items()))
        if mk == "function":
            provided = " (provided)" if mv.get("has_body") else ""
            lines.add(f"trait-method {path}::{mi['name']}{signature(mv)}{provided}")
        else:
            lines.add(f"trait-{mk} {path}::{mi['name']}")


def walk(module_id, path, seen):
    if module_id in seen:
        return
    seen.add(module_id)
    mod = item(module_id)
    for child in mod["inner"]["module"]["items"]:
        it = item(child)
        if not public(it):
            continue
        kind, inner = next(iter(it["inner"].items()))
        if kind == "use":
            name = inner["name"]
            target = inner.get("id")
            ti = item(target) if target is not None else None
            if inner.get("is_glob"):
                lines.add(f"use {path}::* = {inner['source']}")
                continue
            if ti is None:
                # As the re-export names it: another crate's private module
                # paths are not this crate's API.
                lines.add(f"use {path}::{name} = {inner['source']}")
                summary = doc["paths"].get(str(target), {})
                if summary.get("kind") == "enum" and not core_enum_is_non_exhaustive(summary["path"]):
                    exhaustive.append(f"{path}::{name} (ptxspec_core::{'::'.join(summary['path'][1:])})")
                found = core_item(summary["path"]) if summary.get("kind") in ("struct", "enum", "union") else None
                if found is not None:
                    # A re-exported type of core: its members are this
                    # crate's API as much as its own types' are.
                    current["index"] = core["index"]
                    walk_type(found, f"{path}::{name}")
                    current["index"] = index
                elif core is not None and summary.get("kind") in ("struct", "enum", "union"):
                    missing_in_core.append(f"{path}::{name}")
                continue
            tkind = next(iter(ti["inner"]))
            if tkind == "module":
                lines.add(f"module {path}::{name}")
                walk(target, f"{path}::{name}", seen)
            else:
                lines.add(f"{tkind} {path}::{name}{signature(ti['inner']['function']) if tkind == 'function' else ''}")
                if tkind in ("struct", "enum", "union"):
                    walk_type(ti, f"{path}::{name}")
                if tkind == "trait":
                    walk_trait(ti["inner"]["trait"], f"{path}::{name}")
            continue
        name = it.get("name")
        if kind == "module":
            lines.add(f"module {path}::{name}")
            walk(child, f"{path}::{name}", seen)
        elif kind == "impl":
            continue
        else:
            lines.add(f"{kind} {path}::{name}{signature(inner) if kind == 'function' else ''}")
            if kind in ("struct", "enum", "union"):
                walk_type(it, f"{path}::{name}")
            if kind == "trait":
                walk_trait(inner, f"{path}::{name}")


walk(doc["root"], index[str(doc["root"])]["name"], set())
print("\n".join(sorted(lines)))
if list_only:
    sys.exit(0)
# One home per item: the crate root and its own module at the most. An item
# at a third path (a module re-exporting another's types) is refused.
homes = {}
for line in lines:
    kind, _, rest = line.partition(" ")
    if kind not in ("struct", "enum", "trait", "union", "type", "function", "macro", "constant"):
        continue
    path = re.split(r"[<( ]", rest)[0]
    homes.setdefault((kind, path.rsplit("::", 1)[-1]), set()).add(path)
too_many = sorted(f"{k[1]}: {', '.join(sorted(v))}" for k, v in homes.items() if len(v) > 2)
for t in too_many:
    print(f"public API: an item at more than two paths (the root and its own module at most): {t}", file=sys.stderr)
if exhaustive:
    for e in sorted(set(exhaustive)):
        print(f"public API: enum {e} is not #[non_exhaustive]", file=sys.stderr)
for m in sorted(set(missing_in_core)):
    print(f"public API: {m} is re-exported from ptxspec-core, whose JSON does not hold it", file=sys.stderr)
if exhaustive or too_many or missing_in_core:
    sys.exit(1)
