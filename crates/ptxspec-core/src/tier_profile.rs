//! The tier profile's text (`PTXSPEC_TIER_PROFILE`): one value set a line,
//! `IMAGE sm_ARCH KERNEL VALUES [args=P:HEX,... [kept=lto|ptx|generic]]` (the
//! specialization-constant buffer in lowercase hexadecimal, `-` where it is
//! empty; then, for a variant of adaptive arguments, each fixed parameter's
//! index and bytes, and what its trial kept where one was made),
//! that a process appends when it tiers a value set up or adapts to an
//! argument set, and the next process reads to fetch those cubins early; and
//! `graph-trial DIGEST kept=N`, what a trial of a CUDA graph's replays kept
//! ([`GraphVerdict`]), so that the next process's graph keeps it untimed. The runtime
//! (the `ptxspec` crate) owns the file; this module owns its format, so that
//! what is written reads back and what is read is bounded — a profile may be
//! another program's, or damaged, and is only a hint.

/// The most lines a profile holds.
pub const MAX_LINES: usize = 4096;
/// The most bytes a profile holds.
pub const MAX_BYTES: u64 = 4 << 20;

/// One value set of a profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileLine {
    /// The image's id.
    pub image: String,
    /// The architecture, as in `sm_90`.
    pub arch: u32,
    /// The kernel's name.
    pub kernel: String,
    /// The specialization-constant buffer.
    pub values: Vec<u8>,
    /// Kernel parameters fixed to values (index, bytes; a variant of
    /// adaptive arguments), by ascending index; empty for a tier-up.
    pub arguments: Vec<(usize, Vec<u8>)>,
    /// What the trial of the variant kept (only with `arguments`); `None`
    /// where none was made (a process that does not time its variants, or
    /// one of an earlier version).
    pub kept: Option<Kept>,
}

/// What the trial of a variant of adaptive arguments kept: the code its
/// argument set runs from then on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kept {
    /// The variant linked through LTO.
    Lto,
    /// The variant made from the PTX.
    Ptx,
    /// The generic code: no variant was faster.
    Generic,
}

impl Kept {
    /// Its word in a line.
    pub fn word(self) -> &'static str {
        match self {
            Kept::Lto => "lto",
            Kept::Ptx => "ptx",
            Kept::Generic => "generic",
        }
    }

    /// The verdict of its word; `None` for any other text.
    pub fn from_word(word: &str) -> Option<Kept> {
        [Kept::Lto, Kept::Ptx, Kept::Generic]
            .into_iter()
            .find(|k| k.word() == word)
    }
}

/// How the kept field begins.
const KEPT: &str = "kept=";

/// How the arguments field begins.
const ARGS: &str = "args=";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes of an even number of hexadecimal digits (a signed choice table's
/// signature reads through it too).
pub(crate) fn from_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    hex.as_bytes()
        .chunks(2)
        .map(|pair| {
            let digit = |b: u8| (b as char).to_digit(16);
            Some((digit(pair[0])? * 16 + digit(pair[1])?) as u8)
        })
        .collect()
}

/// The values field of an empty buffer (no field can be empty).
const EMPTY: &str = "-";

/// Whether `word` can be one field of a line: not empty, no whitespace
/// (which separates fields) and no control character (a line ends at one).
fn is_field(word: &str) -> bool {
    !word.is_empty() && !word.chars().any(|c| c.is_whitespace() || c.is_control())
}

impl ProfileLine {
    /// Its line (without the line break); `None` where a name could not be
    /// read back as one field (empty, or holding whitespace or a control
    /// character).
    pub fn to_line(&self) -> Option<String> {
        if !is_field(&self.image) || !is_field(&self.kernel) {
            return None;
        }
        let values: String = match self.values.is_empty() {
            true => EMPTY.into(),
            false => hex(&self.values),
        };
        let mut line = format!("{} sm_{} {} {values}", self.image, self.arch, self.kernel);
        if !self.arguments.is_empty() {
            if self.arguments.iter().any(|(_, b)| b.is_empty())
                || self.arguments.windows(2).any(|w| w[0].0 >= w[1].0)
            {
                return None;
            }
            let fields: Vec<String> = self
                .arguments
                .iter()
                .map(|(i, b)| format!("{i}:{}", hex(b)))
                .collect();
            line.push(' ');
            line.push_str(ARGS);
            line.push_str(&fields.join(","));
            if let Some(kept) = self.kept {
                line.push(' ');
                line.push_str(KEPT);
                line.push_str(kept.word());
            }
        } else if self.kept.is_some() {
            return None;
        }
        Some(line)
    }

