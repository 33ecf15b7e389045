#!/usr/bin/env python3
"""Whether a crate's public API, as ci/public_api.py lists it, breaks the
release's where the crate's version does not allow it (semver: 0.x breaks
only with a new minor number, x.y (x >= 1) with a new major).

A break is an item of the release's list that today's lacks (removed,
renamed, or a signature, field type or variant changed, an auto trait or
another trait a type no longer implements: the list writes them out),
`#[non_exhaustive]` added where the release had none (a dependent could
build or match it exhaustively) — or an addition that breaks: a field of a
struct, or a variant of an enum, that the release had without
`#[non_exhaustive]` (a dependent's literal or exhaustive match), or a
required method of a trait the release had (its implementors). Other
additions are not.

    ci/api_diff.py --crate NAME --release 0.1.0 --version 0.2.0 RELEASE.txt CURRENT.txt
    ci/api_diff.py --self-test

Prints what breaks (at most 60 items, and the count) and exits 1 where the
version does not allow it.
"""
import argparse
import re
import sys


def breaks(release_lines, current_lines):
    """The release's items today's list lacks, and the lines today's list
    adds that break (`attr ... #[non_exhaustive]` on what the release had; a
    field or variant of the release's exhaustive struct or enum; a required
    method of the release's trait), each sorted."""
    release, current = set(release_lines), set(current_lines)
    removed = sorted(release - current)
    # An item's path: the second word's `a::b::c`, before its signature,
    # generics, fields or type.
    had = {m.group(1) for line in release if (m := re.match(r"\S+ ((?:\w+::)*\w+)", line))}
    kinds = {}
    for line in release:
        m = re.match(r"(struct|enum|trait) ((?:\w+::)*\w+)", line)
        if m:
            kinds[m.group(2)] = m.group(1)
    non_exhaustive = {line.split(" ")[1] for line in release if line.startswith("attr ") and "#[non_exhaustive]" in line}

    def owner(line):
        m = re.match(r"\S+ ((?:\w+::)*\w+)", line)
        return m.group(1).rsplit("::", 1)[0] if m else None

    breaking_additions = []
    for line in current - release:
        word = line.split(" ")[0]
        o = owner(line)
        if word == "attr" and "#[non_exhaustive]" in line and line.split(" ")[1] in had:
            breaking_additions.append(line)
        elif word == "field" and kinds.get(o) == "struct" and o not in non_exhaustive:
            breaking_additions.append(line)
        elif word == "variant" and kinds.get(o) == "enum" and o not in non_exhaustive:
            breaking_additions.append(line)
        elif word == "trait-method" and kinds.get(o) == "trait" and not line.endswith("(provided)"):
            breaking_additions.append(line)
    return removed, sorted(breaking_additions)


def version_tuple(text):
    core = text.split("+")[0].split("-")[0]
    parts = core.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a semver version: {text!r}")
    return tuple(int(p) for p in parts)


def allows_break(release, version):
    """Whether going from `release` to `version` may break the API."""
    r, v = version_tuple(release), version_tuple(version)
    if r[0] == 0:
        return v[0] > 0 or v[1] > r[1]
    return v[0] > r[0]


