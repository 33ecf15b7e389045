//! The `ptxspec` command line: parses arguments, calls the library, prints.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ptxspec::device_config::{DeviceConfig, FileTable, aspect_filter};
use ptxspec::postlink;

fn read_inputs(paths: &[PathBuf]) -> Result<Vec<(String, String)>, String> {
    paths
        .iter()
        .map(|p| {
            std::fs::read_to_string(p)
                .map(|t| (p.display().to_string(), t))
                .map_err(|e| format!("{}: {e}", p.display()))
        })
        .collect()
}

#[derive(Parser)]
#[command(
    name = "ptxspec",
    version,
    about = "SYCL 2020 specialization constants for NVIDIA GPUs through PTX",
    long_about = "SYCL 2020 specialization constants for NVIDIA GPUs through PTX.\n\n\
Compile CUDA C++ that uses kernels/include/ptxspec.cuh to PTX with any CUDA compiler \
(relocatable device code), then `ptxspec post-link` the PTX into device images whose \
getters read one specialization-constant buffer, with DPC++-compatible property sets. \
`ptxspec inspect` shows what an image or a .prop file holds."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Link PTX translation units, number their specialization constants,
    /// rewrite the getters and write device images.
    ///
    /// Writes OUTDIR/table.txt (a DPC++ file table, paths relative to
    /// OUTDIR) and, per device image, <stem>.ptx, <stem>.prop (property
    /// sets: specialization constants, default values, kernel signatures)
    /// and <stem>.sym (kernel names). Nothing is written unless every input
    /// is post-linked without error.
    #[command(name = "post-link")]
    PostLink {
        /// What getters become: loads from the buffer (values set at run
        /// time), or immediates of the defaults (values fixed).
        #[arg(long, value_enum, default_value_t = ModeArg::Emulated)]
        mode: ModeArg,
        /// How kernels are grouped into device images (auto = per_source).
        #[arg(long, value_enum, default_value_t = SplitArg::Auto)]
        split: SplitArg,
        /// Where emulated kernels find the buffer: global (a pointer to
        /// global memory), param (the values themselves in the kernel's
        /// parameter space: no upload, values per launch; sm_70+, at most
        /// 4 KB of parameters), auto (param where it fits, else global).
        #[arg(long, value_enum, default_value_t = BufferArg::Auto)]
        buffer: BufferArg,
        /// Print the input size and how long each stage took.
        #[arg(short, long)]
        verbose: bool,
        /// Device configuration (YAML: target -> aspects, sub-group-sizes);
        /// images that no target of it can run get a warning. Default: the
        /// built-in NVIDIA table (sm_50 ... sm_121).
        #[arg(long, value_name = "FILE")]
        device_config: Option<PathBuf>,
        /// Output directory (created if missing).
        #[arg(short = 'o', value_name = "OUTDIR")]
        out: PathBuf,
        /// PTX files, one per translation unit, compiled with relocatable
        /// device code (the getter calls stay external).
        #[arg(required = true, value_name = "IN.ptx")]
        inputs: Vec<PathBuf>,
    },
    /// Keep the rows of a file table whose device requirements a target
    /// supports (seed 003's sycl-aspect-filter): rows without requirements
    /// stay, rows the target cannot run go; an unknown target is an error.
    #[command(name = "aspect-filter")]
    AspectFilter {
        /// The target: a key of the device configuration (sm_90, ...).
        #[arg(long, value_name = "NAME")]
        target: String,
        /// The device configuration file (YAML).
        #[arg(long = "device-config-file", value_name = "FILE")]
        device_config_file: PathBuf,
        /// The input file table (paths in it resolve against its folder).
        #[arg(value_name = "IN_TABLE")]
        input: PathBuf,
        /// The output file table.
        #[arg(short = 'o', value_name = "OUT_TABLE")]
        out: PathBuf,
    },
    /// Specialize a SPIR-V module: set new default values (it stays
    /// specializable) or, with --freeze, turn every specialization constant
    /// into a plain constant.
    ///
    /// VALUE is one number for a scalar, or comma-separated numbers for the
    /// leaves of a composite in depth-first order (`--set id_A=1,2.5,3`);
    /// booleans are true/false/1/0.
    Specialize {
        /// The input module (.spv).
        input: PathBuf,
        /// NAME=VALUE, NAME being the constant's OpName (its symbolic ID).
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
        /// Replace OpSpecConstant* by OpConstant* and drop the SpecIds.
        #[arg(long)]
        freeze: bool,
        /// The output module.
        #[arg(short = 'o', value_name = "OUT.spv")]
        out: PathBuf,
    },
    /// Show the specialization constants, default values and device
    /// requirements of a `.prop` file.
    Inspect {
        /// A `.prop` file written by `ptxspec post-link` or DPC++'s
        /// sycl-post-link, a `.ptx` file (its getters, numeric IDs, layout
        /// and kernels, as `post-link --split off` would see them), or a
        /// `.spv` module (its specialization constants in native form).
        file: PathBuf,
        /// Print one JSON object: {"specialization_constants": {ID: [[id, offset, size], ...]},
        /// "default_values": "hex", "device_requirements": {name: [u32, ...]}},
        /// each key only when its property set is present.
        #[arg(long)]
        json: bool,
    },
}

