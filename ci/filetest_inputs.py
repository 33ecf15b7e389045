#!/usr/bin/env python3
"""Write the input PTX of the golden filetests (filetests/<case>/*.ptx).

Each case's inputs are NVRTC 12.9's output for CUDA sources of this
repository (kernels/, tests/corpus/), committed so that the filetests need no
CUDA tools and never change with the compiler. The first input of a case
starts with the case's header line (`// post-link: OPTIONS`), which the
filetest runner reads; this script writes it from CASES below.

Run it only to add a case or to move to another NVRTC, then bless the
expected outputs (PTXSPEC_BLESS=1 cargo test --test filetests) and review the diff.
Inputs of cases not produced from CUDA sources (hand-written PTX for error
cases, a kernel renamed to a 285-character name) are left alone.

Needs libnvrtc and the CUDA headers: `source ci/install-nvidia-tools.sh`.
"""
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import nvrtc_compile  # noqa: E402  (same NVRTC loading and error handling)

ROOT = pathlib.Path(__file__).resolve().parent.parent
FILETESTS = ROOT / "filetests"

K = "kernels/"
C = "crates/ptxspec-cli/tests/corpus/"

# (case, post-link options, arch, extra NVRTC flags, sources in input order).
# Input files are named <n>_<stem>.ptx so that their order is the order here.
CASES = [
    # The example kernels: modes, buffers, splits, composites with padding.
    ("conv3x3_default", "", "70", [], [K + "conv3x3.cu"]),
    ("conv3x3_global", "--buffer global", "70", [], [K + "conv3x3.cu"]),
    ("conv3x3_param", "--buffer param", "70", [], [K + "conv3x3.cu"]),
    ("conv3x3_aot", "--mode aot", "70", [], [K + "conv3x3.cu"]),
    ("matmul_default", "", "70", [], [K + "matmul.cu"]),
    ("matmul_per_kernel", "--split per_kernel", "70", [], [K + "matmul.cu"]),
    ("matmul_aot_per_kernel", "--mode aot --split per_kernel", "70", [], [K + "matmul.cu"]),
    ("matmul_global_per_kernel", "--buffer global --split per_kernel", "70", [], [K + "matmul.cu"]),
    ("pod_struct", "", "70", [], [K + "pod.cu"]),
    ("pod_struct_global", "--buffer global", "70", [], [K + "pod.cu"]),
    ("pod_struct_aot", "--mode aot", "70", [], [K + "pod.cu"]),
    ("scalars_padding", "", "70", [], [K + "scalars.cu"]),
    ("scalars_padding_global", "--buffer global", "70", [], [K + "scalars.cu"]),
    ("scalars_padding_aot", "--mode aot", "70", [], [K + "scalars.cu"]),
    ("tiny_sm90", "", "90", [], [K + "tiny.cu"]),
    # Two translation units, both orders, every split.
    ("two_tu", "", "70", [], [K + "two_tu_kernel.cu", K + "two_tu_helper.cu"]),
    ("two_tu_reversed", "", "70", [], [K + "two_tu_helper.cu", K + "two_tu_kernel.cu"]),
    ("two_tu_split_off", "--split off", "70", [], [K + "two_tu_kernel.cu", K + "two_tu_helper.cu"]),
    ("two_tu_per_kernel_global", "--split per_kernel --buffer global", "70", [],
     [K + "two_tu_kernel.cu", K + "two_tu_helper.cu"]),
    ("two_tu_aot", "--mode aot", "70", [], [K + "two_tu_kernel.cu", K + "two_tu_helper.cu"]),
    # One name in ten scopes and every declaration form; internal linkage in
    # two units, in images of their own and in one image.
    ("same_name", "", "70", [], [K + "same_name.cu", K + "same_name_other.cu"]),
    ("same_name_split_off", "--split off", "70", [], [K + "same_name.cu", K + "same_name_other.cu"]),
    ("examples_linked_off", "--split off", "70", [],
     [K + "conv3x3.cu", K + "pod.cu", K + "tiny.cu"]),
    ("examples_linked_per_source", "--split per_source", "70", [],
     [K + "conv3x3.cu", K + "pod.cu", K + "tiny.cu"]),
    # Device requirements: aspects two calls deep in another unit.
    ("features_two_tu", "", "70", [], [K + "features.cu", K + "features_helper.cu"]),
    ("features_split_off", "--split off", "70", [], [K + "features.cu", K + "features_helper.cu"]),
    ("features_per_kernel", "--split per_kernel", "70", [], [K + "features.cu", K + "features_helper.cu"]),
    ("half_math_aspects", "", "80", [], [C + "half_math.cu"]),
    ("reduce_sub_group", "", "80", [], [C + "reduce.cu"]),
    ("printf_atomics", "", "80", [], [C + "printf_atomics.cu"]),
    ("tensor_cores_sm80", "", "80", [], [C + "tensor_cores.cu"]),
    # Debug builds and line information.
    ("softmax_lineinfo", "", "80", ["-lineinfo"], [C + "softmax.cu"]),
    ("softmax_debug", "", "80", ["-G"], [C + "softmax.cu"]),
    ("tiny_debug_global", "--buffer global", "80", ["-G"], [K + "tiny.cu"]),
    ("two_tu_lineinfo", "", "80", ["-lineinfo"], [K + "two_tu_kernel.cu", K + "two_tu_helper.cu"]),
    # sm_90's :: syntax.
    ("hopper_barrier_sm90", "", "90", [], [C + "hopper_barrier.cu"]),
    ("cache_hints_sm90", "--split per_kernel", "90", [], [C + "cache_hints.cu"]),
    ("clusters_sm90", "", "90", [], [C + "clusters.cu"]),
    # Getters out of line, no getters at all, device-side launches.
    ("noinline_calls", "", "80", [], [C + "noinline.cu"]),
    ("noinline_calls_per_kernel_aot", "--mode aot --split per_kernel", "80", [], [C + "noinline.cu"]),
    ("plain_no_getters", "", "80", [], [C + "plain.cu"]),
    ("dynamic_parallelism", "", "80", [], [C + "dynamic_parallelism.cu"]),
    ("dynamic_parallelism_param_refused", "--buffer param", "80", [], [C + "dynamic_parallelism.cu"]),
    ("attention_tiles", "", "80", [], [C + "attention.cu"]),
]


def main():
    nvrtc = nvrtc_compile.load_nvrtc()
    include = [d for d in os.environ.get("PTXSPEC_CUDA_INCLUDE", "").split(":") if d]
    os.chdir(ROOT)
    for case, options, arch, flags, sources in CASES:
        opts = ["-rdc=true", "-std=c++17", f"-arch=compute_{arch}",
                "-Icrates/ptxspec-core/include", "-Ikernels", "-Icrates/ptxspec-cli/tests/corpus"]
        opts += [f"-I{d}" for d in include] + flags
        nvrtc_compile.OPTIONS[:] = opts
        out = FILETESTS / case
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("*.ptx"):
            old.unlink()
        for n, src in enumerate(sources, 1):
            ptx = nvrtc_compile.compile_ptx(nvrtc, pathlib.Path(src))
            # NVRTC names files by absolute path in debug information:
            # relative to the repository, so that every checkout writes the same.
            ptx = ptx.replace(f'"{ROOT}/', '"')
            if n == 1:
                ptx = f"// post-link: {options}".rstrip() + "\n" + ptx
            dest = out / f"{n}_{pathlib.Path(src).stem}.ptx"
            dest.write_text(ptx)
        print(f"filetest_inputs: {case}: {len(sources)} input(s)", file=sys.stderr)


if __name__ == "__main__":
    main()
