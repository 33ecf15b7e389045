//! The `ptxspec` command line: parses arguments, calls the library, prints.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ptxspec_cli::inspect::{self, Format};
use ptxspec_core::device_config::{DeviceConfig, aspect_filter};
use ptxspec_core::postlink;
use ptxspec_core::props::FileTable;
use ptxspec_core::toolkit::worker::{self, Toolkit};

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
struct Cli {
    /// Say what the library does on standard error: -v each cache tier
    /// asked for a cubin and what it held, links with their duration,
    /// remote refusals, breaker trips and tier-ups; -vv everything.
    /// RUST_LOG (e.g. RUST_LOG=ptxspec::link=info) chooses instead where set.
    /// Without either, only warnings, each once.
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    log: u8,
    #[command(subcommand)]
    command: Command,
}

/// Installs a `tracing` subscriber on standard error where `-v` or
/// `RUST_LOG` asks for one. Without it the library's warnings go to
/// standard error once each, as they would in any program.
fn install_logging(verbosity: u8) -> Result<(), String> {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.is_empty() => EnvFilter::try_new(&directives)
            .map_err(|e| format!("RUST_LOG={directives:?} is not a filter: {e}"))?,
        _ => match verbosity {
            0 => return Ok(()),
            1 => EnvFilter::new("warn,ptxspec=debug"),
            _ => EnvFilter::new("trace"),
        },
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .without_time()
        .init();
    Ok(())
}

/// Options shared by `post-link` and `compile`.
#[derive(clap::Args)]
struct PostLinkArgs {
    /// What getters become: loads of the values at run time (emulated), or
    /// immediates of the defaults (aot: values cannot be set; the image
    /// says so with specConstsReplacedWithDefault).
    #[arg(long, value_enum, default_value_t = ModeArg::Emulated)]
    mode: ModeArg,
    /// How kernels are grouped into device images: auto and per_source put
    /// each input's kernels in one image, per_kernel each kernel in its
    /// own, off all kernels in one. Every mode, off included, also splits
    /// kernels whose device requirements differ (aspects, work-group or
    /// sub-group size: DPC++'s optional kernel features design's rule), so an image never needs more than
    /// each of its kernels.
    #[arg(long, value_enum, default_value_t = SplitArg::Auto)]
    split: SplitArg,
    /// Where emulated kernels find the values: param (the values themselves
    /// in the kernel's parameter space: no upload, values per launch; sm_70
    /// or later, at most 4 KB of parameters), global (a pointer to global
    /// memory), auto (param where it fits, global elsewhere).
    #[arg(long, value_enum, default_value_t = BufferArg::Auto)]
    buffer: BufferArg,
    /// Device configuration (YAML: target -> aspects, sub-group-sizes);
    /// images that no target of it can run get a warning. Default: the
    /// built-in NVIDIA table (sm_50 ... sm_121).
    #[arg(long, value_name = "FILE")]
    device_config: Option<PathBuf>,
    /// Print the input size and how long each stage took.
    #[arg(short, long)]
    verbose: bool,
    /// Output directory (created if missing). It ends up holding exactly
    /// the new images: those an earlier table.txt there listed go.
    #[arg(short = 'o', long = "output", value_name = "OUTDIR")]
    out: PathBuf,
}

#[derive(Subcommand)]
enum CacheCommand {
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
    /// PTXSPEC_CACHE_SIGNING_KEY.
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
    /// hits and misses per tier, links, refused entries by reason.
    Stats,
}