/// `--device-config FILE`, or the built-in NVIDIA table.
fn load_config(path: Option<&std::path::Path>) -> Result<DeviceConfig, String> {
    match path {
        None => DeviceConfig::parse(
            ptxspec::device_config::DEFAULT_CONFIG,
            "built-in device configuration",
        ),
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            DeviceConfig::parse(&text, &p.display().to_string())
        }
    }
}

fn describe(r: &ptxspec::features::Requirements) -> String {
    let mut parts: Vec<String> = r.aspects.iter().map(|a| a.to_string()).collect();
    if let Some(s) = r.reqd_sub_group_size {
        parts.push(format!("sub-group size {s}"));
    }
    if let Some(w) = &r.reqd_work_group_size {
        parts.push(format!("work-group size {w:?}"));
    }
    parts.join(", ")
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ModeArg {
    Emulated,
    Aot,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum BufferArg {
    Global,
    Param,
    Auto,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
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
        Command::PostLink {
            mode,
            split,
            buffer,
            verbose,
            device_config,
            out,
            inputs,
        } => {
            let config = load_config(device_config.as_deref())?;
            let opts = postlink::Options {
                mode: match mode {
                    ModeArg::Emulated => postlink::Mode::Emulated,
                    ModeArg::Aot => postlink::Mode::Aot,
                },
                split: match split {
                    SplitArg::Auto => postlink::Split::Auto,
                    SplitArg::Off => postlink::Split::Off,
                    SplitArg::PerKernel => postlink::Split::PerKernel,
                    SplitArg::PerSource => postlink::Split::PerSource,
                },
                buffer: match buffer {
                    BufferArg::Global => postlink::BufferPlacement::Global,
                    BufferArg::Param => postlink::BufferPlacement::Param,
                    BufferArg::Auto => postlink::BufferPlacement::Auto,
                },
            };
            let inputs = read_inputs(&inputs)?;
            if verbose {
                let bytes: usize = inputs.iter().map(|(_, t)| t.len()).sum();
                eprintln!(
                    "ptxspec: post-linking {} files, {:.1} MB",
                    inputs.len(),
                    bytes as f64 / 1e6
                );
            }
            let (images, t) =
                postlink::post_link_timed(inputs, &opts).map_err(|e| e.to_string())?;
            if verbose {
                let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
                eprintln!(
                    "ptxspec: parse {:.1} ms, link {:.1} ms, analyze {:.1} ms, images {:.1} ms",
                    ms(t.parse),
                    ms(t.link),
                    ms(t.analyze),
                    ms(t.images)
                );
            }
            postlink::write_images(&out, &images).map_err(|e| e.to_string())?;
            let mut warned = std::collections::HashSet::new();
            for img in &images {
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
            for img in &images {
                let names: Vec<&str> = img.kernels.iter().map(|k| k.name.as_str()).collect();
                eprintln!(
                    "ptxspec: {}/{}.ptx: kernels [{}], {} specialization constants, {}-byte buffer",
                    out.display(),
                    img.stem,
                    names.join(", "),
                    img.layout.constants().len(),
                    img.layout.default_blob().len()
                );
            }
            eprintln!(
                "ptxspec: wrote {} device images and {}/table.txt",
                images.len(),
                out.display()
            );
            Ok(())
        }
        Command::AspectFilter {
            target,
            device_config_file,
            input,
            out,
        } => {
            let config = load_config(Some(&device_config_file))?;
            let text =
                std::fs::read_to_string(&input).map_err(|e| format!("{}: {e}", input.display()))?;
            let table = FileTable::parse(&text).map_err(|e| format!("{}: {e}", input.display()))?;
            let dir = input.parent().unwrap_or(std::path::Path::new("."));
            let kept = aspect_filter(&table, dir, &config, &target)?;
            let tmp = out.with_extension("ptxspec-tmp");
            std::fs::write(&tmp, kept.to_text()).map_err(|e| format!("{}: {e}", tmp.display()))?;
            std::fs::rename(&tmp, &out).map_err(|e| format!("{}: {e}", out.display()))?;
            eprintln!(
                "ptxspec: {target}: kept {} of {} rows in {}",
                kept.rows.len(),
                table.rows.len(),
                out.display()
            );
            Ok(())
        }
        Command::Specialize {
            input,
            set,
            freeze,
            out,
        } => {
            let bytes = std::fs::read(&input).map_err(|e| format!("{}: {e}", input.display()))?;
            let constants = ptxspec::spirv::read(&bytes, &Default::default())
                .map_err(|e| format!("{}: {e}", input.display()))?;
            let values = set
                .iter()
                .map(|s| ptxspec::spirv::parse_value(&constants, s))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let spv = ptxspec::spirv::specialize(&bytes, &values, freeze)
                .map_err(|e| format!("{}: {e}", input.display()))?;
            let tmp = out.with_extension("ptxspec-tmp");
            std::fs::write(&tmp, &spv).map_err(|e| format!("{}: {e}", tmp.display()))?;
            std::fs::rename(&tmp, &out).map_err(|e| format!("{}: {e}", out.display()))?;
            eprintln!(
                "ptxspec: {}: {} value(s) set{}",
                out.display(),
                values.len(),
                if freeze { ", frozen" } else { "" }
            );
            Ok(())
        }
        Command::Inspect { file, json } if file.extension().is_some_and(|e| e == "spv") => {
            let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            let constants = ptxspec::spirv::read(&bytes, &Default::default())
                .map_err(|e| format!("{}: {e}", file.display()))?;
            let sets = ptxspec::spirv::property_sets(&constants);
            let report =
                ptxspec::inspect::PropReport::from_sets(&sets).map_err(|e| e.to_string())?;
            if json {
                println!("{}", report.to_json());
            } else {
                for c in &constants {
                    println!("{}: {}", c.name, c.ty.describe());
                }
                print!("{}", report.to_human());
            }
            Ok(())
        }
        Command::Inspect { file, json } if file.extension().is_some_and(|e| e == "ptx") => {
            let opts = postlink::Options {
                mode: postlink::Mode::Emulated,
                split: postlink::Split::Off,
                ..Default::default()
            };
            let images =
                postlink::post_link(read_inputs(&[file])?, &opts).map_err(|e| e.to_string())?;
            for img in &images {
                if json {
                    let report = ptxspec::inspect::PropReport::from_sets(&img.props)
                        .map_err(|e| e.to_string())?;
                    println!("{}", report.to_json());
                } else {
                    print!("{}", ptxspec::inspect::image_report(img));
                }
            }
            Ok(())
        }
        Command::Inspect { file, json } => {
            let text =
                std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            let report = ptxspec::inspect::PropReport::from_text(&text)
                .map_err(|e| format!("{}: {e}", file.display()))?;
            if json {
                println!("{}", report.to_json());
            } else {
                print!("{}", report.to_human());
            }
            Ok(())
        }
    }
}
