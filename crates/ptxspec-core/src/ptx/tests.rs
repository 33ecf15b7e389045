use super::*;
use crate::test_util::Rng;

/// Real NVRTC output (shared/nvrtc-getter-example.ptx), embedded so that the
/// unit tests need no files.
pub(crate) const NVRTC_EXAMPLE: &str =
    include_str!("../../../ptxspec-cli/tests/data/nvrtc-getter-example.ptx");

fn parse_ok(src: &str) -> Module {
    parse("t.ptx", src.to_string()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn parses_nvrtc_output_into_items() {
    let m = parse_ok(NVRTC_EXAMPLE);
    let kinds: Vec<&str> = m
        .items
        .iter()
        .map(|i| match &i.kind {
            ItemKind::Version => "version",
            ItemKind::Target => "target",
            ItemKind::AddressSize => "address_size",
            ItemKind::Variable(_) => "var",
            ItemKind::Function(f) if f.body.is_none() => "decl",
            ItemKind::Function(_) => "func",
            ItemKind::File | ItemKind::Section | ItemKind::Other => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "version",
            "target",
            "address_size",
            "decl",
            "decl",
            "var",
            "var",
            "var",
            "var",
            "func"
        ]
    );
    let ItemKind::Function(k) = &m.items[9].kind else {
        panic!()
    };
    assert!(k.is_kernel);
    assert_eq!(k.linkage, Linkage::Visible);
    assert_eq!(m.text(k.name), "k");
    assert_eq!(k.params.len(), 3);
    assert_eq!((k.params[2].size(), k.params[2].alignment()), (8, 8));
    let ItemKind::Function(g) = &m.items[4].kind else {
        panic!()
    };
    assert_eq!((g.returns[0].size(), g.returns[0].alignment()), (12, 4));
    let ItemKind::Variable(a) = &m.items[5].kind else {
        panic!()
    };
    assert_eq!(m.text(a.name), "id_A");
    assert_eq!(
        m.initializer_bytes(a).unwrap(),
        [1, 0, 0, 0, 0, 0, 0, 64, 0, 0, 64, 64]
    );
    let ItemKind::Variable(s) = &m.items[7].kind else {
        panic!()
    };
    assert_eq!(m.initializer_bytes(s).unwrap(), b"id_int\0");
    // Statements: the two callseq blocks open and close.
    let body = k.body.as_ref().unwrap();
    let opens = body
        .stmts
        .iter()
        .filter(|s| s.kind == StmtKind::Open)
        .count();
    let closes = body
        .stmts
        .iter()
        .filter(|s| s.kind == StmtKind::Close)
        .count();
    assert_eq!((opens, closes), (2, 2));
    let call = body
        .stmts
        .iter()
        .find(|s| m.text(s.op).starts_with("call"))
        .unwrap();
    let ops = m.operands(call).unwrap();
    assert_eq!(ops.len(), 3);
    assert_eq!(ops[1][0].text(&m.src), "_Z10__spec_getIiET_PKcPKvS2_");
}

#[test]
fn items_by_full_span_reproduce_the_source() {
    let m = parse_ok(NVRTC_EXAMPLE);
    let mut out = String::new();
    for item in &m.items {
        out.push_str(&m.src[item.full.range()]);
    }
    out.push_str(&m.src[m.items.last().unwrap().full.end as usize..]);
    assert_eq!(out, NVRTC_EXAMPLE);
    assert_eq!(Edits::new().apply(&m.src).unwrap(), NVRTC_EXAMPLE);
}

#[test]
fn edits_replace_ranges() {
    let src = "abcdefgh";
    let mut e = Edits::new();
    e.replace(Span::new(5, 6), "F");
    e.replace(Span::new(1, 3), "");
    e.replace(Span::new(8, 8), "!");
    assert_eq!(e.apply(src).unwrap(), "adeFgh!");
    let mut out = String::new();
    e.apply_range(src, Span::new(3, 7), &mut out).unwrap();
    assert_eq!(out, "deFg");
    // The same edit twice is one; two different edits of overlapping
    // ranges are an error naming the second, with nothing written.
    e.replace(Span::new(5, 6), "F");
    assert_eq!(e.apply(src).unwrap(), "adeFgh!");
    for (a, b) in [((2, 5), (4, 6)), ((2, 5), (2, 5)), ((2, 6), (3, 4))] {
        let mut e = Edits::new();
        e.replace(Span::new(a.0, a.1), "x");
        e.replace(Span::new(b.0, b.1), "y");
        let mut out = String::new();
        assert!(
            e.apply_range(src, Span::new(0, 8), &mut out).is_err(),
            "{a:?} {b:?}"
        );
        assert_eq!(out, "");
    }
}

#[test]
fn initializers_of_every_kind() {
    let src = ".version 8.0\n.target sm_70\n.address_size 64\n\
        .global .align 4 .u32 a = 42;\n\
        .global .align 4 .f32 b = 0f3F800000;\n\
        .const .align 8 .f64 c[2] = {0d4000000000000000, 1.5};\n\
        .global .align 2 .u16 d[3] = {1, 0x10};\n\
        .global .align 4 .s32 e = -2;\n\
        .global .align 1 .b8 f[2][2] = {{1, 2}, {3, 4}};\n\
        .global .align 8 .u64 g = generic(a);\n\
        .global .align 4 .b32 h[];\n";
    let m = parse_ok(src);
    let bytes = |i: usize| match &m.items[i].kind {
        ItemKind::Variable(v) => m.initializer_bytes(v),
        _ => panic!(),
    };
    assert_eq!(bytes(3).unwrap(), 42u32.to_le_bytes());
    assert_eq!(bytes(4).unwrap(), 1.0f32.to_le_bytes());
    assert_eq!(
        bytes(5).unwrap(),
        [2.0f64.to_le_bytes(), 1.5f64.to_le_bytes()].concat()
    );
    assert_eq!(bytes(6).unwrap(), [1, 0, 16, 0, 0, 0]);
    assert_eq!(bytes(7).unwrap(), (-2i32).to_le_bytes());
    assert_eq!(bytes(8).unwrap(), [1, 2, 3, 4]);
    assert_eq!(bytes(9), None); // an address, not a number
    assert_eq!(bytes(10), None); // no initializer
}

#[test]
fn functions_with_attributes_labels_predicates_and_pragmas() {
    let src = "//\n.version 8.8\n.target sm_90, debug\n.address_size 64\n\
        .visible .entry k(.param .u64 .ptr .global .align 16 p, .param .u32 n)\n\
        .reqntid 64, 2, 1\n.minnctapersm 4\n{\n\
        .reg .pred %p<2>; .reg .b32 %r<4>;\n\
        .pragma \"nounroll\";\n\
        $L__BB0_1:\n\
        @!%p1 bra $L__BB0_1;\n\
        ld.param.v2.u32 {%r1, %r2}, [n];\n\
        { .reg .b32 t; mov.u32 t, %tid.x; }\n\
        ret;\n}\n\
        .func (.param .b32 r) f(.reg .b32 a) .noreturn { ret; }\n\
        .extern .shared .align 16 .b8 smem[];\n";
    let m = parse_ok(src);
    let ItemKind::Function(k) = &m.items[3].kind else {
        panic!("{:?}", m.items[3])
    };
    assert_eq!(
        k.perf,
        [
            ("reqntid".to_string(), vec![64, 2, 1]),
            ("minnctapersm".to_string(), vec![4])
        ]
    );
    assert_eq!(
        (k.params[0].alignment(), m.text(k.params[0].name)),
        (16, "p")
    );
    let kinds: Vec<StmtKind> = k
        .body
        .as_ref()
        .unwrap()
        .stmts
        .iter()
        .map(|s| s.kind)
        .collect();
    use StmtKind::*;
    assert_eq!(
        kinds,
        [
            Decl, Decl, Directive, Label, Instr, Instr, Open, Decl, Instr, Close, Instr
        ]
    );
    let ld = &k.body.as_ref().unwrap().stmts[5];
    let ops = m.operands(ld).unwrap();
    assert_eq!(ops.len(), 2);
    assert_eq!(ops[0].len(), 5); // { %r1 , %r2 }
    assert!(
        matches!(&m.items[4].kind, ItemKind::Function(f) if m.text(f.name) == "f" && f.perf[0].0 == "noreturn")
    );
    assert!(
        matches!(&m.items[5].kind, ItemKind::Variable(v) if v.dims == [None] && v.linkage == Linkage::Extern)
    );
}

#[test]
fn labels_and_destinations_read_without_lexing_agree_with_the_lexer() {
    // Labels with blanks or a comment before the colon; destinations after
    // blanks, after a comment, with a `.x` that the word takes in, and
    // registers that only share a prefix.
    let src = ".version 8.8\n.target sm_90\n.address_size 64\n\
        .visible .entry k()\n{\n\
        .reg .b32 %r<12>;\n\
        L1 :\n\
        L2 /* c */ :\n\
        mov.u32 %r1, 1;\n\
        mov.u32 /* c */ %r2, 2;\n\
        mov.u32\n\t%r10, %r1;\n\
        L3\x0c:\n\
        mov.u32\x0c%r11, %r1;\n\
        mov.u32 %r1.x, 3;\n\
        ret;\n}\n";
    let m = parse_ok(src);
    let ItemKind::Function(k) = &m.items[3].kind else {
        panic!("{:?}", m.items[3])
    };
    let stmts = &k.body.as_ref().unwrap().stmts;
    let kinds: Vec<StmtKind> = stmts.iter().map(|s| s.kind).collect();
    use StmtKind::*;
    assert_eq!(
        kinds,
        [
            Decl, Label, Label, Instr, Instr, Instr, Label, Instr, Instr, Instr
        ]
    );
    assert_eq!(m.text(stmts[2].span), "L2 /* c */ :");
    // The writers of a register, found by a text search: %r1 is written
    // by statement 3 and read by 5 and 7 (its `.x` form is another word,
    // and %r10 does not count for it); a form feed is a blank like others.
    let body = k.body.as_ref().unwrap();
    assert_eq!(body.writers(&m, "%r1"), [3]);
    assert_eq!(body.writers(&m, "%r2"), [4]);
    assert_eq!(body.writers(&m, "%r10"), [5]);
    assert_eq!(body.writers(&m, "%r11"), [7]);
    assert_eq!(body.writers(&m, "%r1.x"), [8]);
    let at = [
        0,
        stmts[4].span.start + 9,
        stmts[4].span.end,
        stmts[6].span.start,
    ];
    assert_eq!(
        body.stmts_at(at.into_iter()).collect::<Vec<_>>(),
        [None, Some(4), None, Some(6)]
    );
    for st in stmts {
        let lexed = if st.kind == Instr {
            m.operands(st)
                .unwrap()
                .first()
                .and_then(|o| o.first())
                .map(|t| t.text(&m.src).to_string())
        } else {
            None
        };
        for reg in ["%r1", "%r2", "%r10", "%r1.x", "%r"] {
            assert_eq!(
                m.first_operand_is(st, reg),
                lexed.as_deref() == Some(reg),
                "{reg} in {:?}",
                m.text(st.span)
            );
        }
    }
}

#[test]
fn last_words_read_backwards_agree_with_the_lexer() {
    let body = ".reg .pred %p<2>;\n.reg .b32 %r<12>, %f;\n.param .b64 param0;\n\
        .param .align 8 .b8 param1[16];\n.param .b64 /* c */ param2 ;\n\
        .param .b64 p.q;\n.shared .align 4 .b8 s$1[4] = {1, 2, 3, 4};\n\
        .local .b32 _x9 ;\n.param .b64;\nmov.u32 %r1, %r2;\nst.param.b64 [param0+0], %rd5;\n";
    let src = format!(
        ".version 8.8\n.target sm_90\n.address_size 64\n.visible .entry k()\n{{\n{body}ret;\n}}\n"
    );
    let mut stmts_seen = 0;
    for text in [&src[..], NVRTC_EXAMPLE] {
        let m = parse_ok(text);
        for item in &m.items {
            let ItemKind::Function(f) = &item.kind else {
                continue;
            };
            for st in f.body.iter().flat_map(|b| &b.stmts) {
                let lexed = lex::tokens(&m.src, st.span.start, st.span.end)
                    .unwrap()
                    .into_iter()
                    .rfind(|t| t.kind == TokenKind::Word)
                    .map(|t| t.text(&m.src));
                assert_eq!(m.last_word(st), lexed, "{:?}", m.text(st.span));
                stmts_seen += 1;
            }
        }
    }
    assert!(stmts_seen > 40);
}

#[test]
fn scalar_type_sizes() {
    let sizes = [
        ("b8", 1),
        ("u16", 2),
        ("s32", 4),
        ("f64", 8),
        ("b128", 16),
        ("pred", 1),
        ("f16", 2),
        ("bf16", 2),
        ("f16x2", 4),
        ("bf16x2", 4),
    ];
    for (ty, size) in sizes {
        assert_eq!(scalar_type_size(ty), Some(size), "{ty}");
    }
    for ty in ["", "b", "u24", "s16x2", "bf32", "f", "pred2", "x64"] {
        assert_eq!(scalar_type_size(ty), None, "{ty}");
    }
}

#[test]
fn malformed_input_gives_positions() {
    let cases: &[(&str, (usize, usize), &str)] = &[
        (".version 8.0\n.entry k() {\n ret;\n", (2, 12), "not closed"),
        (".entry k() { ret; }\n}\n", (2, 1), "expected a directive"),
        (".entry k() { ret }\n", (2, 1), "unexpected end of file"),
        (".global .b8 x[3 = {1};", (1, 17), "expected ']'"),
        (".entry k( { }", (1, 11), "unexpected \"{\" in a parameter"),
        ("mov.u32 %r1, 2;", (1, 1), "expected a directive"),
        (".bogus x;", (1, 1), "unknown module-scope directive"),
        (".entry k() { /* open", (1, 14), "unterminated /* comment"),
        (".entry k() { ret; } \u{1}", (1, 21), "unexpected character"),
    ];
    for (src, (line, col), what) in cases {
        let e = parse("bad.ptx", src.to_string()).unwrap_err();
        assert_eq!((e.line, e.col), (*line, *col), "{src:?}: {e}");
        assert!(e.what.contains(what), "{src:?}: {e}");
        assert!(e.to_string().starts_with("bad.ptx:"), "{e}");
    }
}

#[test]
fn a_one_megabyte_line_is_an_error_not_a_hang() {
    let mut src = String::from(".version 8.0\n.entry k() { mov.u32 %r1, ");
    src.push_str(&"1+".repeat(512 * 1024));
    let e = parse("long.ptx", src).unwrap_err();
    assert_eq!(e.line, 2);
    assert!(e.what.contains("end of file"), "{e}");
}

/// Mutated real PTX (truncated, bytes replaced, spans duplicated or dropped)
/// parses or fails with a positioned error, never panics; whatever parses
/// prints back byte for byte.
#[test]
fn mutated_ptx_never_panics() {
    let mut rng = Rng(0x2545F4914F6CDD1D);
    let seeds = [NVRTC_EXAMPLE];
    const BYTES: &[u8] = b"{}()[];,.:+-@!%$ \n/*\"0123456789abcxyz";
    for case in 0..3000 {
        let base = seeds[case % seeds.len()].as_bytes();
        let mut s = base.to_vec();
        for _ in 0..1 + rng.next() % 4 {
            let at = (rng.next() as usize) % (s.len() + 1);
            match rng.next() % 4 {
                0 => s.truncate(at),
                1 if at < s.len() => s[at] = BYTES[(rng.next() as usize) % BYTES.len()],
                2 => {
                    let len = (rng.next() as usize % 64).min(s.len() - at);
                    let chunk = s[at..at + len].to_vec();
                    let to = (rng.next() as usize) % (s.len() + 1);
                    s.splice(to..to, chunk);
                }
                _ => {
                    let len = (rng.next() as usize % 64).min(s.len() - at);
                    s.drain(at..at + len);
                }
            }
        }
        let text = String::from_utf8_lossy(&s).into_owned();
        match parse("fuzz.ptx", text.clone()) {
            Ok(m) => {
                assert_eq!(Edits::new().apply(&m.src).unwrap(), text);
                for item in &m.items {
                    if let ItemKind::Variable(v) = &item.kind {
                        let _ = m.initializer_bytes(v);
                    }
                    if let ItemKind::Function(f) = &item.kind {
                        for st in f.body.iter().flat_map(|b| &b.stmts) {
                            let _ = m.operands(st);
                        }
                    }
                }
            }
            Err(e) => assert!(e.line >= 1 && e.col >= 1, "{e}"),
        }
    }
}

/// Pieces of a module joined where their tokens would touch get a line
/// break between them; pieces already apart are joined as they are.
#[test]
fn pieces_joined_keep_their_tokens_apart() {
    use super::print::{joins, push_apart};
    for (text, next, apart) in [
        (".address_size 64", ".global .b8 x;", false),
        ("ret;\n}", ".visible .entry k()", false),
        ("x;", "\n.global", true),
        ("x;\n", ".global", true),
        ("", ".version 8.0", true),
    ] {
        assert_eq!(joins(text, next), !apart, "{text:?} {next:?}");
        let mut out = text.to_string();
        push_apart(&mut out, next);
        let want = if apart {
            format!("{text}{next}")
        } else {
            format!("{text}\n{next}")
        };
        assert_eq!(out, want);
    }
}
