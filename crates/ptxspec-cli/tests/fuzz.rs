//! Mutation fuzzing of every reader: SPIR-V modules, `.prop` files, PTX,
//! the YAML device configuration, `.ltoir` containers and file tables. The
//! rule: any outcome other than success or a clean error — a panic, in the
//! library or in the CLI — fails.
//!
//! Bounded for CI (a few hundred mutants of each seed); set
//! `PTXSPEC_FUZZ_ITERATIONS` for a longer run, e.g. 100000. A failing input
//! is written to `target/tmp/fuzz-failure-*` for reproduction.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};

use common::*;
use ptxspec_core::layout::{Layout, Numbering, ScalarKind, SpecConstant, SpecType};
use ptxspec_core::postlink::{self, BufferPlacement, Mode, Options};
use ptxspec_core::props::PropertySets;

fn iterations() -> usize {
    std::env::var("PTXSPEC_FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

/// xorshift64: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One to four random edits of `seed`: bit flips, byte overwrites, cuts,
/// duplicated or deleted runs, truncation, word overwrites.
fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        if b.is_empty() {
            b.push(rng.next() as u8);
            continue;
        }
        let i = rng.below(b.len());
        match rng.below(7) {
            0 => b[i] ^= 1 << rng.below(8),
            1 => b[i] = rng.next() as u8,
            2 => {
                let n = rng.below(16).min(b.len() - i);
                b.drain(i..i + n);
            }
            3 => {
                let n = rng.below(32).min(b.len() - i);
                let run = b[i..i + n].to_vec();
                let at = rng.below(b.len());
                b.splice(at..at, run);
            }
            4 => b.truncate(i),
            5 => {
                // An aligned 32-bit word: counts and ids in SPIR-V.
                let at = i & !3;
                if at + 4 <= b.len() {
                    let w = match rng.below(3) {
                        0 => rng.next() as u32,
                        1 => u32::MAX,
                        _ => rng.below(64) as u32,
                    };
                    b[at..at + 4].copy_from_slice(&w.to_le_bytes());
                }
            }
            _ => {
                // A digit or a punctuation mark in text.
                b[i] = b"0123456789{}[];,.=|-+%$"[rng.below(23)];
            }
        }
    }
    b
}

/// Runs `f` on mutants of each seed; a panic fails the test with the input
/// saved.
fn fuzz(name: &str, seeds: &[Vec<u8>], f: impl Fn(&[u8])) {
    fuzz_rounds(name, seeds, iterations(), f);
}

/// [`fuzz`] with `rounds` mutants of each seed (for readers slow enough
/// that the default count would lengthen CI).
fn fuzz_rounds(name: &str, seeds: &[Vec<u8>], rounds: usize, f: impl Fn(&[u8])) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ name.len() as u64);
    for (s, seed) in seeds.iter().enumerate() {
        for i in 0..rounds {
            let input = mutate(&mut rng, seed);
            if catch_unwind(AssertUnwindSafe(|| f(&input))).is_err() {
                let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                    .join(format!("fuzz-failure-{name}-{s}-{i}"));
                std::fs::write(&path, &input).unwrap();
                panic!(
                    "{name}: seed {s}, mutant {i} panicked; input in {}",
                    path.display()
                );
            }
        }
    }
}

fn spirv_seeds() -> Vec<Vec<u8>> {
    let s = |k| SpecType::Scalar(k);
    let layouts = [
        vec![SpecConstant::typed("a", s(ScalarKind::I32), 42i32.to_le_bytes().to_vec()).unwrap()],
        vec![
            SpecConstant::typed("b", s(ScalarKind::Bool), vec![1]).unwrap(),
            SpecConstant::typed(
                "c",
                SpecType::c_struct([s(ScalarKind::F32), SpecType::array(s(ScalarKind::F64), 2)]),
                vec![0; 24],
            )
            .unwrap(),
        ],
    ];
    layouts
        .into_iter()
        .map(|cs| {
            ptxspec_core::spirv::write(&Layout::build(Numbering::Native, cs).unwrap()).unwrap()
        })
        .collect()
}

