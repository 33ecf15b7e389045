#!/usr/bin/env python3
"""Compile the example kernels (kernels/*.cu) to PTX with NVRTC.

Writes kernels/ptx/<name>.ptx, which is committed so that `cargo build` needs
no CUDA tools. `--check` compiles into memory and fails when a committed file
differs (CI runs it). Needs libnvrtc: PTXSPEC_NVRTC names it (set by
ci/install-nvidia-tools.sh), else the loader's search path is used.

Options are fixed here so that every machine produces the same bytes:
relocatable device code (the getter calls stay external until post-link),
C++17, and virtual architecture compute_70.
"""
import ctypes
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels"
HEADER_DIR = ROOT / "crates" / "ptxspec-core" / "include"
OUT = KERNELS / "ptx"
OPTIONS = ["-rdc=true", "-std=c++17", "-arch=compute_70", f"-I{HEADER_DIR}", f"-I{KERNELS}"]


def load_nvrtc():
    name = os.environ.get("PTXSPEC_NVRTC", "libnvrtc.so.12")
    try:
        return ctypes.CDLL(name)
    except OSError as e:
        sys.exit(f"nvrtc_compile: cannot load NVRTC ({name}): {e}\n"
                 "  run `source ci/install-nvidia-tools.sh` first")


def compile_ptx(nvrtc, path):
    prog = ctypes.c_void_p()
    src = path.read_bytes()
    check(nvrtc, nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, path.name.encode(), 0, None, None), path)
    opts = (ctypes.c_char_p * len(OPTIONS))(*[o.encode() for o in OPTIONS])
    rc = nvrtc.nvrtcCompileProgram(prog, len(OPTIONS), opts)
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    if rc != 0:
        sys.exit(f"nvrtc_compile: {path.name} failed:\n{log.value.decode(errors='replace')}")
    nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    check(nvrtc, nvrtc.nvrtcGetPTX(prog, ptx), path)
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx.value.decode()


def check(nvrtc, rc, path):
    if rc != 0:
        nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
        sys.exit(f"nvrtc_compile: {path.name}: {nvrtc.nvrtcGetErrorString(rc).decode()}")


def main():
    check_only = "--check" in sys.argv[1:]
    nvrtc = load_nvrtc()
    # kernels/*.cu form one program (the examples); kernels/test_only/*.cu
    # are compiled for tests alone (they may repeat symbols of the others);
    # kernels/bench/*.cu are the GPU benchmark's baselines, without ptxspec.
    sources = sorted(KERNELS.glob("*.cu"))
    for sub in ("test_only", "bench"):
        sources += sorted((KERNELS / sub).glob("*.cu"))
    stale = []
    for src in sources:
        ptx = compile_ptx(nvrtc, src)
        dest = OUT / src.parent.relative_to(KERNELS) / (src.stem + ".ptx")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if check_only:
            if not dest.exists() or dest.read_text() != ptx:
                stale.append(dest.relative_to(ROOT))
        else:
            dest.write_text(ptx)
            print(f"nvrtc_compile: {src.relative_to(ROOT)} -> {dest.relative_to(ROOT)}", file=sys.stderr)
    if stale:
        sys.exit("nvrtc_compile: committed PTX is stale (run python3 ci/nvrtc_compile.py): "
                 + ", ".join(map(str, stale)))
    if check_only:
        print(f"nvrtc_compile: {len(sources)} kernels' PTX is current", file=sys.stderr)


if __name__ == "__main__":
    main()