def self_test():
    assert allows_break("0.1.0", "0.2.0")
    assert allows_break("0.1.3", "1.0.0")
    assert not allows_break("0.1.0", "0.1.1")
    assert not allows_break("0.1.0", "0.1.0")
    assert allows_break("1.2.3", "2.0.0")
    assert not allows_break("1.2.3", "1.3.0")
    assert not allows_break("1.2.3", "1.2.4-rc.1")
    for bad in ["0.1", "x.1.0", "0.1.0.0", ""]:
        try:
            version_tuple(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} taken for a version")
    release = ["fn a::f() -> u8", "struct a::S", "attr a::E #[non_exhaustive]"]
    assert breaks(release, release) == ([], [])
    assert breaks(release, release + ["fn a::g()"]) == ([], [])
    assert breaks(release, ["fn a::f() -> u16", "struct a::S", "attr a::E #[non_exhaustive]"]) == (
        ["fn a::f() -> u8"],
        [],
    )
    assert breaks(release, release + ["attr a::S #[non_exhaustive]"]) == ([], ["attr a::S #[non_exhaustive]"])
    assert breaks(release, release[:2]) == (["attr a::E #[non_exhaustive]"], [])
    # A new item may be non-exhaustive from its start; a new variant too.
    assert breaks(release, release + ["enum a::N", "attr a::N #[non_exhaustive]"]) == ([], [])
    variants = ["variant a::E::V(String)", "variant a::E::W { x: u8 }"]
    assert breaks(variants, variants + ["attr a::E::W #[non_exhaustive]"]) == (
        [],
        ["attr a::E::W #[non_exhaustive]"],
    )
    assert breaks(variants, variants + ["attr a::E::X #[non_exhaustive]"]) == ([], [])
    # A fixture per kind of break the gate must fail on.
    exhaustive = ["struct a::P", "field a::P::x: u8", "enum a::K", "variant a::K::A", "trait a::T",
                  "trait-method a::T::f(&self)", "impl Send for a::P (auto)", "impl Clone for a::P"]
    fixtures = {
        "a field added to an exhaustive struct": (exhaustive + ["field a::P::y: u8"], [], ["field a::P::y: u8"]),
        "a variant added to an exhaustive enum": (exhaustive + ["variant a::K::B"], [], ["variant a::K::B"]),
        "a required method added to a trait": (exhaustive + ["trait-method a::T::g(&self)"], [],
                                               ["trait-method a::T::g(&self)"]),
        "an auto trait lost": ([l for l in exhaustive if "Send" not in l], ["impl Send for a::P (auto)"], []),
        "a trait impl lost": ([l for l in exhaustive if "Clone" not in l], ["impl Clone for a::P"], []),
        "a signature changed": ([l.replace("(&self)", "(&mut self)") for l in exhaustive],
                                ["trait-method a::T::f(&self)"], ["trait-method a::T::f(&mut self)"]),
    }
    for what, (current, gone, added) in fixtures.items():
        assert breaks(exhaustive, current) == (gone, added), what
        assert not allows_break("0.2.0", "0.2.1") and (gone or added), what
    # Additions that break nothing: a provided method, a field of a
    # non-exhaustive struct, a new type.
    fine = exhaustive + ["attr a::Q #[non_exhaustive]", "struct a::Q", "field a::Q::z: u8"]
    assert breaks(exhaustive + ["struct a::Q", "attr a::Q #[non_exhaustive]"], fine) == ([], [])
    assert breaks(exhaustive, exhaustive + ["trait-method a::T::h(&self) (provided)"]) == ([], [])
    print("api_diff: self-test passed", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--self-test", action="store_true")
    parser.add_argument("--crate")
    parser.add_argument("--release")
    parser.add_argument("--version")
    parser.add_argument("lists", nargs="*")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    if not (args.crate and args.release and args.version and len(args.lists) == 2):
        parser.error("--crate, --release, --version and two lists are needed")
    release_lines, current_lines = (open(p).read().splitlines() for p in args.lists)
    removed, newly_non_exhaustive = breaks(release_lines, current_lines)  # breaking additions
    added = len(set(current_lines) - set(release_lines)) - len(newly_non_exhaustive)
    if not removed and not newly_non_exhaustive:
        print(
            f"semver: {args.crate}: nothing of {args.release}'s API ({len(release_lines)} items) broken; {added} added",
            file=sys.stderr,
        )
        return 0
    shown = [f"  - {line}" for line in removed] + [f"  + {line}" for line in newly_non_exhaustive]
    count = len(shown)
    allowed = allows_break(args.release, args.version)
    verdict = (
        f"version {args.version} allows it (CHANGELOG says what broke)"
        if allowed
        else f"version {args.version} does not allow it: raise it ({'the minor number' if version_tuple(args.release)[0] == 0 else 'the major number'}) and say what broke in the CHANGELOG"
    )
    print(
        f"semver: {args.crate}: {count} items of {args.release}'s API gone, changed or newly non-exhaustive; {verdict}",
        file=sys.stderr,
    )
    for line in shown[:60]:
        print(line, file=sys.stderr)
    if count > 60:
        print(f"  … and {count - 60} more", file=sys.stderr)
    return 0 if allowed else 1


if __name__ == "__main__":
    sys.exit(main())
