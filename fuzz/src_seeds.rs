//! Writes the seeds of the targets whose inputs no file of the repository
//! holds — a signed remote entry, an LTO-IR container, SPIR-V modules,
//! values — into `DIR/<target>/` (`fuzz/run.sh` runs it; the other
//! targets' seeds are the filetests' and kernels' files).

use std::path::Path;

use ptxspec_core::digest::Digest;
use ptxspec_core::layout::{Layout, Numbering, ScalarKind, SpecConstant, SpecType};
use ptxspec_core::lto::LtoIr;
use ptxspec_core::lto::remote::entry::{seal, secret_key};

/// remote_entry's writer key (the same constant as the target's).
const SECRET: &str = "4f2b1a6c9d8e7f6051423324150607f8e9dacbbcadbecfd0e1f2031425364758";

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) {
    let d = dir.join(target);
    std::fs::create_dir_all(&d).expect("the seed folder");
    std::fs::write(d.join(name), bytes).expect("a seed");
}

fn main() {
    let dir = std::env::args().nth(1).expect("usage: seeds DIR");
    let dir = Path::new(&dir);
    let secret = secret_key(SECRET).expect("the fuzzer's secret key");
    let key = Digest::of(b"ptxspec fuzz key");
    let cubin = b"\x7fELF a cubin's first bytes, and more".to_vec();
    write(
        dir,
        "remote_entry",
        "entry",
        &seal(&secret, &key, 90, &cubin),
    );
    write(
        dir,
        "remote_entry",
        "other_arch",
        &seal(&secret, &key, 80, &cubin),
    );
    let ir = LtoIr::owned(vec![
        ("a.cu".into(), b"\x7fNVVM IR of a".to_vec()),
        ("b.cu".into(), vec![0u8; 40]),
    ]);
    write(dir, "ltoir", "two_units", &ir.to_bytes());
    write(
        dir,
        "tier_profile",
        "profile",
        b"matmul sm_90 matmul_kernel 10000000\nconv sm_80 _Z4convPfS_ 0300000000000000\n\
          matmul sm_90 matmul_kernel 10000000\nnot a value set\n\n\
          baselines sm_90 matmul_param - args=3:00010000,4:10000000 kept=lto\n\
          graph-trial 668f50127625da2c5e2c95860c4366b629ae0bfb6f5b4a32ba2a340aea11fcb6 kept=1\n",
    );
    let s = SpecType::Scalar;
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
    for (i, cs) in layouts.into_iter().enumerate() {
        let layout = Layout::build(Numbering::Native, cs).expect("a layout");
        let module = ptxspec_core::spirv::write(&layout).expect("a module");
        write(dir, "spirv", &format!("module{i}"), &module);
    }
    for (i, r) in [
        &b"$5\r\nhello\r\n"[..],
        b"$-1\r\n",
        b"+OK\r\n",
        b"-ERR no\r\n",
        b":42\r\n",
        b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n",
        b"$70000\r\n",
    ]
    .iter()
    .enumerate()
    {
        let mut seed = vec![0xff];
        seed.extend_from_slice(r);
        write(dir, "resp_reply", &format!("reply{i}"), &seed);
    }
    for (i, v) in [
        "7",
        "0x1f",
        "-3",
        "1,2.5,3",
        "true",
        "bytes:0a0b0c0d",
        "1e400",
        "300",
    ]
    .iter()
    .enumerate()
    {
        let mut seed = vec![i as u8, 1];
        seed.extend_from_slice(v.as_bytes());
        write(dir, "set_value", &format!("value{i}"), &seed);
    }
}
