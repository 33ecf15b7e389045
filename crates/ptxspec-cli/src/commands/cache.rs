//! `ptxspec cache`: the remote cubin cache's keys, warming and counts.

use std::path::Path;

use ptxspec_cli::inspect::Format;

use crate::args::ViaArg;
use crate::commands::specialize::specialize_image;
use crate::io::read_as;

/// `cache keygen --secret FILE --public FILE`.
pub(crate) fn keygen(secret: &Path, public: &Path) -> Result<(), String> {
    let p = ptxspec_core::lto::remote::write_key_pair(secret, public)
        .map_err(|e| format!("cache keygen: {e}"))?;
    eprintln!(
        "ptxspec: wrote the secret key to {} and the public key to {}",
        secret.display(),
        public.display()
    );
    outln!("{p}");
    Ok(())
}

/// `cache stats`.
pub(crate) fn stats() -> Result<(), String> {
    let (store, counts) = ptxspec_core::lto::remote::fleet_counts()?;
    outln!("remote cache {store}:");
    if counts.is_empty() {
        outln!("  nothing counted yet");
    }
    for (name, n) in counts {
        outln!("  {}: {n}", shown(&name));
    }
    Ok(())
}

/// A counter's name from the store as printed: what Rust's debug escape
/// escapes (control and other unprintable characters such as a terminal
/// escape, a line break or a direction override; backslashes, so that no
/// escape can be faked) escaped, so that none reaches the terminal as
/// itself; quotes, which it escapes too, as they are ("another's link").
fn shown(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            '\'' | '"' => c.to_string(),
            _ => c.escape_debug().to_string(),
        })
        .collect()
}

/// `ptxspec cache warm FILE`: each line's value set linked (or found) and,
/// for a writer, made sure to be in the store — uploaded where the store
/// lacks it, whichever tier the cubin came from (the disk cache too): warm
/// means the fleet can find it. Each line says what became of it; a writer
/// that got none of them into the store fails.
pub(crate) fn warm(file: &Path) -> Result<(), String> {
    let text = read_as(file, Format::Unknown)?;
    let writes = ptxspec_core::lto::remote::writes().map_err(|e| e.to_string())?;
    if !writes {
        eprintln!(
            "ptxspec: cache warm: this process does not write to a remote cache (PTXSPEC_REMOTE_CACHE, \
             PTXSPEC_CACHE_TRUSTED_KEYS and PTXSPEC_CACHE_SIGNING_KEY set it up): the cubins go to the disk \
             cache only"
        );
    }
    ptxspec_core::lto::publish_hits(writes);
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(n, l)| (n + 1, l.split('#').next().unwrap_or("").trim()))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    let (mut in_store, mut failed) = (0usize, 0usize);
    for (done, (n, line)) in lines.iter().enumerate() {
        let at = |what: String| format!("{}:{n}: {what}", file.display());
        let mut words = line.split_whitespace();
        let (Some(prop), Some(arch)) = (words.next(), words.next()) else {
            return Err(at(
                "expected IMAGE.prop sm_XX [kernel=NAME] [NAME=VALUE ...]".into(),
            ));
        };
        let mut kernel = None;
        let mut set = Vec::new();
        for w in words {
            match w.strip_prefix("kernel=") {
                Some(k) => kernel = Some(k),
                None => set.push(w.to_string()),
            }
        }
        // Relative to the list's folder, as a table's rows are.
        let prop = file.parent().unwrap_or(Path::new(".")).join(prop);
        eprintln!(
            "ptxspec: cache warm: {} of {}: {line}",
            done + 1,
            lines.len()
        );
        let _ = ptxspec_core::lto::take_published();
        specialize_image(&prop, &set, &[], ViaArg::Lto, Some(arch), kernel, None).map_err(at)?;
        if writes {
            use ptxspec_core::lto::Published;
            let said = match ptxspec_core::lto::take_published() {
                Some(Published::Uploaded) => {
                    in_store += 1;
                    "uploaded to the store".to_string()
                }
                Some(Published::AlreadyThere) => {
                    in_store += 1;
                    "already in the store".to_string()
                }
                Some(Published::NotUploaded(why)) => {
                    failed += 1;
                    format!("not uploaded: {why}")
                }
                Some(_) | None => {
                    failed += 1;
                    "not uploaded: the store was not reached".to_string()
                }
            };
            eprintln!(
                "ptxspec: cache warm: {} of {}: {said}",
                done + 1,
                lines.len()
            );
        }
    }
    if writes {
        eprintln!(
            "ptxspec: cache warm: {in_store} of {} value sets in the store, {failed} not",
            lines.len()
        );
        if in_store == 0 && !lines.is_empty() {
            return Err(format!(
                "cache warm: none of the {} value sets of {} could be put in the store",
                lines.len(),
                file.display()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn counter_names_show_no_control_character_as_itself() {
        assert_eq!(
            shown("remote hits after waiting for another's link"),
            "remote hits after waiting for another's link"
        );
        assert_eq!(shown("a\x1b[2J\nb"), "a\\u{1b}[2J\\nb");
        assert_eq!(shown("x\u{202e}y\\n"), "x\\u{202e}y\\\\n");
        assert_eq!(shown("\"quoted\" étoile"), "\"quoted\" étoile");
    }
}
