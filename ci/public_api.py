#!/usr/bin/env python3
"""The public API of the `ptxspec` crate, one item a line, from rustdoc's
JSON (nightly: `cargo +nightly rustdoc -p ptxspec --lib -- -Z
unstable-options --output-format json`): every public module, type,
function, constant, trait and re-export reachable from the crate's root,
and the public methods and fields of its own types. A re-export of another
crate's item is listed by both paths; that item's own methods are not (the
JSON holds only this crate's items).

    ci/public_api.py target/doc/ptxspec.json > api/ptxspec.txt
"""
import json
import sys

doc = json.load(open(sys.argv[1]))
index = doc["index"]


def item(i):
    return index.get(str(i))


def public(it):
    return it is not None and it.get("visibility") == "public"


lines = set()


def walk_type(it, path):
    """Public fields and inherent methods of one of this crate's types."""
    kind, inner = next(iter(it["inner"].items()))
    fields = []
    if kind == "struct":
        k = inner.get("kind", {})
        if isinstance(k, dict) and "plain" in k:
            fields = k["plain"].get("fields", [])
    for f in fields:
        fi = item(f)
        if public(fi):
            lines.add(f"field {path}::{fi['name']}")
    if kind == "enum":
        for v in inner.get("variants", []):
            vi = item(v)
            if vi:
                lines.add(f"variant {path}::{vi['name']}")
    for impl_id in inner.get("impls", []):
        imp = item(impl_id)
        if not imp:
            continue
        ii = imp["inner"]["impl"]
        if ii.get("trait") is not None or ii.get("is_synthetic") or ii.get("blanket_impl"):
            continue
        for m in ii.get("items", []):
            mi = item(m)
            if public(mi):
                mk = next(iter(mi["inner"]))
                lines.add(f"{'method' if mk == 'function' else mk} {path}::{mi['name']}")


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
                continue
            tkind = next(iter(ti["inner"]))
            if tkind == "module":
                lines.add(f"module {path}::{name}")
                walk(target, f"{path}::{name}", seen)
            else:
                lines.add(f"{tkind} {path}::{name}")
                if tkind in ("struct", "enum", "union"):
                    walk_type(ti, f"{path}::{name}")
            continue
        name = it.get("name")
        if kind == "module":
            lines.add(f"module {path}::{name}")
            walk(child, f"{path}::{name}", seen)
        elif kind == "impl":
            continue
        else:
            lines.add(f"{kind} {path}::{name}")
            if kind in ("struct", "enum", "union"):
                walk_type(it, f"{path}::{name}")


walk(doc["root"], "ptxspec", set())
print("\n".join(sorted(lines)))
