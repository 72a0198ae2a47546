//! `idem inspect <dir> [--namespace N (--key K | --key-hex H)]`: what a durable
//! database holds. (`idem inspect [options] -- <dir>` for a directory whose name
//! starts with `-`.)

use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use super::grouped;

pub(crate) fn run(args: &[String]) -> Result<ExitCode, String> {
    let mut dir = None;
    let mut namespace = None;
    // The key's bytes, and how it is shown: as given to `--key`, or in hexadecimal.
    let mut key: Option<(Vec<u8>, String)> = None;
    let mut it = args.iter();
    let mut given = super::Given::default();
    // After `--`, every argument is the directory (a name that starts with `-`).
    let mut options_end = false;
    while let Some(a) = it.next() {
        if options_end || a == "--" {
            match () {
                _ if !options_end => options_end = true,
                _ if dir.is_none() => dir = Some(a.to_owned()),
                _ => return Err(format!("inspect: unexpected argument {a:?}")),
            }
            continue;
        }
        match a.as_str() {
            "-n" => given.once("inspect", "--namespace")?,
            "-k" => given.once("inspect", "--key")?,
            flag if flag.starts_with('-') => given.once("inspect", flag)?,
            _ => {}
        }
        match a.as_str() {
            "--namespace" | "-n" => namespace = Some(it.next().ok_or("--namespace needs a value")?),
            "--key" | "-k" | "--key-hex" if key.is_some() => {
                return Err("inspect: one of --key and --key-hex".into())
            }
            "--key" | "-k" => {
                let k = it.next().ok_or("--key needs a value")?;
                key = Some((k.as_bytes().to_vec(), format!("{k:?}")));
            }
            "--key-hex" => {
                let h = it.next().ok_or("--key-hex needs a value")?;
                let bytes = from_hex(h).ok_or_else(|| {
                    format!("inspect: --key-hex {h:?} is not an even number of hexadecimal digits")
                })?;
                key = Some((bytes, format!("0x{}", h.to_ascii_lowercase())));
            }
            other if other.starts_with('-') => {
                return Err(format!("inspect: unknown option {other:?}"))
            }
            other if dir.is_none() => dir = Some(other.to_owned()),
            other => return Err(format!("inspect: unexpected argument {other:?}")),
        }
    }
    let dir = dir.ok_or("inspect: which directory?")?;
    if key.is_some() != namespace.is_some() {
        return Err("inspect: --key (or --key-hex) and --namespace go together".into());
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let db = match idem::inspect(&dir, now_ms) {
        Ok(db) => db,
        Err(e) => {
            errln!("idem inspect: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    outln!("database:   {}", db.path.display());
    outln!("format:     version {}", db.format_version);
    outln!("on disk:    {} bytes", grouped(db.size_on_disk));
    if !db.state_families.is_empty() {
        let families: Vec<String> = db.state_families.iter().map(|f| shown_name(f)).collect();
        outln!("state:      {}", families.join(", "));
    }
    outln!();
    outln!(
        "{:<24} {:>14} {:>14} {:>12} {:>9}",
        "namespace",
        "done",
        "expired",
        "in flight",
        "corrupt"
    );
    for ns in &db.namespaces {
        outln!(
            "{:<24} {:>14} {:>14} {:>12} {:>9}",
            shown_name(&ns.name),
            grouped(ns.done),
            grouped(ns.expired),
            grouped(ns.in_flight),
            grouped(ns.corrupt)
        );
    }
    if let (Some(ns), Some((bytes, k))) = (namespace, key) {
        outln!();
        match db.key(ns, &bytes) {
            Ok(None) => outln!("key {k} in {ns:?}: unknown"),
            Ok(Some(s)) => {
                // Judged at this reading, as the namespace row counts it: a record
                // past its end is what an engine would acquire the key over.
                let state = match (s.done, s.expires_at_ms <= now_ms) {
                    (true, false) => "done",
                    (true, true) => "expired (a claim now acquires it)",
                    (false, false) => "in flight",
                    (false, true) => "in flight, its lease over (a claim now acquires it)",
                };
                let (at, until) = if s.done {
                    ("completed at", "duplicate until")
                } else {
                    ("claimed/renewed", "lease until")
                };
                outln!("key {k} in {ns:?}: {state}");
                outln!("  fingerprint      {:032x}", s.fingerprint);
                outln!("  {at:<16} {} ms", s.at_ms);
                outln!("  {until:<16} {} ms", s.expires_at_ms);
                outln!(
                    "  payload checked  {}",
                    if s.has_payload { "yes" } else { "no" }
                );
                match &s.result {
                    Some(r) => outln!("  result           {} bytes: {}", r.len(), shown(r)),
                    None => outln!("  result           none"),
                }
            }
            Err(e) => {
                errln!("idem inspect: {e}");
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Stored bytes as one line shows them, as a key is shown: UTF-8 text quoted, its
/// control characters escaped; other bytes in hexadecimal.
fn shown(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(text) => format!("{text:?}"),
        Err(_) => format!(
            "0x{}",
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        ),
    }
}

/// The bytes of `h`, pairs of hexadecimal digits (either case); `None` for an odd
/// count or another character.
fn from_hex(h: &str) -> Option<Vec<u8>> {
    let digits = h.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    digits
        .chunks(2)
        .map(|p| Some(nibble(p[0])? << 4 | nibble(p[1])?))
        .collect()
}

/// A namespace or state family name as printed: control characters (a newline, a
/// terminal escape) escaped, so that a name can neither break a line of the table
/// nor reach the terminal as a command. Other characters print as they are.
fn shown_name(name: &str) -> String {
    if name.chars().any(char::is_control) {
        name.escape_debug().to_string()
    } else {
        name.to_owned()
    }
}
