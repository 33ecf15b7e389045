//! The `ptxspec` command line: parses arguments, calls the library, prints.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
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
        /// Print the input size and how long each stage took.
        #[arg(short, long)]
        verbose: bool,
        /// Output directory (created if missing).
        #[arg(short = 'o', value_name = "OUTDIR")]
        out: PathBuf,
        /// PTX files, one per translation unit, compiled with relocatable
        /// device code (the getter calls stay external).
        #[arg(required = true, value_name = "IN.ptx")]
        inputs: Vec<PathBuf>,
    },
    /// Show the specialization constants, default values and device
    /// requirements of a `.prop` file.
    Inspect {
        /// A `.prop` file written by `ptxspec post-link` or DPC++'s
        /// sycl-post-link, or a `.ptx` file: its getters, numeric IDs,
        /// layout and kernels (as `post-link --split off` would see them).
        file: PathBuf,
        /// Print one JSON object: {"specialization_constants": {ID: [[id, offset, size], ...]},
        /// "default_values": "hex", "device_requirements": {name: [u32, ...]}},
        /// each key only when its property set is present.
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
            verbose,
            out,
            inputs,
        } => {
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
        Command::Inspect { file, json } if file.extension().is_some_and(|e| e == "ptx") => {
            let opts = postlink::Options {
                mode: postlink::Mode::Emulated,
                split: postlink::Split::Off,
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
