//! The command line as a newcomer meets it: outputs never replace inputs,
//! nothing is left behind on failure, reruns leave exactly the new images,
//! formats are recognized by content, `--set` is checked, the built-in
//! device table is offered, one JSON document per `inspect`.

mod common;

use std::ffi::OsStr;
use std::path::Path;

use common::*;

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `post-link -o OUT INPUTS...` as arguments.
fn post_link_args<'a>(out: &'a Path, inputs: &[&'a Path]) -> Vec<&'a OsStr> {
    let mut args: Vec<&OsStr> = vec!["post-link".as_ref(), "-o".as_ref(), out.as_os_str()];
    args.extend(inputs.iter().map(|p| p.as_os_str()));
    args
}

fn err(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn an_output_never_replaces_an_input() {
    let dir = tempdir("no-overwrite");
    let input = dir.join("conv3x3.ptx");
    let original = kernel_ptx("conv3x3").1;
    std::fs::write(&input, &original).unwrap();
    let o = cli(&post_link_args(&dir, &[&input]));
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(err(&o).contains("would replace an input"), "{}", err(&o));
    assert_eq!(std::fs::read_to_string(&input).unwrap(), original);
    assert_eq!(names(&dir), ["conv3x3.ptx"], "nothing written");
}

fn reruns_leave_exactly_the_new_images_and_failures_leave_nothing() {
    let dir = tempdir("rerun");
    let out = dir.join("out");
    let (conv, matmul) = (kernel_ptx_path("conv3x3"), kernel_ptx_path("matmul"));
    cli_ok(&post_link_args(&out, &[&conv, &matmul]));
    assert_eq!(
        names(&out),
        [
            "conv3x3.prop",
            "conv3x3.ptx",
            "conv3x3.sym",
            "matmul.prop",
            "matmul.ptx",
            "matmul.sym",
            "table.txt"
        ]
    );
    // A file of the user's own stays; the earlier run's matmul image goes.
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    cli_ok(&post_link_args(&out, &[&conv]));
    assert_eq!(
        names(&out),
        [
            "conv3x3.prop",
            "conv3x3.ptx",
            "conv3x3.sym",
            "notes.txt",
            "table.txt"
        ]
    );
    // A failing run changes nothing and leaves no temporary file.
    let bad = dir.join("bad.ptx");
    std::fs::write(
        &bad,
        ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k( {\n",
    )
    .unwrap();
    let before: Vec<(String, Vec<u8>)> = names(&out)
        .into_iter()
        .map(|n| (n.clone(), std::fs::read(out.join(&n)).unwrap()))
        .collect();
    let o = cli(&post_link_args(&out, &[&matmul, &bad]));
    assert_eq!(o.status.code(), Some(1));
    let after: Vec<(String, Vec<u8>)> = names(&out)
        .into_iter()
        .map(|n| (n.clone(), std::fs::read(out.join(&n)).unwrap()))
        .collect();
    assert_eq!(before, after);
}

fn an_unwritable_output_is_named_and_nothing_temporary_stays() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc_geteuid() } == 0 {
        // Root writes anywhere: use a path under a file instead.
        let dir = tempdir("unwritable");
        let file = dir.join("a-file");
        std::fs::write(&file, "x").unwrap();
        let out = file.join("out");
        let conv = kernel_ptx_path("conv3x3");
        let o = cli(&post_link_args(&out, &[&conv]));
        assert_eq!(o.status.code(), Some(1));
        let e = err(&o);
        assert!(
            e.contains(&out.display().to_string()),
            "the user's path: {e}"
        );
        assert!(!e.contains("ptxspec-tmp"), "no internal path: {e}");
        assert_eq!(names(&dir), ["a-file"]);
        return;
    }
    let dir = tempdir("read-only-parent");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let mut perms = std::fs::metadata(&dir).unwrap().permissions();
    use std::os::unix::fs::PermissionsExt;
    perms.set_mode(0o555);
    std::fs::set_permissions(&dir, perms.clone()).unwrap();
    let conv = kernel_ptx_path("conv3x3");
    let o = cli(&post_link_args(&out, &[&conv]));
    perms.set_mode(0o755);
    std::fs::set_permissions(&dir, perms).unwrap();
    assert!(
        o.status.success(),
        "a writable output under a read-only parent works: {}",
        err(&o)
    );
}

/// `geteuid` without a dependency.
unsafe fn libc_geteuid() -> u32 {
    unsafe extern "C" {
        fn geteuid() -> u32;
    }
    // SAFETY: libc's geteuid, declared with its signature; no preconditions.
    unsafe { geteuid() }
}

fn specialize_and_aspect_filter_write_files_not_into_directories() {
    let dir = tempdir("outputs");
    let out = dir.join("images");
    let conv = kernel_ptx_path("conv3x3");
    cli_ok(&post_link_args(&out, &[&conv]));
    let prop = out.join("conv3x3.prop");
    let existing = dir.join("existing");
    std::fs::create_dir_all(&existing).unwrap();
    let o = cli(&[
        "specialize".as_ref(),
        prop.as_os_str(),
        "--set".as_ref(),
        "coeff_id=1,0,-1,2,0,-2,1,0,-1".as_ref(),
        "-o".as_ref(),
        existing.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("is a directory"), "{}", err(&o));
    let table = out.join("table.txt");
    let o = cli(&[
        "aspect-filter".as_ref(),
        "--target=sm_90".as_ref(),
        table.as_os_str(),
        "-o".as_ref(),
        existing.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        names(&existing).is_empty() && names(&dir) == ["existing", "images"],
        "{:?}",
        names(&dir)
    );
    // The built-in table when --device-config-file is absent.
    let kept = dir.join("kept.txt");
    let o = cli_ok(&[
        "aspect-filter".as_ref(),
        "--target=sm_90".as_ref(),
        table.as_os_str(),
        "-o".as_ref(),
        kept.as_os_str(),
    ]);
    assert!(err(&o).contains("kept 1 of 1"), "{}", err(&o));
    // An unknown target names the known ones in numeric order.
    let o = cli(&[
        "aspect-filter".as_ref(),
        "--target=sm_1".as_ref(),
        table.as_os_str(),
        "-o".as_ref(),
        kept.as_os_str(),
    ]);
    let e = err(&o);
    let (p50, p100) = (e.find("sm_50").unwrap(), e.find("sm_100").unwrap());
    assert!(p50 < p100, "sm_50 before sm_100: {e}");
}

/// An output whose name says the other format is refused before anything
/// is written: PTX into `.cubin` (the default `--via ptx`, in any letter
/// case, with or without `--via`), a cubin into `.ptx`.
fn specialize_refuses_an_output_named_for_the_other_format() {
    let dir = tempdir("output-kind");
    let out = dir.join("images");
    cli_ok(&post_link_args(&out, &[&kernel_ptx_path("conv3x3")]));
    let prop = out.join("conv3x3.prop");
    let set = "coeff_id=1,0,-1,2,0,-2,1,0,-1";
    let cases: [(&[&str], &str, &str); 4] = [
        (&[], "x.cubin", "--via ptx (the default) writes PTX text"),
        (
            &["--via", "ptx"],
            "x.CUBIN",
            "--via ptx (the default) writes PTX text",
        ),
        (
            &["--via", "lto", "--arch", "sm_90"],
            "x.ptx",
            "--via lto writes a cubin",
        ),
        (
            &["--via", "lto", "--arch", "sm_90"],
            "x.Ptx",
            "--via lto writes a cubin",
        ),
    ];
    for (via, name, said) in cases {
        let target = dir.join(name);
        let mut args: Vec<&OsStr> = vec!["specialize".as_ref(), prop.as_os_str()];
        args.extend(["--set", set].into_iter().map(OsStr::new));
        args.extend(via.iter().map(OsStr::new));
        args.extend(["-o".as_ref(), target.as_os_str()]);
        let o = cli(&args);
        assert_eq!(o.status.code(), Some(1), "{name}: {}", err(&o));
        assert!(err(&o).contains(said), "{name}: {}", err(&o));
        assert!(!target.exists(), "{name} written");
    }
    // The name that matches is written.
    let ptx = dir.join("x.ptx");
    let mut args: Vec<&OsStr> = vec!["specialize".as_ref(), prop.as_os_str()];
    args.extend(["--set", set, "-o"].into_iter().map(OsStr::new));
    args.push(ptx.as_os_str());
    cli_ok(&args);
    assert!(std::fs::read_to_string(&ptx).unwrap().contains(".entry"));
}

fn set_values_are_checked() {
    let dir = tempdir("set");
    let out = dir.join("images");
    let scalars = kernel_ptx_path("scalars");
    cli_ok(&post_link_args(&out, &[&scalars]));
    let prop = out.join("scalars.prop");
    let ptx = dir.join("s.ptx");
    let run = |sets: &[&str]| {
        let mut args: Vec<&OsStr> = vec!["specialize".as_ref(), prop.as_os_str()];
        for s in sets {
            args.push("--set".as_ref());
            args.push(s.as_ref());
        }
        args.push("-o".as_ref());
        args.push(ptx.as_os_str());
        cli(&args)
    };
    let o = run(&["short_id=7", "short_id=8"]);
    assert!(err(&o).contains("given twice"), "{}", err(&o));
    let o = run(&["short_id=70000"]);
    assert!(
        err(&o).contains("\"70000\" is not a int16_t"),
        "{}",
        err(&o)
    );
    let o = run(&["nope=1"]);
    assert!(
        err(&o).contains("has no specialization constant \"nope\""),
        "{}",
        err(&o)
    );
    // Scalars by their types, a composite by its scalars, raw bytes.
    let o = run(&[
        "char_id=-3",
        "double_id=0.5",
        "bool_id=false",
        "padded_id=1,-2,-3,250",
    ]);
    assert!(o.status.success(), "{}", err(&o));
    // The struct { int; char; int; char } is its four members: not its tail
    // padding (which a vector load also fills), and integers of either
    // signedness, which PTX does not record for members.
    let o = run(&["padded_id=1,2,3,4,0,0,0"]);
    assert!(
        err(&o).contains(
            "7 values given, the constant holds 4 (int32_t or uint32_t, int8_t or uint8_t, int32_t or \
             uint32_t, int8_t or uint8_t)"
        ),
        "{}",
        err(&o)
    );
    let o = run(&["padded_id=1,2,3,256"]);
    assert!(err(&o).contains("it holds -128 to 255"), "{}", err(&o));
    let text = std::fs::read_to_string(&ptx).unwrap();
    assert!(text.contains("0xFFFFFFFD;"), "char -3 sign-extended");
    assemble(&text, "sm_90", "specialized from the command line");
    let o = run(&["u64_id=0x0100000000000000"]);
    assert!(o.status.success(), "{}", err(&o));
    // A hex literal is the number it spells (it was taken as raw bytes
    // when it had exactly the value's width: 0x0010 became 0x1000).
    let o = run(&["short_id=0x0010"]);
    assert!(o.status.success(), "{}", err(&o));
    let text = std::fs::read_to_string(&ptx).unwrap();
    assert!(text.contains("0x00000010;"), "short 0x0010 is 16");
    assert!(!text.contains("0x00001000;"));
    // Raw bytes have their own spelling.
    let o = run(&["short_id=bytes:1000"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        std::fs::read_to_string(&ptx)
            .unwrap()
            .contains("0x00000010;")
    );
    // Out of range, not a bool, not finite, not hexadecimal: errors, never
    // a panic or a wrapped value.
    for (set, says) in [
        ("bool_id=0x02", "is not a bool"),
        ("bool_id=2", "is not a bool"),
        ("double_id=1e400", "is not a double"),
        ("char_id=300", "is not a int8_t"),
        ("short_id=0x0\u{e9}0", "is not a int16_t"),
        ("short_id=bytes:0\u{e9}", "not a hexadecimal digit"),
    ] {
        let o = run(&[set]);
        assert_eq!(o.status.code(), Some(1), "{set}: {}", err(&o));
        assert!(err(&o).contains(says), "{set}: {}", err(&o));
    }
}

fn formats_are_recognized_by_content() {
    let dir = tempdir("formats");
    // PTX named .txt is PTX.
    let txt = dir.join("conv.txt");
    std::fs::write(&txt, kernel_ptx("conv3x3").1).unwrap();
    let o = cli_ok(&["inspect".as_ref(), "--json".as_ref(), txt.as_os_str()]);
    let json = String::from_utf8_lossy(&o.stdout);
    // One document, of the images post-link would write.
    assert!(
        json.starts_with(
            "{\"images\":[{\"name\":\"conv\",\"kernels\":[\"conv3x3\"],\"buffer\":\"param\""
        ),
        "{json}"
    );
    assert_eq!(json.trim().lines().count(), 1);
    // A module that splits: still one document.
    let two = dir.join("two.ptx");
    let matmul = kernel_ptx("matmul").1;
    std::fs::write(&two, &matmul).unwrap();
    let o = cli_ok(&["inspect".as_ref(), "--json".as_ref(), two.as_os_str()]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim().lines().count(), 1);
    // Not UTF-8: the file is named with what was expected.
    let bin = dir.join("bin.ptx");
    std::fs::write(&bin, b".version 8.0\n\xff\xfe").unwrap();
    let out = dir.join("o");
    let o = cli(&post_link_args(&out, &[&bin]));
    let e = err(&o);
    assert!(
        e.contains("bin.ptx") && e.contains("not UTF-8") && e.contains("expected PTX"),
        "{e}"
    );
    // A .prop given to post-link says what it is.
    let prop = dir.join("x.ptx");
    std::fs::write(&prop, "[SYCL/specialization constants]\na=2|AAAAAAAAAAA\n").unwrap();
    let o = cli(&post_link_args(&out, &[&prop]));
    assert!(err(&o).contains("holds a property file"), "{}", err(&o));
    assert!(!out.exists());
}

fn help_teaches() {
    let top = String::from_utf8_lossy(&cli_ok(&["--help".as_ref()]).stdout).into_owned();
    assert!(top.contains(".prop, .ptx, .spv or .ltoir"), "{top}");
    let inspect = String::from_utf8_lossy(&cli_ok(&["inspect".as_ref(), "--help".as_ref()]).stdout)
        .into_owned();
    assert!(
        inspect.contains(".ptx") && inspect.contains(".spv"),
        "{inspect}"
    );
    let post = String::from_utf8_lossy(&cli_ok(&["post-link".as_ref(), "--help".as_ref()]).stdout)
        .into_owned();
    assert!(post.contains("off included, also splits"), "{post}");
    let spec = String::from_utf8_lossy(&cli_ok(&["specialize".as_ref(), "--help".as_ref()]).stdout)
        .into_owned();
    assert!(spec.contains("Repeat --set"), "{spec}");
    assert!(spec.contains("needs --arch"), "{spec}");
    let warm = String::from_utf8_lossy(
        &cli_ok(&["cache".as_ref(), "warm".as_ref(), "--help".as_ref()]).stdout,
    )
    .into_owned();
    assert!(
        warm.contains("found from FILE's folder")
            && warm.contains("differs from compile to compile"),
        "{warm}"
    );
    // -v and RUST_LOG are on the first screen.
    assert!(top.contains("RUST_LOG") && top.contains("-v"), "{top}");
}

fn header_writes_the_device_header_for_other_compilers() {
    let dir = tempdir("header").join("include");
    let out = cli_ok(&["header".as_ref(), "-o".as_ref(), dir.as_os_str()]);
    let file = dir.join("ptxspec.cuh");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        file.display().to_string()
    );
    let shipped = std::fs::read(root().join("crates/ptxspec-core/include/ptxspec.cuh")).unwrap();
    assert_eq!(std::fs::read(&file).unwrap(), shipped);
    // A compiler given only that folder compiles a kernel that uses it.
    let src = std::fs::read_to_string(kernels_dir().join("tiny.cu")).unwrap();
    let opts = [
        "-rdc=true".to_string(),
        "-std=c++17".to_string(),
        "-arch=compute_80".to_string(),
        format!("-I{}", dir.display()),
    ];
    let ptx = ptxspec_core::toolkit::nvrtc::compile(
        &src,
        "tiny.cu",
        &opts,
        ptxspec_core::toolkit::nvrtc::Output::Ptx,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(String::from_utf8_lossy(&ptx.code).contains("2020SpecConstantValue"));
}

fn counts_read_as_english() {
    let dir = tempdir("counts");
    let out = dir.join("out");
    let tiny = kernel_ptx_path("tiny");
    let o = cli_ok(&post_link_args(&out, &[&tiny]));
    let e = err(&o);
    assert!(e.contains("wrote 1 device image and "), "{e}");
    assert!(
        e.contains("1 specialization constant, 4 bytes of values"),
        "{e}"
    );
    let pod = kernel_ptx_path("pod");
    let o = cli_ok(&post_link_args(&out, &[&tiny, &pod]));
    assert!(
        err(&o).contains("wrote 2 device images and "),
        "{}",
        err(&o)
    );
}

fn post_linked_images_are_recognized() {
    let dir = tempdir("written");
    let out = dir.join("out");
    let tiny = kernel_ptx_path("tiny");
    cli_ok(&post_link_args(&out, &[&tiny]));
    let written = out.join("tiny.ptx");
    // inspect shows the image as written, with its constant.
    let o = cli_ok(&["inspect".as_ref(), written.as_os_str()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.starts_with("device image tiny (post-linked"), "{text}");
    assert!(text.contains("tiny_id"), "{text}");
    let o = cli_ok(&["inspect".as_ref(), "--json".as_ref(), written.as_os_str()]);
    let json = String::from_utf8_lossy(&o.stdout);
    assert!(
        json.starts_with(
            "{\"images\":[{\"name\":\"tiny\",\"kernels\":[\"tiny\"],\"buffer\":\"param\""
        ),
        "{json}"
    );
    assert_eq!(json.trim().lines().count(), 1, "{json}");
    // post-link refuses it, and writes nothing.
    let again = dir.join("again");
    let o = cli(&post_link_args(&again, &[&written]));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err(&o).contains("a device image post-linked already"),
        "{}",
        err(&o)
    );
    assert!(!again.exists());
    // Into its own folder too: the input is not lost.
    let o = cli(&post_link_args(&out, &[&written]));
    assert_eq!(o.status.code(), Some(1));
    assert!(written.is_file() && out.join("tiny.prop").is_file());
}

fn specialize_never_writes_over_its_input() {
    let dir = tempdir("specialize-input");
    let out = dir.join("img");
    let tiny = kernel_ptx_path("tiny");
    cli_ok(&post_link_args(&out, &[&tiny]));
    let prop = out.join("tiny.prop");
    let before: Vec<Vec<u8>> = ["tiny.prop", "tiny.ptx"]
        .iter()
        .map(|f| std::fs::read(out.join(f)).unwrap())
        .collect();
    for target in [prop.clone(), out.join("tiny.ptx"), out.join("./tiny.prop")] {
        let o = cli(&[
            "specialize".as_ref(),
            prop.as_os_str(),
            "--set".as_ref(),
            "tiny_id=3".as_ref(),
            "-o".as_ref(),
            target.as_os_str(),
        ]);
        assert_eq!(o.status.code(), Some(1), "{}", err(&o));
        assert!(err(&o).contains("that is the input"), "{}", err(&o));
    }
    let after: Vec<Vec<u8>> = ["tiny.prop", "tiny.ptx"]
        .iter()
        .map(|f| std::fs::read(out.join(f)).unwrap())
        .collect();
    assert_eq!(before, after);
}

fn post_link_never_deletes_an_input_that_an_old_table_lists() {
    // An input inside the output folder that an earlier table.txt listed
    // (so a rerun would remove it as a stale image).
    let out = tempdir("stale-input");
    let input = out.join("old.ptx");
    let original = kernel_ptx("matmul").1;
    std::fs::write(&input, &original).unwrap();
    std::fs::write(
        out.join("table.txt"),
        "[Code|Properties|Symbols]\nold.ptx|old.prop|old.sym\n",
    )
    .unwrap();
    let mut args = post_link_args(&out, &[&input]);
    args.splice(1..1, ["--split".as_ref(), "per_kernel".as_ref()]);
    cli_ok(&args);
    assert_eq!(std::fs::read_to_string(&input).unwrap(), original);
    assert!(out.join("matmul.ptx").is_file() && out.join("matmul_rolled.ptx").is_file());
}

fn file_names_cannot_break_the_table_and_tables_cannot_hang_a_reader() {
    let dir = tempdir("odd-names");
    let input = dir.join("a|b\nc.ptx");
    std::fs::write(&input, kernel_ptx("tiny").1).unwrap();
    let out = dir.join("out");
    cli_ok(&post_link_args(&out, &[&input]));
    let table = std::fs::read_to_string(out.join("table.txt")).unwrap();
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 2, "{table}");
    let cells: Vec<&str> = rows[1].split('|').collect();
    assert_eq!(cells.len(), 3, "{table}");
    for cell in cells {
        assert!(out.join(cell).is_file(), "{cell} of {table}");
    }
    // A table whose row names a device: an error, not a read that never ends.
    let evil = dir.join("evil.txt");
    std::fs::write(&evil, "[Code|Properties|Symbols]\nx.ptx|/dev/zero|x.sym\n").unwrap();
    let o = cli(&[
        "aspect-filter".as_ref(),
        "--target=sm_90".as_ref(),
        evil.as_os_str(),
        "-o".as_ref(),
        dir.join("kept.txt").as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(
        err(&o).contains("/dev/zero: not a regular file"),
        "{}",
        err(&o)
    );
}

/// Small things a new user trips on (issue 33, item 5): every subcommand
/// takes `--output` as `-o`; `header -o FILE` says what to do; `inspect`
/// shows each constant's type and its default decoded; `compile -v` prints
/// sizes and timings; `specialize` says what to pass for the handler it
/// keeps.
fn the_first_hours_small_things() {
    let dir = tempdir("first-hour");
    let os = |s: &str| std::ffi::OsString::from(s);
    let src = dir.join("k.cu");
    std::fs::write(
        &src,
        "#include \"ptxspec.cuh\"\nconstexpr ptxspec::specialization_id<short> s{-300};\n\
         extern \"C\" __global__ void k(short *o, ptxspec::kernel_handler h) { *o = h.get_specialization_constant<s>(); }\n",
    )
    .unwrap();
    let out = dir.join("out");
    let o = cli_ok(&[
        os("compile").as_os_str(),
        os("-v").as_os_str(),
        os("--output").as_os_str(),
        out.as_os_str(),
        src.as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bytes of source compiled and post-linked in") && err.contains("bytes of PTX"),
        "{err}"
    );
    let shown = cli_ok(&[os("inspect").as_os_str(), out.join("k.prop").as_os_str()]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("type int16_t, default -300"), "{shown}");
    let spec = dir.join("s.ptx");
    let o = cli_ok(&[
        os("specialize").as_os_str(),
        out.join("k.prop").as_os_str(),
        os("--set").as_os_str(),
        os("s=7").as_os_str(),
        os("--output").as_os_str(),
        spec.as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("keeps its kernel_handler as parameter 1 (2 bytes): pass 0"),
        "{err}"
    );
    let table = dir.join("kept.txt");
    cli_ok(&[
        os("aspect-filter").as_os_str(),
        os("--target=sm_80").as_os_str(),
        out.join("table.txt").as_os_str(),
        os("--output").as_os_str(),
        table.as_os_str(),
    ]);
    cli_ok(&[
        os("post-link").as_os_str(),
        os("--output").as_os_str(),
        dir.join("pl").as_os_str(),
        kernel_ptx_path("tiny").as_os_str(),
    ]);
    let file = dir.join("a-file");
    std::fs::write(&file, "").unwrap();
    let o = cli(&[
        os("header").as_os_str(),
        os("-o").as_os_str(),
        file.as_os_str(),
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("header -o names a directory"));
}

/// Issue 68: two runs' choices compared — the same tables, or a table and
/// its digest, say so (exit 0); tables that differ say each difference
/// (exit 1); a table signed with a key of `cache keygen` reads back through
/// the API against the trusted key and not against another, nor changed.
fn choices_are_verified_and_signed() {
    let dir = tempdir("choices");
    let line =
        |id: char, kept: &str| format!("{} sm_90 {kept} layernorm\n", id.to_string().repeat(64));
    let a = dir.join("a.txt");
    let b = dir.join("b.txt");
    let c = dir.join("c.txt");
    std::fs::write(&a, line('a', "lto") + &line('b', "generic")).unwrap();
    std::fs::write(&b, line('b', "generic") + &line('a', "lto")).unwrap();
    std::fs::write(&c, line('a', "ptx") + &line('c', "lto")).unwrap();
    let o = cli(&["verify-choices".as_ref(), a.as_os_str(), b.as_os_str()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let digest = ptxspec_core::choices::ChoiceTable::parse(&std::fs::read_to_string(&a).unwrap())
        .unwrap()
        .digest()
        .hex();
    let o = cli(&["verify-choices".as_ref(), a.as_os_str(), digest.as_ref()]);
    assert_eq!(o.status.code(), Some(0), "a table and its digest");
    let o = cli(&["verify-choices".as_ref(), a.as_os_str(), c.as_os_str()]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{said}");
    assert!(
        said.contains("lto in the first, ptx in the second"),
        "{said}"
    );
    assert!(
        said.contains("generic in the first, none in the second"),
        "{said}"
    );
    assert!(
        said.contains("none in the first, lto in the second"),
        "{said}"
    );
    let o = cli(&[
        "verify-choices".as_ref(),
        a.as_os_str(),
        dir.join("missing").as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("missing"));
    // Signed, and read back through the API.
    let (secret, public) = key_pair(&dir, "w");
    let signed = dir.join("signed.txt");
    cli_ok(&[
        "sign-choices".as_ref(),
        a.as_os_str(),
        "--secret".as_ref(),
        secret.as_os_str(),
        "-o".as_ref(),
        signed.as_os_str(),
    ]);
    let table = ptxspec::choices::read_signed(&signed, &public).unwrap();
    assert_eq!(table.digest().hex(), digest);
    let tampered = dir.join("tampered.txt");
    std::fs::write(
        &tampered,
        std::fs::read_to_string(&signed)
            .unwrap()
            .replace(" lto ", " ptx "),
    )
    .unwrap();
    assert!(ptxspec::choices::read_signed(&tampered, &public).is_err());
    assert!(
        ptxspec::choices::read_signed(&a, &public).is_err(),
        "an unsigned table"
    );
}

fn main() -> std::process::ExitCode {
    harness::run(
        "cli",
        vec![
            (
                "choices_are_verified_and_signed",
                choices_are_verified_and_signed as fn(),
                harness::NOTHING,
            ),
            (
                "an_output_never_replaces_an_input",
                an_output_never_replaces_an_input as fn(),
                harness::NOTHING,
            ),
            (
                "reruns_leave_exactly_the_new_images_and_failures_leave_nothing",
                reruns_leave_exactly_the_new_images_and_failures_leave_nothing as fn(),
                harness::NOTHING,
            ),
            (
                "an_unwritable_output_is_named_and_nothing_temporary_stays",
                an_unwritable_output_is_named_and_nothing_temporary_stays as fn(),
                harness::NOTHING,
            ),
            (
                "specialize_and_aspect_filter_write_files_not_into_directories",
                specialize_and_aspect_filter_write_files_not_into_directories as fn(),
                harness::NOTHING,
            ),
            (
                "specialize_refuses_an_output_named_for_the_other_format",
                specialize_refuses_an_output_named_for_the_other_format as fn(),
                harness::NOTHING,
            ),
            (
                "set_values_are_checked",
                set_values_are_checked as fn(),
                harness::NVIDIA,
            ),
            (
                "formats_are_recognized_by_content",
                formats_are_recognized_by_content as fn(),
                harness::NOTHING,
            ),
            ("help_teaches", help_teaches as fn(), harness::NOTHING),
            (
                "header_writes_the_device_header_for_other_compilers",
                header_writes_the_device_header_for_other_compilers as fn(),
                harness::NVIDIA,
            ),
            (
                "counts_read_as_english",
                counts_read_as_english as fn(),
                harness::NOTHING,
            ),
            (
                "post_linked_images_are_recognized",
                post_linked_images_are_recognized as fn(),
                harness::NOTHING,
            ),
            (
                "specialize_never_writes_over_its_input",
                specialize_never_writes_over_its_input as fn(),
                harness::NOTHING,
            ),
            (
                "post_link_never_deletes_an_input_that_an_old_table_lists",
                post_link_never_deletes_an_input_that_an_old_table_lists as fn(),
                harness::NOTHING,
            ),
            (
                "file_names_cannot_break_the_table_and_tables_cannot_hang_a_reader",
                file_names_cannot_break_the_table_and_tables_cannot_hang_a_reader as fn(),
                harness::NOTHING,
            ),
            (
                "the_first_hours_small_things",
                the_first_hours_small_things as fn(),
                harness::NVIDIA,
            ),
        ],
    )
}