fn spirv_modules() {
    fuzz("spirv", &spirv_seeds(), |b| {
        let _ = ptxspec_core::spirv::read(b, &Default::default());
        let _ = ptxspec_core::spirv::specialize(b, &[], false);
        let _ = ptxspec_core::spirv::specialize(b, &[], true);
        let _ = ptxspec_cli::views::detect(b);
    });
}

/// The `.prop` files and PTX of the examples' images.
fn images() -> Vec<postlink::PostLinkedImage> {
    EXAMPLES
        .iter()
        .flat_map(|ex| post_link(vec![kernel_ptx(ex)], Mode::Emulated, Default::default()))
        .collect()
}

fn property_files() {
    let imgs = images();
    let seeds: Vec<Vec<u8>> = imgs
        .iter()
        .map(|i| i.props.to_text().into_bytes())
        .collect();
    let ptx = imgs[0].ptx.clone();
    fuzz("prop", &seeds, |b| {
        let text = String::from_utf8_lossy(b);
        if let Ok(sets) = PropertySets::parse(&text) {
            let _ = ptxspec_core::props::SpecConstProps::read(&sets);
            let _ = ptxspec_core::features::Requirements::read(&sets);
            let _ = ptxspec_core::props::ImageProps::read(&sets);
            let _ = ptxspec_core::image::KernelSignature::read_all(&sets);
            if let Ok(r) = ptxspec_cli::views::PropReport::from_sets(&sets) {
                let _ = (r.to_json(), r.to_human());
            }
        }
        let _ = ptxspec::image::Image::new("fuzz", ptx.as_str(), &text);
    });
}

/// Property values mutated as the numbers they hold (offsets, sizes, IDs,
/// lengths; `u32::MAX` and small values among them), not as their text:
/// every reader, then a bundle of the image with values set and built
/// natively and emulated. Offsets and sizes that wrap or point outside the
/// blob must be errors.
fn property_values_as_numbers() {
    let imgs = images();
    let mut rng = Rng(0x5eed_0ff5);
    for img in &imgs {
        let sets = img.props.clone();
        let values: Vec<(String, String)> = sets
            .iter()
            .flat_map(|(set, props)| {
                props
                    .iter()
                    .filter(|(_, v)| v.as_bytes().is_some())
                    .map(|(name, _)| (set.to_string(), name.to_string()))
                    .collect::<Vec<_>>()
            })
            .collect();
        if values.is_empty() {
            continue;
        }
        for i in 0..iterations() {
            let mut mutated = sets.clone();
            let (set, name) = &values[rng.below(values.len())];
            let Some(bytes) = sets
                .get(set)
                .and_then(|s| s.get(name))
                .and_then(|v| v.as_bytes())
            else {
                continue;
            };
            let new = mutate(&mut rng, bytes);
            mutated
                .set_mut(set)
                .insert(name.clone(), ptxspec_core::props::PropertyValue::bytes(new));
            let text = mutated.to_text();
            let run = || {
                let _ = ptxspec_core::props::SpecConstProps::read(&mutated);
                let _ = ptxspec_core::props::ImageProps::read(&mutated);
                let _ = ptxspec_core::image::KernelSignature::read_all(&mutated);
                if let Ok(r) = ptxspec_cli::views::PropReport::from_sets(&mutated) {
                    let _ = (r.to_json(), r.to_human());
                }
                let Ok(image) = ptxspec::image::Image::new("fuzz", img.ptx.as_str(), &text) else {
                    return;
                };
                // The slots' sizes are the contract's, not the facade's.
                let Ok(contract) =
                    ptxspec_core::image::ImageData::new("fuzz", img.ptx.as_str(), &text)
                else {
                    panic!("the facade read an image the contract refuses");
                };
                let mut input = ptxspec::KernelBundle::from_images([image]);
                for id in contract.symbolic_ids() {
                    if let Some(slot) = contract.slot(id) {
                        let v = vec![0x5a; (slot.size as usize).min(1 << 16)];
                        let _ = input.set_specialization_constant_bytes(id, &v);
                    }
                }
                for mode in [ptxspec::SpecMode::Native, ptxspec::SpecMode::Emulated] {
                    let _ = ptxspec::build(&input.clone().with_mode(mode));
                }
            };
            if catch_unwind(AssertUnwindSafe(run)).is_err() {
                let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                    .join(format!("fuzz-failure-prop-values-{}-{i}.prop", img.stem));
                std::fs::write(&path, &text).unwrap();
                panic!(
                    "{set}/{name} of {}: mutant {i} panicked; .prop in {}",
                    img.stem,
                    path.display()
                );
            }
        }
    }
}

