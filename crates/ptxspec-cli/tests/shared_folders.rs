//! Outputs written into a folder others can write (a sticky, world-writable
//! one such as `/tmp`): a symbolic link another user planted at an output's
//! name is never resolved — the output replaces the link, or the command
//! fails — and the link's target is never written (issue: `header -o DIR`
//! followed `DIR/ptxspec.cuh` and replaced the file it pointed to). Every
//! command that writes files is tried.

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use common::*;

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// A sticky, world-writable folder (as `/tmp` is) and a victim file
/// outside it.
fn shared_and_victim(name: &str) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let base = tempdir(name);
    let shared = base.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = base.join("victim.txt");
    std::fs::write(&victim, "the victim's own file\n").unwrap();
    (shared, victim)
}

/// Plants a link at `at` to `victim`, owned by another user where this
/// test may give it away (as root), as an attacker's would be.
fn plant(at: &Path, victim: &Path) {
    if let Some(parent) = at.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::os::unix::fs::symlink(victim, at).unwrap();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } == 0 {
        std::os::unix::fs::lchown(at, Some(65534), Some(65534)).unwrap();
    }
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// After a command: the victim is as it was, and the output path is
/// either a regular file (the link replaced) or still the link (the
/// command refused, and failed).
fn check(what: &str, output: &std::process::Output, at: &Path, victim: &Path) {
    assert_eq!(
        std::fs::read_to_string(victim).unwrap(),
        "the victim's own file\n",
        "{what}: the link's target was written: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let meta = std::fs::symlink_metadata(at).unwrap();
    if meta.file_type().is_symlink() {
        assert!(
            !output.status.success(),
            "{what}: succeeded, but its output is still the planted link"
        );
    } else {
        assert!(meta.is_file(), "{what}");
    }
}

fn planted_links_in_a_shared_output_folder_are_never_followed() {
    let (shared, victim) = shared_and_victim("shared-outputs");
    // header -o DIR
    let at = shared.join("hdr/ptxspec.cuh");
    plant(&at, &victim);
    let o = cli(&[os("header"), os("-o"), shared.join("hdr").as_os_str()]);
    check("header -o", &o, &at, &victim);
    // compile -o DIR, --keep-ptx DIR: the images and the kept PTX.
    let src = shared.join("k.cu");
    std::fs::write(&src, ONE_CONSTANT_KERNEL).unwrap();
    let out = shared.join("out");
    let kept = shared.join("kept");
    for name in ["table.txt", "k.ptx", "k.prop", "k.sym"] {
        plant(&out.join(name), &victim);
    }
    plant(&kept.join("k.ptx"), &victim);
    let o = cli(&[
        os("compile"),
        os("--keep-ptx"),
        kept.as_os_str(),
        os("-o"),
        out.as_os_str(),
        src.as_os_str(),
    ]);
    for name in ["table.txt", "k.ptx", "k.prop", "k.sym"] {
        check(
            &format!("compile -o ({name})"),
            &o,
            &out.join(name),
            &victim,
        );
    }
    check("compile --keep-ptx", &o, &kept.join("k.ptx"), &victim);
    // post-link -o DIR of the kept PTX, into a fresh folder with links.
    let relinked = shared.join("relinked");
    plant(&relinked.join("table.txt"), &victim);
    let o = cli(&[
        os("post-link"),
        os("-o"),
        relinked.as_os_str(),
        kept.join("k.ptx").as_os_str(),
    ]);
    check("post-link -o", &o, &relinked.join("table.txt"), &victim);
    // specialize -o FILE, aspect-filter -o FILE (of a genuine image).
    let image = tempdir("shared-image");
    let genuine = image.join("img");
    cli_ok(&[
        os("compile"),
        os("-o"),
        genuine.as_os_str(),
        src.as_os_str(),
    ]);
    let at = shared.join("special.ptx");
    plant(&at, &victim);
    let o = cli(&[
        os("specialize"),
        genuine.join("k.prop").as_os_str(),
        os("--set"),
        os("sc=3"),
        os("--via"),
        os("ptx"),
        os("-o"),
        at.as_os_str(),
    ]);
    check("specialize -o", &o, &at, &victim);
    let at = shared.join("filtered.txt");
    plant(&at, &victim);
    let o = cli(&[
        os("aspect-filter"),
        os("--target=sm_80"),
        genuine.join("table.txt").as_os_str(),
        os("-o"),
        at.as_os_str(),
    ]);
    check("aspect-filter -o", &o, &at, &victim);
    // cache keygen: a link at either path stops it before it writes.
    let at = shared.join("k.pub");
    plant(&at, &victim);
    let o = cli(&[
        os("cache"),
        os("keygen"),
        os("--secret"),
        shared.join("k.secret").as_os_str(),
        os("--public"),
        at.as_os_str(),
    ]);
    check("cache keygen", &o, &at, &victim);
    assert!(!o.status.success());
    assert!(
        !shared.join("k.secret").exists(),
        "keygen left a secret behind"
    );
}

fn main() -> std::process::ExitCode {
    harness::run(
        "shared_folders",
        vec![(
            "planted_links_in_a_shared_output_folder_are_never_followed",
            planted_links_in_a_shared_output_folder_are_never_followed as fn(),
            harness::NVIDIA,
        )],
    )
}