    /// The value set of `line`; `None` where it is not one (other than four
    /// fields, an optional fifth of arguments and, after it, an optional
    /// sixth of what was kept; an architecture that is not `sm_` and a
    /// number, values that are neither pairs of hexadecimal digits nor `-`,
    /// arguments that are not `P:HEX` by ascending `P`, a kept field that
    /// is not `kept=` and one of its words).
    pub fn parse(line: &str) -> Option<ProfileLine> {
        let mut w = line.split_whitespace();
        let (Some(image), Some(arch), Some(kernel), Some(hex), args, kept, None) = (
            w.next(),
            w.next(),
            w.next(),
            w.next(),
            w.next(),
            w.next(),
            w.next(),
        ) else {
            return None;
        };
        let kept = match kept {
            None => None,
            Some(field) => Some(Kept::from_word(field.strip_prefix(KEPT)?)?),
        };
        let arguments = match args {
            None => Vec::new(),
            Some(field) => {
                let list = field.strip_prefix(ARGS)?;
                let arguments = list
                    .split(',')
                    .map(|a| {
                        let (i, h) = a.split_once(':')?;
                        if i.is_empty() || !i.bytes().all(|b| b.is_ascii_digit()) {
                            return None;
                        }
                        let bytes = from_hex(h).filter(|b| !b.is_empty())?;
                        Some((i.parse::<usize>().ok()?, bytes))
                    })
                    .collect::<Option<Vec<_>>>()?;
                if arguments.windows(2).any(|w| w[0].0 >= w[1].0) {
                    return None;
                }
                arguments
            }
        };
        let arch = arch.strip_prefix("sm_")?;
        if !arch.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if !is_field(image) || !is_field(kernel) {
            return None;
        }
        let values = match hex {
            EMPTY => Vec::new(),
            _ => from_hex(hex)?,
        };
        Some(ProfileLine {
            image: image.to_string(),
            arch: arch.parse().ok()?,
            kernel: kernel.to_string(),
            values,
            arguments,
            kept,
        })
    }
}

/// The most contenders a graph trial's verdict names: the graph as captured
/// and one per way a variant is made, with room to spare.
pub const MAX_GRAPH_CONTENDERS: usize = 16;

/// How a graph trial's line begins.
const GRAPH_TRIAL: &str = "graph-trial";

/// What a trial of a CUDA graph's replays kept, under the digest of what
/// was on trial (each node's variant, the ways it was made, and their
/// number: the runtime's `graph_trial_key`): contender 0 is the graph as
/// captured, contender `r` every node on trial on its variant made the
/// `r`-th way. A line of its own, not a node's value set: a variant faster
/// within one graph is not known to be faster alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphVerdict {
    /// The digest of what was on trial.
    pub key: crate::digest::Digest,
    /// The contender kept, below [`MAX_GRAPH_CONTENDERS`].
    pub kept: usize,
}

impl GraphVerdict {
    /// Its line (without the line break); `None` for a contender at or
    /// over [`MAX_GRAPH_CONTENDERS`].
    pub fn to_line(&self) -> Option<String> {
        (self.kept < MAX_GRAPH_CONTENDERS)
            .then(|| format!("{GRAPH_TRIAL} {} {KEPT}{}", self.key.hex(), self.kept))
    }

    /// The verdict of `line`; `None` where it is not one (other than three
    /// fields, a digest that is not 64 hexadecimal digits, a contender
    /// that is not a decimal number below [`MAX_GRAPH_CONTENDERS`]).
    pub fn parse(line: &str) -> Option<GraphVerdict> {
        let mut w = line.split_whitespace();
        let (Some(GRAPH_TRIAL), Some(key), Some(kept), None) =
            (w.next(), w.next(), w.next(), w.next())
        else {
            return None;
        };
        let kept = contender(kept.strip_prefix(KEPT)?)?;
        let key = crate::digest::Digest::from_hex(key)?;
        Some(GraphVerdict { key, kept })
    }
}

