//! `ptxspec cache`: the remote cubin cache's keys, warming and counts.

use std::path::Path;

use ptxspec_cli::views::Format;

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

/// One line of a `cache warm` list: where it is and what it asks for.
struct WarmLine<'a> {
    /// Its line number in the file.
    n: usize,
    text: &'a str,
    prop: std::path::PathBuf,
    arch: &'a str,
    kernel: Option<&'a str>,
    set: Vec<String>,
}

/// The value sets of a `cache warm` list, every line checked before any
/// link starts (a typo on line 90 fails at once, not after 89 links).
fn warm_lines<'a>(file: &Path, text: &'a str) -> Result<Vec<WarmLine<'a>>, String> {
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(prop), Some(arch)) = (words.next(), words.next()) else {
            return Err(format!(
                "{}:{n}: expected IMAGE.prop sm_XX [kernel=NAME] [NAME=VALUE ...]",
                file.display()
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
        lines.push(WarmLine {
            n,
            text: line,
            // Relative to the list's folder, as a table's rows are.
            prop: file.parent().unwrap_or(Path::new(".")).join(prop),
            arch,
            kernel,
            set,
        });
    }
    Ok(lines)
}

/// What became of one value set in the store.
enum Stored {
    Yes,
    No,
    /// This process does not write to a store.
    NotAsked,
}

/// `ptxspec cache warm FILE`: each line's value set linked (or found) and,
/// for a writer, made sure to be in the store — uploaded where the store
/// lacks it, whichever tier the cubin came from (the disk cache too): warm
/// means the fleet can find it. `PTXSPEC_TIER_WORKERS` value sets are
/// linked at once, each link in a worker process of its own (nvJitLink
/// promises nothing about threads; processes need no promise). Each line
/// says what became of it; a writer that got none of them into the store
/// fails; a value set that fails to build stops the warm (the lines under
/// way finish) and is the error.
pub(crate) fn warm(file: &Path) -> Result<(), String> {
    let text = read_as(file, Format::Unknown)?;
    let lines = warm_lines(file, &text)?;
    let writes = ptxspec_core::lto::remote::writes().map_err(|e| e.to_string())?;
    let workers = ptxspec_core::settings::tier_workers(&ptxspec_core::settings::Env::process())
        .map_err(|e| e.to_string())?;
    if !writes {
        eprintln!(
            "ptxspec: cache warm: this process does not write to a remote cache (PTXSPEC_REMOTE_CACHE, \
             PTXSPEC_CACHE_TRUSTED_KEYS and PTXSPEC_CACHE_SIGNING_KEY set it up): the cubins go to the disk \
             cache only"
        );
    }
    ptxspec_core::lto::publish_hits(writes);
    let total = lines.len();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let results: std::sync::Mutex<Vec<(usize, Result<Stored, String>)>> = Default::default();
    std::thread::scope(|scope| {
        for _ in 0..workers.min(total) {
            scope.spawn(|| {
                use std::sync::atomic::Ordering;
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(line) = lines.get(i) else { break };
                    let result = warm_one(file, line, i + 1, total, writes);
                    if result.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    results
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((i, result));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by_key(|(i, _)| *i);
    let (mut in_store, mut failed) = (0usize, 0usize);
    for (_, result) in results {
        match result? {
            Stored::Yes => in_store += 1,
            Stored::No => failed += 1,
            Stored::NotAsked => {}
        }
    }
    if writes {
        eprintln!(
            "ptxspec: cache warm: {in_store} of {total} value sets in the store, {failed} not"
        );
        if in_store == 0 && total > 0 {
            return Err(format!(
                "cache warm: none of the {total} value sets of {} could be put in the store",
                file.display()
            ));
        }
    }
    Ok(())
}

/// Links (or finds) one value set of a `cache warm` list, the `done`th of
/// `total`, and says what became of it.
fn warm_one(
    file: &Path,
    line: &WarmLine<'_>,
    done: usize,
    total: usize,
    writes: bool,
) -> Result<Stored, String> {
    let label = format!("cache warm: {done} of {total}: ");
    eprintln!("ptxspec: {label}{}", crate::output::bounded(line.text));
    let _ = ptxspec_core::lto::take_published();
    specialize_image(
        &line.prop,
        &line.set,
        &[],
        ViaArg::Lto,
        Some(line.arch),
        line.kernel,
        None,
        &label,
    )
    .map_err(|what| format!("{}:{}: {what}", file.display(), line.n))?;
    if !writes {
        return Ok(Stored::NotAsked);
    }
    use ptxspec_core::lto::Published;
    let (stored, said) = match ptxspec_core::lto::take_published() {
        Some(Published::Uploaded) => (Stored::Yes, "uploaded to the store".to_string()),
        Some(Published::AlreadyThere) => (Stored::Yes, "already in the store".to_string()),
        Some(Published::NotUploaded(why)) => (Stored::No, format!("not uploaded: {why}")),
        Some(_) | None => (
            Stored::No,
            "not uploaded: the store was not reached".to_string(),
        ),
    };
    eprintln!("ptxspec: {label}{said}");
    Ok(stored)
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
