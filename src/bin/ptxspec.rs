//! The `ptxspec` command line: parses arguments, calls the library, prints.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// Show the specialization constants, default values and device
    /// requirements of a `.prop` file.
    Inspect {
        /// A `.prop` file written by `ptxspec post-link` or DPC++'s sycl-post-link.
        file: PathBuf,
        /// Print one JSON object: {"specialization_constants": {ID: [[id, offset, size], ...]},
        /// "default_values": "hex", "device_requirements": {name: [u32, ...]}},
        /// each key only when its property set is present.
        #[arg(long)]
        json: bool,
    },
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
