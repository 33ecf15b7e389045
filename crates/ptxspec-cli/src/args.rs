//! The command line's arguments, as clap reads them: each subcommand's
//! options and what `--help` says of them.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ptxspec",
    version,
    about = "SYCL 2020 specialization constants, kernel bundles and optional kernel features for NVIDIA GPUs through PTX",
    long_about = "SYCL 2020 specialization constants, kernel bundles and optional kernel features for NVIDIA GPUs through PTX.\n\n\
Write CUDA C++ with the device header ptxspec.cuh, then either\n  \
ptxspec compile -o OUT kernel.cu ...      (NVRTC, found at run time, compiles for you; the header is on its include path), or\n  \
ptxspec post-link -o OUT kernel.ptx ...   (PTX from any CUDA compiler, relocatable device code;\n                                            `ptxspec header -o DIR` writes the header for it).\n\
Both write device images whose getters read one specialization-constant buffer, with \
DPC++-compatible property sets. `ptxspec inspect` shows what a .prop, .ptx, .spv or .ltoir holds; \
`ptxspec specialize` bakes values into one image (PTX, an LTO cubin, or SPIR-V); \
`ptxspec aspect-filter` keeps the images a target can run. `ptxspec COMMAND --help` for each."
)]
pub(crate) struct Cli {
    /// Say what the library does on standard error: -v each cache tier
    /// asked for a cubin and what it held, links with their duration,
    /// remote refusals, breaker trips and tier-ups; -vv everything.
    /// RUST_LOG (e.g. RUST_LOG=ptxspec::link=info) chooses instead where set.
    /// Without either, only warnings, each once.
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    pub(crate) log: u8,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options shared by `post-link` and `compile`.
#[derive(clap::Args)]
pub(crate) struct PostLinkArgs {
    /// What getters become: loads of the values at run time (emulated), or
    /// immediates of the defaults (aot: values cannot be set; the image
    /// says so with specConstsReplacedWithDefault).
    #[arg(long, value_enum, default_value_t = ModeArg::Emulated)]
    pub(crate) mode: ModeArg,
    /// How kernels are grouped into device images: auto and per_source put
    /// each input's kernels in one image, per_kernel each kernel in its
    /// own, off all kernels in one. Every mode, off included, also splits
    /// kernels whose device requirements differ (aspects, work-group or
    /// sub-group size: DPC++'s optional kernel features design's rule), so an image never needs more than
    /// each of its kernels.
    #[arg(long, value_enum, default_value_t = SplitArg::Auto)]
    pub(crate) split: SplitArg,
    /// Where emulated kernels find the values: param (the values themselves
    /// in the kernel's parameter space: no upload, values per launch; sm_70
    /// or later, at most 4 KB of parameters), global (a pointer to global
    /// memory), auto (param where it fits, global elsewhere).
    #[arg(long, value_enum, default_value_t = BufferArg::Auto)]
    pub(crate) buffer: BufferArg,
    /// Device configuration (YAML: target -> aspects, sub-group-sizes);
    /// images that no target of it can run get a warning. Default: the
    /// built-in NVIDIA table (sm_50 ... sm_121).
    #[arg(long, value_name = "FILE")]
    pub(crate) device_config: Option<PathBuf>,
    /// Print the input size and how long each stage took.
    #[arg(short, long)]
    pub(crate) verbose: bool,
    /// Output directory (created if missing). It ends up holding exactly
    /// the new images: those an earlier table.txt there listed go.
    #[arg(short = 'o', long = "output", value_name = "OUTDIR")]
    pub(crate) out: PathBuf,
}

#[derive(Subcommand)]
pub(crate) enum CacheCommand {
    /// Make an ed25519 key pair for the remote cache's entries. A process
    /// with PTXSPEC_CACHE_SIGNING_KEY=SECRET writes entries signed with it;
    /// one with PTXSPEC_CACHE_TRUSTED_KEYS=FILE (public keys, one a line)
    /// loads only entries that a key in FILE signed. Keep the secret file
    /// to the machines that may write (it is created readable by its owner
    /// alone); give the public key to every reader. Neither file may exist.
    Keygen {
        /// Where the secret key goes (64 hexadecimal digits).
        #[arg(long, value_name = "FILE")]
        secret: PathBuf,
        /// Where the public key goes (64 hexadecimal digits, one line: a
        /// trusted-keys file as it is, or a line to add to one).
        #[arg(long, value_name = "FILE")]
        public: PathBuf,
    },
    /// Link value sets ahead of their first launch and upload them to the
    /// remote cache (and the disk cache), so that every process of the
    /// fleet finds them. FILE holds one value set a line: `IMAGE.prop sm_XX
    /// [kernel=NAME] [NAME=VALUE ...]` (values as `specialize --set` takes
    /// them; blank lines and `#` comments skipped); a relative IMAGE.prop
    /// is found from FILE's folder, not the working folder. Uploading needs
    /// PTXSPEC_CACHE_SIGNING_KEY. PTXSPEC_TIER_WORKERS value sets (1 to 16,
    /// default 2) link at once, each in a process of its own: give it the
    /// machine's cores.
    ///
    /// An entry is found by the image's LTO-IR, and NVRTC's LTO-IR differs
    /// from compile to compile: images `ptxspec compile` wrote warm the
    /// programs that embed those same files (ptxspec_build::embed_images_dir),
    /// not a program whose build script compiled the .cu again. To warm
    /// what such a program embeds, run the program itself with the signing
    /// key over its value sets (SpecMode::Lto builds and
    /// BuiltImage::cubin_for_kernel, or one launch each), or let
    /// PTXSPEC_TIER_PROFILE record the value sets its processes tier up.
    Warm {
        /// The list of value sets.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// What every process with the remote cache saw, counted in the store:
    /// hits and misses per tier, links, refused entries by reason — the
    /// processes of this one's trust domain (those given the same
    /// PTXSPEC_CACHE_TRUSTED_KEYS): fleets that share a store and trust
    /// other keys count apart, as they link apart.
    Stats,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Link PTX translation units, number their specialization constants,
    /// rewrite the getters and write device images.
    ///
    /// Writes OUTDIR/table.txt (a DPC++ file table, paths relative to
    /// OUTDIR) and, per device image, <stem>.ptx, <stem>.prop (property
    /// sets: specialization constants, default values, device
    /// requirements, kernel signatures) and <stem>.sym (kernel names).
    /// Nothing is written unless every input is post-linked without error,
    /// and never over an input.
    #[command(name = "post-link")]
    PostLink {
        #[command(flatten)]
        args: PostLinkArgs,
        /// PTX files, one per translation unit, compiled with relocatable
        /// device code (the getter calls stay external).
        #[arg(required = true, value_name = "IN.ptx")]
        inputs: Vec<PathBuf>,
    },
    /// Compile CUDA C++ with NVRTC and post-link the result.
    ///
    /// Each source is one translation unit, compiled with -rdc=true
    /// -std=c++17 and ptxspec.cuh on the include path (the copy built into
    /// ptxspec; `ptxspec header` writes it out)
    /// as well as the CUDA headers found (a toolkit under CUDA_PATH, or
    /// NVIDIA's wheels). Writes what `post-link` writes and, with --lto,
    /// <stem>.ltoir: the LTO-IR of the image's units, for SpecMode::Lto
    /// and `specialize --via lto`. NVRTC is found at run time
    /// (PTXSPEC_NVRTC, the library path, CUDA_PATH, /usr/local/cuda, pip's
    /// nvidia-cuda-nvrtc-cu12).
    Compile {
        #[command(flatten)]
        args: PostLinkArgs,
        /// Also compile LTO-IR (the header's LTO flavour, -dlto).
        #[arg(long)]
        lto: bool,
        /// Virtual architecture of the PTX and LTO-IR. Default: compute_75
        /// (Turing and later), the oldest that no NVRTC deprecates;
        /// compute_70 adds Volta, with NVRTC 12's deprecation warning.
        #[arg(
            long,
            default_value = "",
            hide_default_value = true,
            value_name = "compute_XX"
        )]
        arch: String,
        /// An include directory (repeat for more).
        #[arg(short = 'I', value_name = "DIR")]
        include: Vec<PathBuf>,
        /// A macro, NAME or NAME=VALUE (repeat for more).
        #[arg(short = 'D', value_name = "NAME[=VALUE]")]
        define: Vec<String>,
        /// An option passed to NVRTC as it is (repeat for more), as nvcc's
        /// -Xptxas passes ptxas's: -Xnvrtc --use_fast_math,
        /// -Xnvrtc --std=c++20, -Xnvrtc -lineinfo. NVRTC refuses one it does
        /// not know, in its own words.
        #[arg(long = "Xnvrtc", value_name = "OPTION", allow_hyphen_values = true)]
        nvrtc: Vec<String>,
        /// Also write each unit's PTX, as NVRTC made it, into this
        /// directory (before the post-link: the places its errors name,
        /// `<stem>.ptx:LINE:COL`, are in these files).
        #[arg(long, value_name = "DIR")]
        keep_ptx: Option<PathBuf>,
        /// CUDA C++ sources, one per translation unit.
        #[arg(required = true, value_name = "A.cu")]
        inputs: Vec<PathBuf>,
    },
    /// The remote cubin cache shared by processes and machines
    /// (PTXSPEC_REMOTE_CACHE=redis://HOST:PORT): its keys.
    #[command(subcommand)]
    Cache(CacheCommand),
    /// Compare two runs' choices — the verdicts of adaptive arguments that
    /// decide which code runs — and say what differs. Each of A and B is a
    /// table (what `ptxspec::choices::made()` gives, written to a file,
    /// signed or not) or a digest (64 hexadecimal digits, as
    /// `Stats::choices_digest` and a trace give it). Exits 0 where they
    /// are the same; 1 where they differ (each difference a line on
    /// standard output) or a file cannot be read (said on standard error).
    #[command(name = "verify-choices")]
    VerifyChoices {
        /// The first run's table file, or its digest.
        #[arg(value_name = "A")]
        a: String,
        /// The second run's table file, or its digest.
        #[arg(value_name = "B")]
        b: String,
    },
    /// Sign a table of choices with a secret key (`ptxspec cache keygen`
    /// makes one), for processes that pin themselves to it
    /// (`ptxspec::choices::read_signed` checks the signature against their
    /// trusted keys).
    #[command(name = "sign-choices")]
    SignChoices {
        /// The table, as `ptxspec::choices::made()` wrote it.
        #[arg(value_name = "TABLE")]
        table: PathBuf,
        /// The secret key's file.
        #[arg(long, value_name = "KEY")]
        secret: PathBuf,
        /// The signed table.
        #[arg(short, long, value_name = "OUT")]
        output: PathBuf,
    },
    /// Write the device header, ptxspec.cuh, into a directory: for CUDA
    /// compilers other than `ptxspec compile` (nvcc, clang), which then
    /// take `-I DIR`. Prints the file's path.
    Header {
        /// The directory (created if missing).
        #[arg(short, long, value_name = "DIR")]
        output: PathBuf,
    },
    /// Keep the rows of a file table whose device requirements a target
    /// supports (DPC++'s optional kernel features design's sycl-aspect-filter): rows without requirements
    /// stay, rows the target cannot run go; an unknown target is an error.
    #[command(name = "aspect-filter")]
    AspectFilter {
        /// The target: a key of the device configuration (sm_90, ...).
        #[arg(long, value_name = "NAME")]
        target: String,
        /// The device configuration file (YAML). Default: the built-in
        /// NVIDIA table (sm_50 ... sm_121, shipped with ptxspec as nvidia.yaml).
        #[arg(long = "device-config-file", value_name = "FILE")]
        device_config_file: Option<PathBuf>,
        /// The input file table (paths in it resolve against its folder).
        #[arg(value_name = "IN_TABLE")]
        input: PathBuf,
        /// The output file table.
        #[arg(short = 'o', long = "output", value_name = "OUT_TABLE")]
        out: PathBuf,
    },
    /// Bake values into one image: a device image (its .prop, with the .ptx
    /// and .ltoir beside it) or a SPIR-V module.
    ///
    /// For a device image, --via ptx writes PTX whose getters became
    /// immediates of the values (needs nothing of CUDA's); --via lto links
    /// the image's LTO-IR with the values into a cubin for --arch, so that
    /// the optimizer sees the values as it sees literals: it needs nvJitLink
    /// for the link (nvidia-nvjitlink-cu12) and, for the values'
    /// definitions, libNVVM of the same toolkit (nvidia-cuda-nvcc-cu12)
    /// or else NVRTC (nvidia-cuda-nvrtc-cu12), found at run time. Neither
    /// needs a GPU.
    ///
    /// For a SPIR-V module: new default values (it stays specializable)
    /// or, with --freeze, plain constants.
    ///
    /// VALUE is one number for a scalar, or comma-separated numbers for the
    /// scalars of a composite in memory order (`--set id_A=1,2.5,3`);
    /// booleans are true/false/1/0; a hexadecimal number (0x1f) is the
    /// number it spells, as in C; a number the type cannot hold is an
    /// error. `NAME=bytes:<hex>` gives a constant as its raw bytes, in
    /// memory order.
    Specialize {
        /// The device image's .prop, or the SPIR-V module (.spv).
        input: PathBuf,
        /// NAME=VALUE, NAME being the symbolic ID (SPIR-V: its OpName).
        /// Repeat --set for each constant; each may be set once.
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
        /// Device images, with --kernel: fix a by-value parameter of the
        /// kernel to VALUE, INDEX counting its parameters from 0 as PTX
        /// numbers KERNEL_param_N. The kernel keeps its parameter list (a
        /// launch passes the same arguments; the fixed ones are not read).
        /// VALUE: an integer (decimal or 0x hexadecimal), a float, or
        /// bytes:<hex> (an aggregate's only form, its bytes in memory
        /// order). Pointers and the kernel_handler cannot be fixed. Repeat
        /// --arg for each parameter. --via lto needs libNVVM
        /// (nvidia-cuda-nvcc-cu12).
        #[arg(long = "arg", value_name = "INDEX=VALUE")]
        args: Vec<String>,
        /// Device images: bake the values into PTX (the default: OUT is
        /// PTX text), or link an LTO cubin (OUT is a cubin; needs --arch).
        #[arg(long, value_enum, default_value_t = ViaArg::Ptx)]
        via: ViaArg,
        /// Device images with --via lto (required there): the architecture
        /// of the cubin, sm_90 for an H100.
        #[arg(long, value_name = "sm_XX")]
        arch: Option<String>,
        /// Device images with --via lto: compile only this kernel of the
        /// image (nvJitLink's -kernels-used; a cold link of one kernel of
        /// several is faster). The cubin then holds that kernel alone.
        /// With --arg: the kernel whose parameters are fixed.
        #[arg(long, value_name = "NAME")]
        kernel: Option<String>,
        /// SPIR-V: replace OpSpecConstant* by OpConstant* and drop the
        /// SpecIds.
        #[arg(long)]
        freeze: bool,
        /// The output file.
        #[arg(short = 'o', long = "output", value_name = "OUT")]
        out: PathBuf,
    },
    /// Show the specialization constants (numeric IDs, offsets, defaults),
    /// kernels and device requirements of a .prop, .ptx, .spv or .ltoir
    /// file (recognized by content, whatever its name).
    ///
    /// For PTX it shows the images `post-link` would write, with their own
    /// numbering and layout.
    Inspect {
        /// The file.
        file: PathBuf,
        /// Print one JSON document. A .prop or .spv: {"specialization_constants":
        /// {ID: [[id, offset, size], ...]}, "default_values": "hex",
        /// "device_requirements": {name: [n, ...]}}, each key only when its
        /// property set is present. PTX: {"images": [{"name", "kernels",
        /// "buffer", and the keys above}]}. LTO-IR: {"units": [{"name",
        /// "bytes"}]}.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum ModeArg {
    Emulated,
    Aot,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum SplitArg {
    Auto,
    Off,
    #[value(name = "per_kernel")]
    PerKernel,
    #[value(name = "per_source")]
    PerSource,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum BufferArg {
    Global,
    Param,
    Auto,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ViaArg {
    Ptx,
    Lto,
}
