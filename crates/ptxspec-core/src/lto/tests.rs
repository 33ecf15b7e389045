//! The cubin caches' and links' unit tests.

use super::*;

#[test]
fn a_cubin_debugs_as_its_size_not_its_bytes() {
    let c = Cubin::in_memory(Arc::new(vec![0x7f; 40_000]));
    let shown = format!("{c:?}");
    assert_eq!(
        shown,
        "Cubin { bytes: <40000 bytes>, source: Memory, log: \"\" }"
    );
}

/// Fixed kernel arguments are in the key — their values, which
/// parameter, the kernel's parameter types — and a link without any has
/// the key it had before they existed (the canonical encoding above).
#[test]
fn fixed_arguments_are_in_the_key() {
    use crate::arguments::{FixedArguments, KernelParams};
    let ptx = |ty: &str| {
        format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(\n\t.param .u32 k_param_0,\n\t.param .{ty} k_param_1\n)\n{{\n\tret;\n}}\n"
        )
    };
    let fixed = |ty: &str, index: usize, value: u32| {
        let p = KernelParams::from_ptx(&ptx(ty), "k").unwrap();
        FixedArguments::new(&p, vec![(index, value.to_le_bytes().to_vec())]).unwrap()
    };
    let toolkit = Toolkit::InProcess;
    let ir = LtoIr::owned(vec![]);
    let key = |arguments: Option<&FixedArguments>| {
        memory_key(&LinkRequest {
            ltoir: &ir,
            ltoir_identity: Digest([1; 32]),
            definitions: &[],
            arch: 90,
            options: &[],
            toolkit: &toolkit,
            kernel: Some("k"),
            arguments,
        })
    };
    let family = [
        fixed("u32", 0, 16),
        fixed("u32", 0, 32),
        fixed("u32", 1, 16),
        fixed("f32", 0, 16),
    ];
    let mut keys: Vec<Vec<u8>> = family.iter().map(|f| key(Some(f))).collect();
    let without = key(None);
    assert!(
        keys.iter()
            .all(|k| k.starts_with(&without) && k.len() > without.len())
    );
    keys.push(without);
    let n = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), n, "every request its own key");
}