/// A graph trial's contender written as text — in a profile's line, and
/// in the fleet's verdict word: one or two decimal digits, below
/// [`MAX_GRAPH_CONTENDERS`]; `None` for any other text.
pub(crate) fn contender(text: &str) -> Option<usize> {
    if text.is_empty() || text.len() > 2 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let kept: usize = text.parse().ok()?;
    (kept < MAX_GRAPH_CONTENDERS).then_some(kept)
}

/// Why a profile is not used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// More bytes than [`MAX_BYTES`].
    #[error("{0} bytes, over its bound of {MAX_BYTES}")]
    TooLarge(u64),
    /// More distinct lines than [`MAX_LINES`].
    #[error("more than {MAX_LINES} value sets, its bound")]
    TooManyLines,
}

/// A profile's distinct non-empty lines in order, trimmed (lines that are
/// not value sets among them: [`ProfileLine::parse`] tells); an error where
/// it is over its bounds. Bytes that are not UTF-8 are read as U+FFFD.
pub fn lines(bytes: &[u8]) -> Result<Vec<String>, ProfileError> {
    if bytes.len() as u64 > MAX_BYTES {
        return Err(ProfileError::TooLarge(bytes.len() as u64));
    }
    let mut seen = std::collections::HashSet::new();
    let mut lines = Vec::new();
    for line in String::from_utf8_lossy(bytes).lines().map(str::trim) {
        if line.is_empty() || !seen.insert(line) {
            continue;
        }
        if lines.len() == MAX_LINES {
            return Err(ProfileError::TooManyLines);
        }
        lines.push(line.to_string());
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(image: &str, arch: u32, kernel: &str, values: &[u8]) -> ProfileLine {
        ProfileLine {
            image: image.into(),
            arch,
            kernel: kernel.into(),
            values: values.into(),
            arguments: Vec::new(),
            kept: None,
        }
    }

    /// A variant's arguments write a fifth field that reads back; arguments
    /// that could not (an empty value, indices out of order) are not
    /// written, and a fifth field that is not arguments is no value set.
    #[test]
    fn arguments_of_a_variant_read_back() {
        let mut p = line("m", 90, "k", &[1, 2]);
        p.arguments = vec![(3, vec![0x10, 0, 0, 0]), (4, vec![8])];
        let text = p.to_line().unwrap();
        assert_eq!(text, "m sm_90 k 0102 args=3:10000000,4:08");
        assert_eq!(ProfileLine::parse(&text), Some(p.clone()));
        for bad in [
            vec![(3, vec![])],
            vec![(4, vec![1]), (3, vec![1])],
            vec![(3, vec![1]), (3, vec![2])],
        ] {
            p.arguments = bad;
            assert_eq!(p.to_line(), None);
        }
        for bad in [
            "m sm_90 k 01 3:10",
            "m sm_90 k 01 args=",
            "m sm_90 k 01 args=3:1",
            "m sm_90 k 01 args=x:10",
            "m sm_90 k 01 args=3:",
            "m sm_90 k 01 args=4:10,3:10",
            "m sm_90 k 01 args=3:10 extra",
            "m sm_90 k 01 args=3:10 kept=",
            "m sm_90 k 01 args=3:10 kept=LTO",
            "m sm_90 k 01 args=3:10 kept=lto extra",
            "m sm_90 k 01 kept=lto",
        ] {
            assert_eq!(ProfileLine::parse(bad), None, "{bad}");
        }
    }

    /// What a trial kept writes a sixth field that reads back, only after
    /// arguments.
    #[test]
    fn what_a_trial_kept_reads_back() {
        let mut p = line("m", 90, "k", &[]);
        p.arguments = vec![(2, vec![0, 3])];
        for (kept, word) in [
            (Kept::Lto, "lto"),
            (Kept::Ptx, "ptx"),
            (Kept::Generic, "generic"),
        ] {
            p.kept = Some(kept);
            let text = p.to_line().unwrap();
            assert_eq!(text, format!("m sm_90 k - args=2:0003 kept={word}"));
            assert_eq!(ProfileLine::parse(&text), Some(p.clone()));
        }
        p.arguments.clear();
        assert_eq!(p.to_line(), None, "kept without arguments");
    }

    #[test]
    fn a_written_line_reads_back() {
        for p in [
            line("matmul", 90, "k", &[0, 1, 0xab, 0xff]),
            line("img-2", 120, "_Z4dampPf", &[]),
            line("é", 0, "k", &[7]),
        ] {
            let text = p.to_line().unwrap();
            assert_eq!(ProfileLine::parse(&text), Some(p), "{text}");
        }
        assert_eq!(
            line("m", 90, "k", &[0xab]).to_line().as_deref(),
            Some("m sm_90 k ab")
        );
    }

    #[test]
    fn names_that_cannot_be_one_field_are_not_written() {
        for (image, kernel) in [
            ("", "k"),
            ("m", ""),
            ("a b", "k"),
            ("m", "k\n"),
            ("m\u{85}", "k"),
        ] {
            assert_eq!(
                line(image, 90, kernel, &[1]).to_line(),
                None,
                "{image:?} {kernel:?}"
            );
        }
    }

    #[test]
    fn lines_that_are_not_value_sets_are_none() {
        for bad in [
            "",
            "m sm_90 k",
            "m sm_90 k ab cd",
            "m 90 k ab",
            "m sm_x k ab",
            "m sm_+9 k ab",
            "m sm_99999999999 k ab",
            "m sm_90 k abc",
            "m sm_90 k zz",
            "m sm_90 k é1",
            "m sm_90 k --",
        ] {
            assert_eq!(ProfileLine::parse(bad), None, "{bad:?}");
        }
        assert_eq!(
            ProfileLine::parse("  m\tsm_90  k AB  "),
            Some(line("m", 90, "k", &[0xab]))
        );
    }

    /// A graph trial's verdict reads back; every other shape of its line
    /// is none (and no value set either: older readers skip it).
    #[test]
    fn a_graph_verdict_reads_back() {
        let key = crate::digest::Digest::of(b"nodes");
        for kept in [0, 1, 2, MAX_GRAPH_CONTENDERS - 1] {
            let v = GraphVerdict { key, kept };
            let text = v.to_line().unwrap();
            assert_eq!(text, format!("graph-trial {} kept={kept}", key.hex()));
            assert_eq!(GraphVerdict::parse(&text), Some(v));
            assert_eq!(ProfileLine::parse(&text), None, "{text}");
        }
        let over = GraphVerdict {
            key,
            kept: MAX_GRAPH_CONTENDERS,
        };
        assert_eq!(over.to_line(), None);
        let hex = key.hex();
        for bad in [
            format!("graph-trial {hex}"),
            format!("graph-trial {hex} kept="),
            format!("graph-trial {hex} kept=x"),
            format!("graph-trial {hex} kept=-1"),
            format!("graph-trial {hex} kept=+1"),
            format!("graph-trial {hex} kept={MAX_GRAPH_CONTENDERS}"),
            format!("graph-trial {hex} kept=001"),
            format!("graph-trial {hex} kept=1 extra"),
            format!("graph-trial {} kept=1", &hex[1..]),
            format!("graph-trial {}g kept=1", &hex[1..]),
            format!("graph {hex} kept=1"),
            format!("graph-trial {hex} lto"),
        ] {
            assert_eq!(GraphVerdict::parse(&bad), None, "{bad}");
        }
    }

    #[test]
    fn lines_are_distinct_trimmed_and_bounded() {
        assert_eq!(
            lines(b"a\n\n b \na\r\nb\n").unwrap(),
            vec!["a".to_string(), "b".to_string()]
        );
        let full: String = (0..MAX_LINES).map(|i| format!("{i}\n")).collect();
        assert_eq!(lines(full.as_bytes()).unwrap().len(), MAX_LINES);
        let over = format!("{full}one more\n");
        assert_eq!(lines(over.as_bytes()), Err(ProfileError::TooManyLines));
        let repeated = format!("{full}{full}");
        assert_eq!(lines(repeated.as_bytes()).unwrap().len(), MAX_LINES);
        let huge = vec![b'a'; MAX_BYTES as usize + 1];
        assert_eq!(lines(&huge), Err(ProfileError::TooLarge(MAX_BYTES + 1)));
    }
}