/// `.ltoir` files mutated under a written image: `specialize --via lto`
/// exits 0 or 1 — with the hash left as written (refused before use), and
/// with the hash rewritten to match (nvJitLink in the CLI's worker).
fn lto_ir_files_under_the_cli() {
    use ptxspec_core::props::{ImageFile, record_file_hash};
    let dir = tempdir("fuzz-ltoir");
    let out = dir.join("img");
    cli_ok(&[
        "compile".as_ref(),
        "--lto".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
        kernels_dir().join("tiny.cu").as_os_str(),
    ]);
    let (prop, ltoir) = (out.join("tiny.prop"), out.join("tiny.ltoir"));
    let (props, good) = (
        std::fs::read_to_string(&prop).unwrap(),
        std::fs::read(&ltoir).unwrap(),
    );
    let set = ptxspec_core::props::PropertySets::parse(&props)
        .unwrap()
        .get(ptxspec_core::props::SPEC_CONSTANTS_SET)
        .and_then(|s| s.iter().next().map(|(n, _)| format!("{n}=1")))
        .unwrap_or_else(|| "x=1".into());
    let mut rng = Rng(0x17);
    let runs = (iterations() / 30).max(6);
    for i in 0..runs {
        let bad = mutate(&mut rng, &good);
        std::fs::write(&ltoir, &bad).unwrap();
        let rehash = i % 2 == 1;
        let mut sets = ptxspec_core::props::PropertySets::parse(&props).unwrap();
        if rehash {
            record_file_hash(&mut sets, ImageFile::LtoIr, &bad);
        }
        std::fs::write(&prop, sets.to_text()).unwrap();
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_ptxspec"))
            .args(["specialize".as_ref(), prop.as_os_str()])
            .args(["--set", &set, "--via", "lto", "--arch", "sm_90", "-o"])
            .arg(dir.join("out.cubin"))
            .env("PTXSPEC_CACHE_DIR", dir.join("cache"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            matches!(o.status.code(), Some(0 | 1)) && !err.contains("panicked"),
            "mutant {i} (hash rewritten: {rehash}): {:?}: {err}",
            o.status
        );
        if !rehash && bad != good {
            assert!(err.contains("SHA-256"), "mutant {i}: {err}");
        }
    }
}

fn ptx_modules() {
    let seeds: Vec<Vec<u8>> = EXAMPLES
        .iter()
        .map(|ex| kernel_ptx(ex).1.into_bytes())
        .collect();
    // Three post-links and their specializations per mutant: a third of
    // the usual count.
    fuzz_rounds("ptx", &seeds, (iterations() / 3).max(1), |input| {
        let text = String::from_utf8_lossy(input).into_owned();
        for opts in [
            Options::default(),
            Options {
                buffer: BufferPlacement::Param,
                ..Default::default()
            },
            Options {
                mode: Mode::Aot,
                ..Default::default()
            },
        ] {
            if let Ok(images) = postlink::post_link(vec![("f.ptx".into(), text.clone())], &opts) {
                for img in images {
                    let _ = postlink::specialize("f.ptx", &img.ptx, img.layout.default_blob());
                    let _ = ptxspec_cli::views::images_json(std::slice::from_ref(&img));
                }
            }
        }
        let _ = postlink::specialize("f.ptx", &text, &[0; 64]);
    });
}

fn device_configurations_containers_and_tables() {
    let yaml = vec![
        ptxspec_core::device_config::DEFAULT_CONFIG
            .as_bytes()
            .to_vec(),
    ];
    fuzz("yaml", &yaml, |b| {
        let _ =
            ptxspec_core::device_config::DeviceConfig::parse(&String::from_utf8_lossy(b), "fuzz");
    });
    let container = ptxspec_core::lto::LtoIr::owned(vec![
        ("a.cu".into(), vec![7; 40]),
        ("b.cu".into(), vec![1, 2, 3]),
    ])
    .to_bytes();
    fuzz("ltoir", &[container], |b| {
        let _ = ptxspec_core::lto::LtoIr::from_bytes(b);
    });
    let table = b"[Code|Properties|Symbols]\na.ptx|a.prop|a.sym\nb.ptx|b.prop|b.sym\n".to_vec();
    fuzz("table", &[table], |b| {
        let _ = ptxspec_core::props::FileTable::parse(&String::from_utf8_lossy(b));
    });
}

/// The CLI on mutated files of every format: exit 0 or 1, never a panic.
fn the_cli_never_panics() {
    let dir = tempdir("fuzz-cli");
    let imgs = images();
    let img = &imgs[0];
    std::fs::write(dir.join("img.ptx"), &img.ptx).unwrap();
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        ("spv", spirv_seeds().remove(0)),
        ("prop", img.props.to_text().into_bytes()),
        ("ptx", kernel_ptx("matmul").1.into_bytes()),
    ];
    let mut rng = Rng(11);
    let runs = (iterations() / 10).max(10);
    for (ext, seed) in &seeds {
        for i in 0..runs {
            let input = mutate(&mut rng, seed);
            let path = dir.join(format!("img.{ext}"));
            std::fs::write(&path, &input).unwrap();
            let out = dir.join("out");
            let mut commands: Vec<Vec<&std::ffi::OsStr>> = vec![
                vec!["inspect".as_ref(), path.as_os_str()],
                vec!["inspect".as_ref(), "--json".as_ref(), path.as_os_str()],
            ];
            match *ext {
                "ptx" => commands.push(vec![
                    "post-link".as_ref(),
                    "-o".as_ref(),
                    out.as_os_str(),
                    path.as_os_str(),
                ]),
                _ => commands.push(vec![
                    "specialize".as_ref(),
                    path.as_os_str(),
                    "--set".as_ref(),
                    "x=1".as_ref(),
                    "-o".as_ref(),
                    out.as_os_str(),
                ]),
            }
            for args in commands {
                let o = cli(&args);
                let err = String::from_utf8_lossy(&o.stderr);
                let code = o.status.code();
                if !matches!(code, Some(0 | 1)) || err.contains("panicked") {
                    let keep = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                        .join(format!("fuzz-failure-cli-{i}.{ext}"));
                    std::fs::write(&keep, &input).unwrap();
                    panic!(
                        "ptxspec {args:?} exited {code:?}: {err}\ninput in {}",
                        keep.display()
                    );
                }
            }
        }
    }
}

fn main() -> std::process::ExitCode {
    harness::run(
        "fuzz",
        vec![
            ("spirv_modules", spirv_modules as fn(), harness::NOTHING),
            ("property_files", property_files as fn(), harness::NOTHING),
            (
                "property_values_as_numbers",
                property_values_as_numbers as fn(),
                harness::NOTHING,
            ),
            (
                "lto_ir_files_under_the_cli",
                lto_ir_files_under_the_cli as fn(),
                harness::NVIDIA,
            ),
            ("ptx_modules", ptx_modules as fn(), harness::NOTHING),
            (
                "device_configurations_containers_and_tables",
                device_configurations_containers_and_tables as fn(),
                harness::NOTHING,
            ),
            (
                "the_cli_never_panics",
                the_cli_never_panics as fn(),
                harness::NOTHING,
            ),
        ],
    )
}