/// The cubin key is the canonical encoding its docs describe, written
/// out here byte by byte (each field a little-endian u64 length and its
/// bytes): its SHA-256 keys the other tiers. (Keys of value sets once
/// collided under a 128-bit non-cryptographic hash.) And a family of
/// requests that differ in one part each — values, the same bytes cut
/// between two constants another way, alignment, symbol, architecture,
/// options, kernel, identity — have distinct keys.
#[test]
fn cubin_keys_are_the_sha256_of_a_canonical_encoding() {
    let toolkit = Toolkit::InProcess;
    let ir = LtoIr::owned(vec![]);
    let request = |defs: &'static [Definition<'static>],
                   arch: u32,
                   options: &'static [String],
                   kernel: Option<&'static str>,
                   identity: u8| {
        memory_key(&LinkRequest {
            ltoir: &ir,
            ltoir_identity: Digest([identity; 32]),
            definitions: defs,
            arch,
            options,
            toolkit: &toolkit,
            kernel,
            arguments: None,
        })
    };
    const A: &[Definition<'static>] = &[Definition {
        symbol: "s",
        align: 4,
        bytes: &[1, 0, 0, 0],
    }];
    let field = |b: &[u8]| [&(b.len() as u64).to_le_bytes()[..], b].concat();
    let mut want = field(b"ptxspec lto cubin v4");
    want.extend(field(&[7; 32]));
    want.extend(field(&90u64.to_le_bytes()));
    want.extend(field(&1u64.to_le_bytes()));
    want.extend(field(b"s"));
    want.extend(field(&4u64.to_le_bytes()));
    want.extend(field(&[1, 0, 0, 0]));
    want.extend(field(&0u64.to_le_bytes()));
    want.extend(field(&0u64.to_le_bytes()));
    let key = request(A, 90, &[], None, 7);
    assert_eq!(key, want);
    assert_eq!(
        remote_key(&key, 90),
        Digest::of(&{
            let mut r = field(b"ptxspec remote cubin v4");
            r.extend(field(&want));
            r.extend(field(
                toolkit::library_release(toolkit::Lib::NvJitLink)
                    .unwrap_or_default()
                    .as_bytes(),
            ));
            r.extend(field(&90u64.to_le_bytes()));
            r
        })
    );
    const SPLIT_1: &[Definition<'static>] = &[
        Definition {
            symbol: "a",
            align: 1,
            bytes: &[1, 2],
        },
        Definition {
            symbol: "b",
            align: 1,
            bytes: &[3],
        },
    ];
    const SPLIT_2: &[Definition<'static>] = &[
        Definition {
            symbol: "a",
            align: 1,
            bytes: &[1],
        },
        Definition {
            symbol: "b",
            align: 1,
            bytes: &[2, 3],
        },
    ];
    const OTHER_VALUE: &[Definition<'static>] = &[Definition {
        symbol: "s",
        align: 4,
        bytes: &[2, 0, 0, 0],
    }];
    const OTHER_ALIGN: &[Definition<'static>] = &[Definition {
        symbol: "s",
        align: 8,
        bytes: &[1, 0, 0, 0],
    }];
    const OTHER_SYMBOL: &[Definition<'static>] = &[Definition {
        symbol: "t",
        align: 4,
        bytes: &[1, 0, 0, 0],
    }];
    static LINEINFO: std::sync::LazyLock<Vec<String>> =
        std::sync::LazyLock::new(|| vec!["-lineinfo".into()]);
    let keys = [
        key.clone(),
        request(SPLIT_1, 90, &[], None, 7),
        request(SPLIT_2, 90, &[], None, 7),
        request(OTHER_VALUE, 90, &[], None, 7),
        request(OTHER_ALIGN, 90, &[], None, 7),
        request(OTHER_SYMBOL, 90, &[], None, 7),
        request(A, 80, &[], None, 7),
        request(A, 90, LINEINFO.as_slice(), None, 7),
        request(A, 90, &[], Some("k"), 7),
        request(A, 90, &[], Some(""), 7),
        request(A, 90, &[], None, 8),
    ];
    let distinct: std::collections::HashSet<&Vec<u8>> = keys.iter().collect();
    assert_eq!(distinct.len(), keys.len());
    let digests: std::collections::HashSet<Digest> =
        keys.iter().map(|k| remote_key(k, 90)).collect();
    assert_eq!(digests.len(), keys.len());
}

#[test]
fn definitions_as_ir_and_cuda() {
    let defs = [Definition {
        symbol: "ptxspec_lto_bs",
        align: 4,
        bytes: &[16, 0, 0, 0],
    }];
    let ir = nvvm_ir(&defs, (2, 0, 3, 1));
    assert!(
        ir.contains(
            "@ptxspec_lto_bs = addrspace(1) constant [4 x i8] c\"\\10\\00\\00\\00\", align 4\n"
        ),
        "{ir}"
    );
    assert!(ir.ends_with("!0 = !{i32 2, i32 0, i32 3, i32 1}\n"), "{ir}");
    assert_eq!(
        cuda_source(&defs),
        "extern \"C\" __device__ __align__(4) const unsigned char ptxspec_lto_bs[4] = {16,0,0,0};\n"
    );
}

/// A graph verdict's word reads back; no variant verdict's word is one, and
/// no graph word is a variant's.
#[test]
fn graph_verdict_words_read_back_and_are_no_variants() {
    use crate::tier_profile::{Kept, MAX_GRAPH_CONTENDERS};
    for kept in 0..MAX_GRAPH_CONTENDERS {
        let word = graph_word(kept);
        assert_eq!(graph_word_kept(word.as_bytes()), Some(kept), "{word}");
        assert_eq!(Kept::from_word(&word), None, "{word}");
    }
    for k in [Kept::Lto, Kept::Ptx, Kept::Generic] {
        assert_eq!(graph_word_kept(k.word().as_bytes()), None);
    }
    let over = format!("graph={MAX_GRAPH_CONTENDERS}");
    for bad in [
        "",
        "graph=",
        "graph=x",
        "graph=-1",
        "graph=+1",
        "graph=001",
        "graph= 1",
        "graph=1 ",
        "Graph=1",
        "graph:1",
        over.as_str(),
    ] {
        assert_eq!(graph_word_kept(bad.as_bytes()), None, "{bad:?}");
    }
    assert_eq!(graph_word_kept(b"graph=\xff"), None);
}