#[derive(Subcommand)]
enum Command {
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
enum ModeArg {
    Emulated,
    Aot,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum SplitArg {
    Auto,
    Off,
    #[value(name = "per_kernel")]
    PerKernel,
    #[value(name = "per_source")]
    PerSource,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum BufferArg {
    Global,
    Param,
    Auto,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ViaArg {
    Ptx,
    Lto,
}

/// Prints to stdout like `print!`, but a reader that has gone (`| head`)
/// ends the program quietly instead of a panic; another write error is the
/// command's error.
macro_rules! out {
    ($($arg:tt)*) => {
        emit(&format!($($arg)*))?
    };
}

/// `out!` with a newline.
macro_rules! outln {
    ($($arg:tt)*) => {
        emit(&format!("{}\n", format_args!($($arg)*)))?
    };
}

/// Writes `text` to stdout; see [`out!`].
fn emit(text: &str) -> Result<(), String> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(format!("writing to stdout: {e}")),
    }
}

fn main() -> ExitCode {
    // This binary started as the toolkit worker of another ptxspec process:
    // one call of NVIDIA's libraries, request on stdin, reply on stdout.
    if std::env::args_os().nth(1).as_deref() == Some(worker::WORKER_ARG.as_ref()) {
        let served = worker::serve(std::io::stdin().lock(), std::io::stdout().lock());
        return if served {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let cli = Cli::parse();
    if let Err(msg) = install_logging(cli.log) {
        eprintln!("ptxspec: error: {msg}");
        return ExitCode::FAILURE;
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("ptxspec: error: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::PostLink { args, inputs } => {
            postlink::refuse_post_linked(&inputs).map_err(|e| e.to_string())?;
            let texts = inputs
                .iter()
                .map(|p| read_as(p, Format::Ptx).map(|t| (p.display().to_string(), t)))
                .collect::<Result<Vec<_>, _>>()?;
            if args.verbose {
                let bytes: usize = texts.iter().map(|(_, t)| t.len()).sum();
                eprintln!(
                    "ptxspec: post-linking {}, {:.1} MB",
                    inspect::count(texts.len(), "file", "files"),
                    bytes as f64 / 1e6
                );
            }
            let (images, t) =
                postlink::post_link_timed(texts, &options(&args)).map_err(|e| e.to_string())?;
            if args.verbose {
                let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
                eprintln!(
                    "ptxspec: parse {:.1} ms, link {:.1} ms, analyze {:.1} ms, images {:.1} ms",
                    ms(t.parse),
                    ms(t.link),
                    ms(t.analyze),
                    ms(t.images)
                );
            }
            write_and_report(&args, &images, &inputs)
        }
        Command::Compile {
            args,
            lto,
            arch,
            include,
            define,
            keep_ptx,
            inputs,
        } => {
            let opts = ptxspec_core::compile::CompileOptions {
                arch,
                include,
                extra: define.iter().map(|d| format!("-D{d}")).collect(),
                lto,
                toolkit: isolated_toolkit(),
            };
            let mut source_bytes = 0;
            for p in &inputs {
                source_bytes += read_as(p, Format::Unknown)?.len();
                eprintln!("ptxspec: compiling {}", p.display());
            }
            let started = std::time::Instant::now();
            let (units, images) = ptxspec_core::compile::compile_and_post_link_keeping(
                &inputs,
                &opts,
                &options(&args),
                keep_ptx.as_deref(),
            )
            .map_err(|e| e.to_string())?;
            if args.verbose {
                eprintln!(
                    "ptxspec: {} of source compiled and post-linked in {:.1} ms",
                    inspect::count(source_bytes, "byte", "bytes"),
                    started.elapsed().as_secs_f64() * 1e3
                );
                for u in &units {
                    eprintln!(
                        "ptxspec: {}: {} of PTX{}",
                        u.name,
                        inspect::count(u.ptx.len(), "byte", "bytes"),
                        u.ltoir.as_ref().map_or(String::new(), |ir| format!(
                            ", {} of LTO-IR",
                            inspect::count(ir.len(), "byte", "bytes")
                        ))
                    );
                }
            }
            for u in units.iter().filter(|u| !u.log.trim().is_empty()) {
                eprintln!("ptxspec: {}: {}", u.name, u.log.trim());
            }
            write_and_report(&args, &images, &inputs)
        }
        Command::AspectFilter {
            target,
            device_config_file,
            input,
            out,
        } => {
            // The table lists the images the next post-link must remove as
            // stale: it is never written over.
            refuse_overwrite(&out, [&input])?;
            let config = load_config(device_config_file.as_deref())?;
            let text = read_as(&input, Format::FileTable)?;
            let table = FileTable::parse(&text).map_err(|e| format!("{}: {e}", input.display()))?;
            let dir = input.parent().unwrap_or(Path::new("."));
            let kept = aspect_filter(&table, dir, &config, &target)?;
            // Rows resolve where the table is written, not where it was read.
            let out_dir = match out.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            let kept = kept
                .rebased(
                    if dir.as_os_str().is_empty() {
                        Path::new(".")
                    } else {
                        dir
                    },
                    out_dir,
                )
                .map_err(|e| format!("{} or {}: {e}", dir.display(), out_dir.display()))?;
            write_atomically(&out, kept.to_text().as_bytes())?;
            eprintln!(
                "ptxspec: {target}: kept {} of {} in {}",
                kept.rows.len(),
                inspect::count(table.rows.len(), "row", "rows"),
                out.display()
            );
            Ok(())
        }
        Command::Specialize {
            input,
            set,
            via,
            arch,
            kernel,
            freeze,
            out,
        } => {
            let bytes = read_input(&input)?;
            // Never write over an input: the file given, and for a device
            // image the files beside its .prop.
            let beside: Vec<PathBuf> = match inspect::detect(&bytes) {
                Format::Prop => ["ptx", "ltoir"].map(|ext| input.with_extension(ext)).into(),
                _ => Vec::new(),
            };
            refuse_overwrite(&out, std::iter::once(&input).chain(&beside))?;
            let mut seen = std::collections::HashSet::new();
            for s in &set {
                let name = s.split_once('=').map_or(s.as_str(), |(n, _)| n);
                if !seen.insert(name) {
                    return Err(format!(
                        "--set {name}=... is given twice: set each constant once"
                    ));
                }
            }
            match inspect::detect(&bytes) {
                Format::Spirv => specialize_spirv(&input, &bytes, &set, freeze, &out),
                Format::Prop => {
                    if freeze {
                        return Err(
                            "--freeze is for SPIR-V modules; a device image is baked with --via"
                                .into(),
                        );
                    }
                    // The output's name says what the user expects in it:
                    // PTX text in a .cubin (or a cubin in a .ptx) is a
                    // surprise found only when a loader refuses it.
                    let ext = out.extension().and_then(|e| e.to_str()).unwrap_or("");
                    if via == ViaArg::Ptx && ext.eq_ignore_ascii_case("cubin") {
                        return Err(format!(
                            "{}: --via ptx (the default) writes PTX text; for a cubin pass --via lto \
                             --arch sm_XX (sm_90 for an H100), or name the output .ptx",
                            out.display()
                        ));
                    }
                    if via == ViaArg::Lto && ext.eq_ignore_ascii_case("ptx") {
                        return Err(format!(
                            "{}: --via lto writes a cubin (machine code), not PTX; name the output \
                             .cubin, or pass --via ptx for PTX",
                            out.display()
                        ));
                    }
                    if kernel.is_some() && via != ViaArg::Lto {
                        return Err(
                            "--kernel is for --via lto (the PTX of an image keeps every kernel)"
                                .into(),
                        );
                    }
                    specialize_image(
                        &input,
                        &set,
                        via,
                        arch.as_deref(),
                        kernel.as_deref(),
                        Some(&out),
                    )
                }
                f => Err(format!(
                    "{}: is {}; specialize takes a device image's .prop or a SPIR-V module",
                    input.display(),
                    f.describe()
                )),
            }
        }
        Command::Cache(CacheCommand::Keygen { secret, public }) => {
            let p = ptxspec_core::lto::remote::write_key_pair(&secret, &public)
                .map_err(|e| format!("cache keygen: {e}"))?;
            eprintln!(
                "ptxspec: wrote the secret key to {} and the public key to {}",
                secret.display(),
                public.display()
            );
            outln!("{p}");
            Ok(())
        }
        Command::Cache(CacheCommand::Warm { file }) => cache_warm(&file),
        Command::Cache(CacheCommand::Stats) => {
            let (store, counts) = ptxspec_core::lto::remote::fleet_counts()?;
            outln!("remote cache {store}:");
            if counts.is_empty() {
                outln!("  nothing counted yet");
            }
            // The names come from the store: shown escaped, so that no
            // control character (a terminal escape, a line break) reaches the
            // terminal as itself.
            for (name, n) in counts {
                outln!("  {}: {n}", name.escape_debug());
            }
            Ok(())
        }
        Command::Header { output } => {
            if output.exists() && !output.is_dir() {
                return Err(format!(
                    "-o {}: is a file; header -o names a directory, where ptxspec.cuh is written \
                     (give its folder, or a new name)",
                    output.display()
                ));
            }
            std::fs::create_dir_all(&output).map_err(|e| format!("{}: {e}", output.display()))?;
            let file = output.join("ptxspec.cuh");
            write_atomically(&file, ptxspec_core::compile::HEADER.as_bytes())?;
            outln!("{}", file.display());
            Ok(())
        }
        Command::Inspect { file, json } => {
            let bytes = read_input(&file)?;
            inspect_file(&file, &bytes, json)
        }
    }
}

fn options(args: &PostLinkArgs) -> postlink::Options {
    postlink::Options {
        mode: match args.mode {
            ModeArg::Emulated => postlink::Mode::Emulated,
            ModeArg::Aot => postlink::Mode::Aot,
        },
        split: match args.split {
            SplitArg::Auto => postlink::Split::Auto,
            SplitArg::Off => postlink::Split::Off,
            SplitArg::PerKernel => postlink::Split::PerKernel,
            SplitArg::PerSource => postlink::Split::PerSource,
        },
        buffer: match args.buffer {
            BufferArg::Global => postlink::BufferPlacement::Global,
            BufferArg::Param => postlink::BufferPlacement::Param,
            BufferArg::Auto => postlink::BufferPlacement::Auto,
        },
    }
}

/// A file's text, which must be UTF-8 and, unless `expect` is
/// `Unknown`, of that format.
/// A file given on the command line (a regular file, within
/// `files::INPUT_LIMIT`).
fn read_input(path: &Path) -> Result<Vec<u8>, String> {
    ptxspec_core::files::read_input(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn read_as(path: &Path, expect: Format) -> Result<String, String> {
    let bytes = read_input(path)?;
    let wanted = if expect == Format::Unknown {
        "CUDA C++ source"
    } else {
        expect.describe()
    };
    let found = inspect::detect(&bytes);
    // Text formats: a file that is not UTF-8 is said to be so first.
    if matches!(found, Format::Unknown)
        && let Err(e) = std::str::from_utf8(&bytes)
    {
        return Err(format!(
            "{}: not UTF-8 text (the byte at offset {} is not): expected {wanted}",
            path.display(),
            e.valid_up_to()
        ));
    }
    if expect != Format::Unknown && found != expect {
        return Err(format!(
            "{}: expected {}, but the file holds {}",
            path.display(),
            expect.describe(),
            found.describe()
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "{}: not UTF-8 text (the byte at offset {} is not): expected {wanted}",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

/// An error when `out` is one of `inputs` (the same file, however named).
fn refuse_overwrite<'a>(
    out: &Path,
    inputs: impl IntoIterator<Item = &'a PathBuf>,
) -> Result<(), String> {
    let Ok(target) = std::fs::canonicalize(out) else {
        return Ok(()); // not there yet: it is no input
    };
    for input in inputs {
        if std::fs::canonicalize(input).is_ok_and(|i| i == target) {
            return Err(format!(
                "-o {}: that is the input {}; write the output elsewhere",
                out.display(),
                input.display()
            ));
        }
    }
    Ok(())
}

/// `--device-config FILE`, or the built-in NVIDIA table.
fn load_config(path: Option<&Path>) -> Result<DeviceConfig, String> {
    match path {
        None => Ok(DeviceConfig::nvidia().clone()),
        Some(p) => {
            let text = String::from_utf8(read_input(p)?).map_err(|_| {
                format!(
                    "{}: not UTF-8 text: not a device configuration",
                    p.display()
                )
            })?;
            DeviceConfig::parse(&text, &p.display().to_string()).map_err(|e| e.to_string())
        }
    }
}

fn describe(r: &ptxspec_core::features::Requirements) -> String {
    let mut parts: Vec<String> = r.aspects.iter().map(|a| a.to_string()).collect();
    if let Some(s) = r.reqd_sub_group_size {
        parts.push(format!("sub-group size {s}"));
    }
    if let Some(w) = &r.reqd_work_group_size {
        parts.push(format!("work-group size {w:?}"));
    }
    parts.join(", ")
}

/// Writes the images (never over an input) and says what was written.
fn write_and_report(
    args: &PostLinkArgs,
    images: &[postlink::PostLinkedImage],
    inputs: &[PathBuf],
) -> Result<(), String> {
    let config = load_config(args.device_config.as_deref())?;
    let out = &args.out;
    postlink::write_images(out, images, inputs).map_err(|e| e.to_string())?;
    let mut warned = std::collections::HashSet::new();
    for img in images {
        for w in img.warnings.iter().filter(|w| warned.insert(w.to_string())) {
            eprintln!("ptxspec: {w}");
        }
        if !config
            .targets
            .values()
            .any(|t| t.supports(&img.requirements))
        {
            eprintln!(
                "ptxspec: warning: no target of the device configuration can run image {} (requires {})",
                img.stem,
                describe(&img.requirements)
            );
        }
    }
    for img in images {
        let mut names: Vec<&str> = img
            .kernels
            .iter()
            .take(8)
            .map(|k| k.name.as_str())
            .collect();
        let more = format!("... {} kernels in all", img.kernels.len());
        if img.kernels.len() > 8 {
            names.push(&more);
        }
        eprintln!(
            "ptxspec: {}/{}.ptx{}: kernels [{}], {}, {} of values; buffer: {}",
            out.display(),
            img.stem,
            if img.ltoir.is_some() {
                " (+ .ltoir)"
            } else {
                ""
            },
            names.join(", "),
            inspect::count(
                img.layout.constants().len(),
                "specialization constant",
                "specialization constants"
            ),
            inspect::count(img.layout.default_blob().len(), "byte", "bytes"),
            inspect::placement_of(img)
        );
    }
    eprintln!(
        "ptxspec: wrote {} and {}/table.txt",
        inspect::count(images.len(), "device image", "device images"),
        out.display()
    );
    Ok(())
}

/// `ptxspec cache warm FILE`: each line's value set linked (or found) and,
/// for a writer, uploaded.
fn cache_warm(file: &Path) -> Result<(), String> {
    let text = read_as(file, Format::Unknown)?;
    if !ptxspec_core::lto::remote::writes().map_err(|e| e.to_string())? {
        eprintln!(
            "ptxspec: cache warm: this process does not write to a remote cache (PTXSPEC_REMOTE_CACHE, \
             PTXSPEC_CACHE_TRUSTED_KEYS and PTXSPEC_CACHE_SIGNING_KEY set it up): the cubins go to the disk \
             cache only"
        );
    }
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(n, l)| (n + 1, l.split('#').next().unwrap_or("").trim()))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    for (done, (n, line)) in lines.iter().enumerate() {
        let at = |what: String| format!("{}:{n}: {what}", file.display());
        let mut words = line.split_whitespace();
        let (Some(prop), Some(arch)) = (words.next(), words.next()) else {
            return Err(at(
                "expected IMAGE.prop sm_XX [kernel=NAME] [NAME=VALUE ...]".into(),
            ));
        };
        let mut kernel = None;
        let mut set = Vec::new();
        for w in words {
            match w.strip_prefix("kernel=") {
                Some(k) => kernel = Some(k),
                None => set.push(w.to_string()),
            }
        }
        // Relative to the list's folder, as a table's rows are.
        let prop = file.parent().unwrap_or(Path::new(".")).join(prop);
        eprintln!(
            "ptxspec: cache warm: {} of {}: {line}",
            done + 1,
            lines.len()
        );
        specialize_image(&prop, &set, ViaArg::Lto, Some(arch), kernel, None).map_err(at)?;
    }
    Ok(())
}

/// Writes `bytes` to `out` through a temporary file in the same folder.
fn write_atomically(out: &Path, bytes: &[u8]) -> Result<(), String> {
    if out.is_dir() {
        return Err(format!(
            "{}: is a directory; -o names the output file",
            out.display()
        ));
    }
    ptxspec_core::files::write_atomically(out, bytes).map_err(|e| format!("{}: {e}", out.display()))
}

fn specialize_spirv(
    input: &Path,
    bytes: &[u8],
    set: &[String],
    freeze: bool,
    out: &Path,
) -> Result<(), String> {
    let constants = ptxspec_core::spirv::read(bytes, &Default::default())
        .map_err(|e| format!("{}: {e}", input.display()))?;
    let values = set
        .iter()
        .map(|s| ptxspec_core::spirv::parse_value(&constants, s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let spv = ptxspec_core::spirv::specialize(bytes, &values, freeze)
        .map_err(|e| format!("{}: {e}", input.display()))?;
    write_atomically(out, &spv)?;
    eprintln!(
        "ptxspec: {}: {} value(s) set{}",
        out.display(),
        values.len(),
        if freeze { ", frozen" } else { "" }
    );
    Ok(())
}

/// The bytes of `NAME=VALUE` for a constant of `image`.
fn image_value(image: &ptxspec::image::Image, arg: &str) -> Result<(String, Vec<u8>), String> {
    let (name, value) = arg
        .split_once('=')
        .ok_or_else(|| format!("--set {arg}: expected NAME=VALUE"))?;
    let slot = image.slot(name).ok_or_else(|| {
        let mut known: Vec<&str> = image
            .info()
            .value_types
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        known.sort_unstable();
        format!(
            "--set {name}: image {} has no specialization constant {name:?} (it has: {})",
            image.id(),
            known.join(", ")
        )
    })?;
    let size = slot.size as usize;
    let leaves = image
        .info()
        .value_types
        .iter()
        .find(|(n, _)| n == name)
        .map_or(&[][..], |(_, l)| l.as_slice());
    let offset = slot.offset as usize;
    let base = image
        .default_blob()
        .get(offset..offset + size)
        .ok_or_else(|| {
            format!("--set {name}: the image's default values are shorter than its layout")
        })?;
    let bytes = ptxspec_core::layout::text::parse_value(value, size, leaves, base)
        .map_err(|what| format!("--set {name}: {what}"))?;
    Ok((name.to_string(), bytes))
}

/// NVIDIA's libraries run on the CLI's inputs in a child process of this
/// binary: a damaged or hostile file that crashes them is then an error
/// naming it, not a dead `ptxspec`. (Where this binary's path is unknown,
/// in-process.)
fn isolated_toolkit() -> Toolkit {
    std::env::current_exe().map_or(Toolkit::InProcess, Toolkit::Worker)
}

fn specialize_image(
    prop: &Path,
    set: &[String],
    via: ViaArg,
    arch: Option<&str>,
    kernel: Option<&str>,
    out: Option<&Path>,
) -> Result<(), String> {
    use ptxspec::{KernelBundle, SpecMode};
    let ltoir = match via {
        ViaArg::Lto => ptxspec_core::image::LtoIrFile::Required,
        ViaArg::Ptx => ptxspec_core::image::LtoIrFile::Ignore,
    };
    let (image, _) = read_written_image(prop, ltoir).map_err(|e| match via {
        ViaArg::Lto if e.contains(".ltoir: No such file") => {
            format!("{e}: --via lto needs the image's LTO-IR (ptxspec compile --lto writes it)")
        }
        _ => e,
    })?;
    let arch = match (via, arch) {
        (ViaArg::Lto, None) => return Err("--via lto needs --arch (sm_90 for an H100)".into()),
        (ViaArg::Lto, Some(a)) => Some(
            a.strip_prefix("sm_")
                .and_then(|n| n.parse::<u32>().ok())
                .ok_or_else(|| format!("--arch {a}: expected sm_XX (sm_80, sm_90, ...)"))?,
        ),
        (ViaArg::Ptx, _) => None,
    };
    let image = std::sync::Arc::new(image);
    let mut input = KernelBundle::from_images(vec![std::sync::Arc::clone(&image)]);
    for s in set {
        let (name, bytes) = image_value(&image, s)?;
        input
            .set_specialization_constant_bytes(&name, &bytes)
            .map_err(|e| e.to_string())?;
    }
    let mode = match via {
        ViaArg::Ptx => SpecMode::Native,
        ViaArg::Lto => SpecMode::Lto,
    };
    let options = ptxspec::BuildOptions::default().with_toolkit_worker(match isolated_toolkit() {
        Toolkit::Worker(exe) => Some(exe),
        _ => None,
    });
    let exe = ptxspec::build_with_options(&input.with_mode(mode), &options)
        .map_err(|e| format!("{}: {e}", prop.display()))?;
    let built = exe
        .device_images()
        .into_iter()
        .next()
        .and_then(|d| d.built().cloned())
        .ok_or("the image has no kernels")?;
    match arch {
        None => {
            let ptx = built.ptx().ok_or("no PTX was built")?;
            if let Some(out) = out {
                write_atomically(out, ptx.as_bytes())?;
            }
        }
        Some(a) => {
            let cubin = match kernel {
                Some(k) => built.cubin_for_kernel(a, k),
                None => built.cubin(a),
            }
            .map_err(|e| format!("{}: {e}", prop.with_extension("ltoir").display()))?;
            if let Some(out) = out {
                write_atomically(out, &cubin.bytes)?;
            }
            if !cubin.log.trim().is_empty() {
                eprintln!("ptxspec: nvJitLink: {}", cubin.log.trim());
            }
            // One line in a form scripts rely on: `cubin: linked`, `cubin:
            // memory cache`, `cubin: disk cache` or `cubin: remote cache`,
            // more words after.
            eprintln!(
                "ptxspec: cubin: {} (sm_{a})",
                match cubin.source {
                    ptxspec_core::lto::Source::Linked { stored, uploaded } =>
                        match (stored, uploaded) {
                            (true, true) =>
                                "linked by nvJitLink, stored in the disk cache and uploaded to the remote cache",
                            (true, false) => "linked by nvJitLink, stored in the disk cache",
                            (false, true) =>
                                "linked by nvJitLink, uploaded to the remote cache; the disk cache did not take it",
                            (false, false) => "linked by nvJitLink; the disk cache did not take it",
                        },
                    ptxspec_core::lto::Source::Disk => "disk cache",
                    ptxspec_core::lto::Source::Remote => "remote cache, signed by a trusted key",
                    ptxspec_core::lto::Source::Memory => "memory cache",
                }
            );
        }
    }
    let Some(out) = out else {
        return Ok(());
    };
    eprintln!(
        "ptxspec: {}: image {} with {} value(s) set, via {}",
        out.display(),
        image.id(),
        set.len(),
        if via == ViaArg::Ptx {
            "PTX immediates"
        } else {
            "an LTO link"
        }
    );
    // The values are in the code, but the kernels keep their parameters:
    // what to pass for the handler when the file is loaded by hand.
    for k in image
        .kernels()
        .iter()
        .filter(|k| kernel.is_none_or(|n| n == k.name))
    {
        if let Some(h) = k.handler {
            eprintln!(
                "ptxspec: kernel {} keeps its kernel_handler as parameter {} ({} bytes): pass 0 for it \
                 when you launch it from {} yourself",
                k.name,
                h.index,
                k.params.get(h.index).map_or(8, |p| p.size),
                out.display()
            );
        }
    }
    Ok(())
}

/// The image that post-link or compile wrote as `prop` and the `.ptx`
/// beside it (named by their stem), and the property sets' text.
fn read_written_image(
    prop: &Path,
    ltoir: ptxspec_core::image::LtoIrFile,
) -> Result<(ptxspec_core::image::Image, String), String> {
    // The files of one post-link, not one of each of two.
    let folder = prop.parent().filter(|p| !p.as_os_str().is_empty());
    let _lock = postlink::read_lock(folder.unwrap_or(Path::new("."))).map_err(|e| {
        format!(
            "{}: waiting for post-links into its folder: {e}",
            prop.display()
        )
    })?;
    // Both callers recognized `prop` as property sets already.
    let written = ptxspec_core::image::read_written(prop, ltoir).map_err(|e| e.to_string())?;
    Ok((written.image, written.props))
}

/// An image that post-link or compile wrote (its `.prop` and the `.ptx`
/// beside it), shown as it is.
fn inspect_written_image(prop: &Path, json: bool) -> Result<(), String> {
    let (image, props) = read_written_image(prop, ptxspec_core::image::LtoIrFile::Ignore)?;
    let shown = if json {
        inspect::written_image_json(&image, &props)
    } else {
        inspect::written_image_report(&image, &props)
    };
    outln!(
        "{}",
        shown
            .map_err(|e| format!("{}: {e}", prop.display()))?
            .trim_end()
    );
    Ok(())
}

fn inspect_file(file: &Path, bytes: &[u8], json: bool) -> Result<(), String> {
    let name = file.display().to_string();
    match inspect::detect(bytes) {
        Format::Spirv => {
            let constants = ptxspec_core::spirv::read(bytes, &Default::default())
                .map_err(|e| format!("{name}: {e}"))?;
            let sets = ptxspec_core::spirv::property_sets(&constants);
            let report = inspect::PropReport::from_sets(&sets).map_err(|e| e.to_string())?;
            if json {
                outln!("{}", report.to_json());
            } else {
                for c in &constants {
                    outln!("{}: {}", c.name, c.ty.describe());
                }
                out!("{}", report.to_human());
            }
        }
        Format::Ptx => {
            if let Some(prop) = ptxspec_core::image::prop_beside(file) {
                return inspect_written_image(&prop, json);
            }
            let text = read_as(file, Format::Ptx)?;
            // What `post-link` with its defaults would write.
            let images = postlink::post_link(vec![(name.clone(), text)], &Default::default())
                .map_err(|e| e.to_string())?;
            if json {
                outln!(
                    "{}",
                    inspect::images_json(&images).map_err(|e| e.to_string())?
                );
            } else {
                for img in &images {
                    out!("{}", inspect::image_report(img));
                }
            }
        }
        Format::Prop => {
            let text = read_as(file, Format::Prop)?;
            let report =
                inspect::PropReport::from_text(&text).map_err(|e| format!("{name}: {e}"))?;
            if json {
                outln!("{}", report.to_json());
            } else {
                out!("{}", report.to_human());
            }
        }
        Format::LtoIr => {
            let c =
                ptxspec_core::lto::LtoIr::from_bytes(bytes).map_err(|e| format!("{name}: {e}"))?;
            if json {
                let units: Vec<String> = c
                    .units
                    .iter()
                    .map(|(n, ir)| {
                        format!(
                            "{{\"name\":{},\"bytes\":{}}}",
                            inspect::json_string(n),
                            ir.len()
                        )
                    })
                    .collect();
                outln!("{{\"units\":[{}]}}", units.join(","));
            } else {
                outln!("LTO-IR of {} translation unit(s):", c.units.len());
                for (n, ir) in &c.units {
                    outln!("  {n}: {} bytes", ir.len());
                }
            }
        }
        f => {
            return Err(format!(
                "{name}: is {}; inspect reads PTX, .prop, SPIR-V and .ltoir files",
                f.describe()
            ));
        }
    }
    Ok(())
}
