//! The `ptxspec` command line: parses arguments (`args`), runs the
//! subcommand (`commands`, one module each), prints (`output`).

#![forbid(unsafe_code)]
#[macro_use]
mod output;
mod args;
mod commands;
mod io;

use std::process::ExitCode;

use clap::Parser;
use ptxspec_core::toolkit::worker;

use args::{CacheCommand, Cli, Command};

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
    let cli = Cli::parse_from(nvcc_style_args(std::env::args_os()));
    if let Err(msg) = install_logging(cli.log) {
        eprintln!("ptxspec: error: {msg}");
        return ExitCode::FAILURE;
    }
    // PTXSPEC_TRACE: a trace of the command (links, cache look-ups,
    // compiles), written when it ends; an invalid value is an error naming
    // the variable.
    let tracing_to = match ptxspec_core::trace::start_from_env() {
        Ok(file) => file,
        Err(e) => {
            eprintln!("ptxspec: error: {}", output::bounded(&e.to_string()));
            return ExitCode::FAILURE;
        }
    };
    let result = run(cli);
    // What followed the look-ups — disk copies of remote hits, the fleet's
    // counters — done before the process ends (bounded: a store that hangs
    // costs its calls' deadlines, not the exit).
    ptxspec_core::lto::flush(std::time::Duration::from_secs(5));
    if tracing_to.is_some() {
        match ptxspec_core::trace::stop() {
            Ok(Some((file, n))) => {
                eprintln!("ptxspec: trace: {n} events written to {}", file.display())
            }
            Ok(None) => {}
            Err(e) => eprintln!("ptxspec: error: {}", output::bounded(&e.to_string())),
        }
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            // Bounded and escaped: an error may echo input (a list's line,
            // a path, a value).
            eprintln!("ptxspec: error: {}", output::bounded(&msg));
            ExitCode::FAILURE
        }
    }
}

/// The command line with nvcc's spelling of pass-through options taken:
/// `-Xnvrtc OPTION` and `-Xnvrtc=OPTION` (as nvcc's `-Xptxas`) are
/// `--Xnvrtc OPTION` (clap's long options take two dashes).
fn nvcc_style_args(
    args: impl Iterator<Item = std::ffi::OsString>,
) -> impl Iterator<Item = std::ffi::OsString> {
    args.map(|a| match a.to_str() {
        Some("-Xnvrtc") => "--Xnvrtc".into(),
        Some(s) if s.starts_with("-Xnvrtc=") => format!("-{s}").into(),
        _ => a,
    })
}

/// Runs the subcommand.
fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::PostLink { args, inputs } => commands::post_link::post_link(&args, &inputs),
        Command::Compile {
            args,
            lto,
            arch,
            include,
            define,
            nvrtc,
            keep_ptx,
            inputs,
        } => commands::post_link::compile(
            &args,
            lto,
            arch,
            include,
            // -D as NVRTC takes it, then the options passed as they are.
            define
                .iter()
                .map(|d| format!("-D{d}"))
                .chain(nvrtc)
                .collect(),
            keep_ptx.as_deref(),
            &inputs,
        ),
        Command::AspectFilter {
            target,
            device_config_file,
            input,
            out,
        } => commands::aspect_filter::run(&target, device_config_file.as_deref(), &input, &out),
        Command::Specialize {
            input,
            set,
            args,
            via,
            arch,
            kernel,
            freeze,
            out,
        } => commands::specialize::run(
            &input,
            &set,
            &args,
            via,
            arch.as_deref(),
            kernel.as_deref(),
            freeze,
            &out,
        ),
        Command::Cache(CacheCommand::Keygen { secret, public }) => {
            commands::cache::keygen(&secret, &public)
        }
        Command::Cache(CacheCommand::Warm { file }) => commands::cache::warm(&file),
        Command::Cache(CacheCommand::Stats) => commands::cache::stats(),
        Command::Header { output } => commands::header::run(&output),
        Command::VerifyChoices { a, b } => commands::choices::verify(&a, &b),
        Command::SignChoices {
            table,
            secret,
            output,
        } => commands::choices::sign(&table, &secret, &output),
        Command::Inspect { file, json } => commands::inspect::run(&file, json),
    }
}
