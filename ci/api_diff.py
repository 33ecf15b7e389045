#!/usr/bin/env python3
"""Whether a crate's public API, as ci/public_api.py lists it, breaks the
release's where the crate's version does not allow it (semver: 0.x breaks
only with a new minor number, x.y (x >= 1) with a new major).

A break is an item of the release's list that today's lacks (removed,
renamed, or a signature, field type or variant changed: the list writes
them out), or `#[non_exhaustive]` added where the release had none (a
dependent could build or match it exhaustively). Added items are not.

    ci/api_diff.py --crate NAME --release 0.1.0 --version 0.2.0 RELEASE.txt CURRENT.txt
    ci/api_diff.py --self-test

Prints what breaks (at most 60 items, and the count) and exits 1 where the
version does not allow it.
"""
import argparse
import re
import sys


def breaks(release_lines, current_lines):
    """The release's items today's list lacks, and the `attr ...
    #[non_exhaustive]` lines today's list adds, each sorted."""
    release, current = set(release_lines), set(current_lines)
    removed = sorted(release - current)
    # An item's path: the second word's `a::b::c`, before its signature,
    # generics, fields or type.
    had = {m.group(1) for line in release if (m := re.match(r"\S+ ((?:\w+::)*\w+)", line))}
    newly_non_exhaustive = sorted(
        line
        for line in current - release
        if line.startswith("attr ") and "#[non_exhaustive]" in line and line.split(" ")[1] in had
    )
    return removed, newly_non_exhaustive


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
    removed, newly_non_exhaustive = breaks(release_lines, current_lines)
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
