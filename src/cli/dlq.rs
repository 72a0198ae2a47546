//! `idem dlq list|show|replay|archive|health <dir> --namespace N`: a durable
//! database's dead-letter store, and `idem __dlq_replay`, the replaying process of
//! the crash tests.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idem::{
    DeadLetter, DeadLetterHeader, Dlq, Engine, HandlerFailure, Interrupted, MessageId,
    MessageState, NamespaceConfig, ReplayMode, ReplayReport, SchemaVerdict, Selection, SystemClock,
};

use super::{grouped, number};

/// How many messages one replay call takes: the progress bar moves between calls.
const CHUNK: usize = 64;

/// The options of a selection (`list`, `replay`).
const SELECTION: [&str; 5] = ["--id", "--state", "--class", "--all", "--limit"];

/// Whether option `flag` (other than `--namespace`) applies to command `cmd`: one
/// that does not is refused rather than ignored.
fn applies(cmd: &str, flag: &str) -> bool {
    match cmd {
        "list" => SELECTION.contains(&flag),
        "show" => flag == "--id",
        // `--exec` and `--actor` are taken with `--dry-run` too, so that a dry run
        // can be the replay's own command line.
        "replay" => {
            SELECTION.contains(&flag)
                || ["--dry-run", "--exec", "--schema-cmd", "--actor"].contains(&flag)
        }
        "archive" => ["--id", "--note", "--actor"].contains(&flag),
        _ => false,
    }
}

#[derive(Debug, Default)]
struct Options {
    dir: Option<PathBuf>,
    namespace: Option<String>,
    ids: Vec<MessageId>,
    states: Vec<MessageState>,
    class: Option<String>,
    all: bool,
    dry_run: bool,
    exec: Option<String>,
    schema_cmd: Option<String>,
    note: Option<String>,
    actor: Option<String>,
    limit: Option<usize>,
}

impl Options {
    fn parse(cmd: &str, args: &[String]) -> Result<Options, String> {
        let mut o = Options::default();
        let mut it = args.iter();
        let value = |flag: &str, v: Option<&String>| -> Result<String, String> {
            v.cloned().ok_or_else(|| format!("{flag} needs a value"))
        };
        // Options that take one value (or none): given twice, one of the two would be
        // dropped without a word, a `--class` or `--exec` other than the one meant.
        let mut given = crate::cli::Given::default();
        while let Some(a) = it.next() {
            let once = !matches!(a.as_str(), "--id" | "--state") && a.starts_with('-');
            let flag = if a == "-n" { "--namespace" } else { a.as_str() };
            if once {
                given.once(&format!("dlq {cmd}"), flag)?;
            }
            match a.as_str() {
                "--namespace" | "-n" => o.namespace = Some(value(a, it.next())?),
                // As the tool prints it (`#12`), or the bare number.
                "--id" => {
                    let v = value(a, it.next())?;
                    // (A bad value is quoted as given, `#` included.)
                    let n = number(a, Some(&v.strip_prefix('#').unwrap_or(&v).to_owned()))
                        .map_err(|_| format!("--id: {v:?} is not a valid number"))?;
                    o.ids.push(MessageId::new(n));
                }
                "--state" => {
                    let v = value(a, it.next())?;
                    o.states.push(
                        MessageState::parse(&v)
                            .ok_or_else(|| format!("--state: unknown state {v:?}"))?,
                    );
                }
                "--class" => o.class = Some(value(a, it.next())?),
                "--all" => o.all = true,
                "--dry-run" => o.dry_run = true,
                "--exec" => o.exec = Some(value(a, it.next())?),
                "--schema-cmd" => o.schema_cmd = Some(value(a, it.next())?),
                "--note" => o.note = Some(value(a, it.next())?),
                "--actor" => o.actor = Some(value(a, it.next())?),
                "--limit" => o.limit = Some(number(a, it.next())?),
                other if other.starts_with('-') => {
                    return Err(format!("dlq {cmd}: unknown option {other:?}"))
                }
                other if o.dir.is_none() => o.dir = Some(other.into()),
                other => return Err(format!("dlq {cmd}: unexpected argument {other:?}")),
            }
            // A known option (an unknown one was refused above) that this command
            // would not use.
            if a.starts_with('-') && !matches!(a.as_str(), "--namespace" | "-n") && !applies(cmd, a)
            {
                return Err(format!("dlq {cmd}: option {a} does not apply to {cmd}"));
            }
        }
        if o.dir.is_none() {
            return Err(format!("dlq {cmd}: which directory?"));
        }
        if o.namespace.is_none() {
            return Err(format!("dlq {cmd}: --namespace is required"));
        }
        // `--all` selects every state: with `--state` one of the two would be ignored.
        if o.all && !o.states.is_empty() {
            return Err(format!("dlq {cmd}: --all and --state exclude each other"));
        }
        // A replay takes quarantined and under-review messages only: it would pass
        // over every message of these states.
        let terminal = o.states.iter().find(|st| st.is_terminal());
        if let (Some(st), "replay") = (terminal, cmd) {
            return Err(format!(
                "dlq replay: --state {}: a replay takes quarantined and under-review \
                 messages only",
                st.as_str()
            ));
        }
        // A class is a reason's first word: one empty or holding whitespace selects
        // nothing, whatever the store holds.
        if let Some(c) = o
            .class
            .as_deref()
            .filter(|c| c.is_empty() || c.contains(char::is_whitespace))
        {
            return Err(format!(
                "dlq {cmd}: --class {c:?} is no reason class (a reason's first word, e.g. \
                 \"downstream-unavailable\"): it would select nothing"
            ));
        }
        // Checked before the database is opened: a bad value is a usage error.
        if let Some(a) = &o.actor {
            Dlq::validate_actor(a).map_err(|e| format!("dlq {cmd}: --actor {a:?}: {e}"))?;
        }
        if let Some(n) = &o.note {
            Dlq::validate_note(n).map_err(|e| format!("dlq {cmd}: --note {n:?}: {e}"))?;
        }
        Ok(o)
    }

    fn selection(&self) -> Selection {
        match self.limit {
            Some(n) => self.unlimited_selection().limit(n),
            None => self.unlimited_selection(),
        }
    }

    /// The selection without `--limit` (a replay applies it to the messages it can
    /// replay, after passing over the others).
    fn unlimited_selection(&self) -> Selection {
        let mut s = if self.all {
            Selection::all()
        } else {
            Selection::default()
        };
        for st in &self.states {
            s = s.state(*st);
        }
        if let Some(c) = &self.class {
            s = s.reason_class(c);
        }
        if !self.ids.is_empty() {
            s = s.ids(self.ids.iter().copied());
        }
        s
    }
}

/// Dispatches `idem dlq <command> ...`.
pub(crate) fn run(args: &[String]) -> Result<ExitCode, String> {
    let Some((cmd, rest)) = args.split_first() else {
        return Err("dlq: list, show, replay, archive or health?".into());
    };
    let cmd = cmd.as_str();
    if !matches!(cmd, "list" | "show" | "replay" | "archive" | "health") {
        return Err(format!("dlq: unknown command {cmd:?}"));
    }
    let o = Options::parse(cmd, rest)?;
    match cmd {
        "show" if o.ids.len() != 1 => return Err("dlq show: give one --id".into()),
        "archive" if o.ids.is_empty() || o.note.is_none() => {
            return Err("dlq archive: give --id (one or more) and --note".into())
        }
        "replay" if !o.dry_run && o.exec.is_none() => {
            return Err("dlq replay: give --exec CMD (or --dry-run)".into())
        }
        // `sh -c ""` succeeds having done nothing: every message would be recorded
        // as applied (an unset variable in `--exec "$HANDLER"`, say).
        "replay" if o.exec.as_deref().is_some_and(blank) => {
            return Err("dlq replay: --exec needs a command".into())
        }
        "replay" if o.schema_cmd.as_deref().is_some_and(blank) => {
            return Err("dlq replay: --schema-cmd needs a command".into())
        }
        _ => {}
    }
    let dir = o.dir.clone().unwrap_or_default();
    let name = o.namespace.clone().unwrap_or_default();
    // Only a replay that runs and an archive change the store: everything else reads
    // the database read-only, without a lock, while an application may serve from it.
    // The ids those two name are checked on a read-only look first: an engine's open
    // changes the database (it takes over the claims left in flight, and drops the
    // application's saved prefilter), which a command refused for its ids must not.
    if cmd == "archive" || (cmd == "replay" && !o.dry_run && !o.ids.is_empty()) {
        let checked = match open_read_only(&dir, &name) {
            Ok(dlq) if cmd == "archive" => check_archivable(&dlq, &o.ids),
            Ok(dlq) => check_replayable(&dlq, &o),
            Err(e) => {
                errln!("idem dlq: {e}");
                return Ok(ExitCode::FAILURE);
            }
        };
        if let Err(e) = checked {
            errln!("idem dlq {cmd}: {e}");
            return Ok(ExitCode::FAILURE);
        }
    }
    let opened = match cmd {
        "archive" => open_engine(&dir, &name, o.actor.as_deref()),
        "replay" if !o.dry_run => open_engine(&dir, &name, o.actor.as_deref()),
        _ => open_read_only(&dir, &name).map(|dlq| (None, dlq)),
    };
    let (_engine, dlq) = match opened {
        Ok(x) => x,
        Err(e) => {
            errln!("idem dlq: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let outcome = match cmd {
        "list" => list(&dlq, &o).map(|()| ExitCode::SUCCESS),
        "show" => show(&dlq, o.ids[0]).map(|()| ExitCode::SUCCESS),
        "replay" => replay(&dlq, &o),
        "archive" => archive(&dlq, &o).map(|()| ExitCode::SUCCESS),
        _ => {
            health(&dlq);
            Ok(ExitCode::SUCCESS)
        }
    };
    match outcome {
        Ok(code) => Ok(code),
        Err(e) => {
            errln!("idem dlq {cmd}: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Checks that `dir` holds a database with namespace `name`: an engine creates the
/// namespaces it is given, so a mistyped name must not reach one.
fn check_namespace(dir: &Path, name: &str) -> Result<(), String> {
    // A path that is empty, not there or a file, a `CURRENT` that cannot be looked
    // at, and a directory without a database are each said as they are.
    let known = idem::namespaces(dir).map_err(|e| e.to_string())?;
    if !known.iter().any(|n| n == name) {
        return Err(format!(
            "{}: {} (namespaces there: {})",
            dir.display(),
            idem::Error::UnknownNamespace(name.to_owned()),
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        ));
    }
    Ok(())
}

/// The dead-letter store of namespace `name`, read-only: nothing in the directory
/// changes, and an application may hold the database meanwhile.
fn open_read_only(dir: &Path, name: &str) -> Result<Dlq, String> {
    check_namespace(dir, name)?;
    Dlq::open_read_only(dir, name, SystemClock).map_err(|e| e.to_string())
}

/// An engine on an existing database with namespace `name`, configured as the
/// application last opened it (its TTL, lease, retention and longest key), for the
/// commands that change the store.
fn open_engine(
    dir: &Path,
    name: &str,
    actor: Option<&str>,
) -> Result<(Option<Engine>, Dlq), String> {
    check_namespace(dir, name)?;
    // The namespace as the application last configured it: a replay's done record
    // must last the application's retention, not the default one. Without stored
    // settings there is no right retention to write with (and opening an engine
    // would store whatever it was given as the application's): refused.
    let cfg = idem::stored_config(dir, name)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "the database holds no settings for namespace {name:?} (it was last opened by \
                 an older idem, or the open that added it was stopped before it stored \
                 them), so a replay's done records would not last the application's \
                 retention; open the database once with the application, which stores its \
                 settings, then run this again (nothing was changed)"
            )
        })?;
    // The application's tick is not stored: the finest its TTL and lease allow (a
    // finer one than the application's, if anything, so records last no less).
    let tick = cfg.finest_tick();
    // No prefilter: the few keys a replay claims read the store directly, and the
    // application's sizing (`max_keys`, `expected_keys`) is not stored, so one sized
    // from the defaults could be far larger than the application's, or refused
    // outright (a long retention over a short TTL). The application's saved filter
    // is neither read nor replaced; the writes made here leave it stale, and the
    // application rebuilds it at its next open.
    let cfg = cfg.prefilter(false);
    let engine = Engine::builder()
        .namespace(name, cfg)
        .tick(tick)
        .maintenance_interval(None)
        .durable(dir)
        .build()
        .map_err(|e| e.to_string())?;
    report_orphans(engine.orphans());
    let mut dlq = engine.dlq(name).map_err(|e| e.to_string())?;
    if let Some(a) = actor {
        dlq = dlq.as_actor(a).map_err(|e| e.to_string())?;
    }
    Ok((Some(engine), dlq))
}

/// Says on stderr which claims left in flight by an earlier process this open took
/// over. An open reports them once (`Engine::orphans`), and settles those whose lease
/// ran out: the application's next open will not report them again, so they are
/// shown here rather than lost.
fn report_orphans(orphans: &[idem::Orphan]) {
    if orphans.is_empty() {
        return;
    }
    errln!(
        "idem dlq: this open took over {} claim(s) left in flight by an earlier process \
         (those whose lease ran out are settled: the application's next open will not \
         report them again):",
        orphans.len()
    );
    for o in orphans {
        let state = match (&o.corrupt, o.held) {
            (Some(why), _) => format!("corrupt marker: {why}"),
            (None, true) => format!("held until {} ms", o.lease_expires_at_ms),
            (None, false) => format!("lease ran out at {} ms", o.lease_expires_at_ms),
        };
        errln!(
            "  namespace {:?} fingerprint {:032x} claimed (or last renewed) at {} ms, {state}",
            o.namespace,
            o.fingerprint,
            o.claimed_at_ms
        );
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// 93_000 ms -> "1m33s".
fn age(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// `s` on one line of a terminal: every control character (a newline, an escape
/// sequence's ESC) written as its Rust escape (`\n`, `\u{1b}`), the rest as it is.
/// Reasons, notes and actors come from the application and from `--exec`
/// commands' stderr: printed raw, a newline would break a table's row, and an escape
/// sequence would reach the operator's terminal.
fn text(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_owned();
    }
    s.chars()
        .map(|c| match c.is_control() {
            true => c.escape_debug().to_string(),
            false => c.to_string(),
        })
        .collect()
}

fn printable(b: &[u8], max: usize) -> String {
    let s = String::from_utf8_lossy(b);
    let s: String = s
        .chars()
        .map(|c| if c.is_control() { '.' } else { c })
        .collect();
    if s.chars().count() > max {
        format!(
            "{}...",
            s.chars().take(max.saturating_sub(3)).collect::<String>()
        )
    } else {
        s
    }
}

fn list(dlq: &Dlq, o: &Options) -> Result<(), String> {
    // The table prints no payload: none is read.
    let messages = dlq
        .list_headers(&o.selection())
        .map_err(|e| e.to_string())?;
    let now = now_ms();
    outln!(
        "{:>8}  {:<18} {:>8} {:>9}  {:<40} key",
        "id",
        "state",
        "attempts",
        "age",
        "reason class"
    );
    for m in &messages {
        outln!(
            "{:>8}  {:<18} {:>8} {:>9}  {:<40} {}",
            m.id().to_string(),
            m.state().as_str(),
            m.attempts(),
            age(now.saturating_sub(m.quarantined_at_ms())),
            printable(m.reason_class().as_bytes(), 40),
            printable(m.key(), 40)
        );
    }
    outln!("{} message(s)", grouped(messages.len() as u64));
    // Letters that do not decode are never dropped, and never listed: say so.
    let corrupt = dlq.health().corrupt;
    if corrupt > 0 {
        outln!(
            "{} more stored message(s) or damaged key(s) could not be decoded and are not listed (`idem dlq health` counts them)",
            grouped(corrupt)
        );
    }
    Ok(())
}

fn show(dlq: &Dlq, id: MessageId) -> Result<(), String> {
    let m: DeadLetter = dlq.get(id).map_err(|e| e.to_string())?;
    outln!("message     {}", m.id());
    outln!("namespace   {}", dlq.namespace());
    outln!("state       {}", m.state());
    if let Some(outcome) = m.replay_outcome() {
        outln!("outcome     {outcome:?}");
    }
    outln!("key         {}", printable(m.key(), 200));
    outln!(
        "payload     {} bytes: {}",
        m.payload().len(),
        printable(m.payload(), 200)
    );
    outln!("reason      {}", text(m.reason()));
    outln!("attempts    {}", m.attempts());
    outln!("quarantined {} ms", m.quarantined_at_ms());
    outln!();
    outln!(
        "{:>15}  {:<18} {:<18} {:<20} reason",
        "at (ms)",
        "from",
        "to",
        "actor"
    );
    for t in m.history() {
        outln!(
            "{:>15}  {:<18} {:<18} {:<20} {}",
            t.at_ms,
            t.from.map_or("-", MessageState::as_str),
            t.to.as_str(),
            text(&t.actor),
            text(&t.reason)
        );
    }
    Ok(())
}

/// Checks that every id of `ids` names, once, a message that can be archived.
fn check_archivable(dlq: &Dlq, ids: &[MessageId]) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for id in ids {
        if !seen.insert(*id) {
            return Err(format!("message {id} is named twice; nothing was archived"));
        }
        let state = dlq
            .get(*id)
            .map_err(|e| format!("{e}; nothing was archived"))?
            .state();
        if !state.can_go_to(idem::MessageState::Archived) {
            return Err(format!(
                "message {id} cannot go from {} to archived; nothing was archived",
                state.as_str()
            ));
        }
    }
    Ok(())
}

/// Checks that the ids a replay names are there and can be replayed (none replayed
/// or archived), as the replay itself checks them before it does anything.
fn check_replayable(dlq: &Dlq, o: &Options) -> Result<(), String> {
    let selected = dlq
        .list_headers(&o.unlimited_selection())
        .map_err(|e| format!("{e}; nothing was replayed"))?;
    match selected.iter().find(|m| m.state().is_terminal()) {
        Some(m) => Err(format!(
            "message {} is {}, and cannot be replayed; nothing was replayed",
            m.id(),
            m.state().as_str()
        )),
        None => Ok(()),
    }
}

fn archive(dlq: &Dlq, o: &Options) -> Result<(), String> {
    let note = o.note.as_deref().unwrap_or_default();
    // Archived is final: every id is checked before the first is archived, so that a
    // refused command archives none.
    check_archivable(dlq, &o.ids)?;
    // Every id is archived before anything is printed: output that cannot be written
    // (a closed pipe ends the process) must not stop the command half way.
    for (i, id) in o.ids.iter().enumerate() {
        dlq.archive(*id, note).map_err(|e| {
            let done: Vec<String> = o.ids[..i].iter().map(|d| d.to_string()).collect();
            match done.is_empty() {
                true => format!("{e}; nothing was archived"),
                false => format!("{e}; archived before it: {}", done.join(" ")),
            }
        })?;
    }
    for id in &o.ids {
        outln!("archived {id}");
    }
    Ok(())
}

fn health(dlq: &Dlq) {
    let h = dlq.health();
    outln!("{:<28} {}", "depth (waiting)", grouped(h.depth));
    outln!("{:<28} {}", "  quarantined", grouped(h.quarantined));
    outln!("{:<28} {}", "  under review", grouped(h.under_review));
    outln!("{:<28} {}", "replayed", grouped(h.replayed));
    outln!("{:<28} {}", "archived", grouped(h.archived));
    if h.corrupt > 0 {
        outln!("{:<28} {}", "corrupt", grouped(h.corrupt));
    }
    outln!(
        "{:<28} {}",
        "oldest waiting",
        h.oldest_age
            .map_or("-".to_owned(), |a| age(a.as_millis() as u64))
    );
    outln!(
        "{:<28} {}",
        "replay success rate",
        h.replay_success_rate().map_or("-".to_owned(), |r| format!(
            "{:.1}% ({} of {})",
            r * 100.0,
            h.replay_successes,
            h.replay_successes + h.replay_failures
        ))
    );
    outln!(
        "{:<28} {:.2}/h ({} in the last {})",
        "arrivals, recent",
        h.arrival_rate_recent(),
        h.arrivals_recent,
        age(h.recent_window.as_millis() as u64)
    );
    outln!(
        "{:<28} {:.2}/h ({} in the {} before)",
        "arrivals, baseline",
        h.arrival_rate_baseline(),
        h.arrivals_baseline,
        age(h.baseline_window.as_millis() as u64)
    );
    if let Some(r) = h.arrival_ratio() {
        outln!("{:<28} {r:.2}x", "recent / baseline");
    }
}

/// The verdict of `--schema-cmd` on `payload`: the command gets the payload on
/// stdin. Exit 0 with nothing on stdout: compatible; exit 0 with output: the output
/// replaces the payload; any other exit: incompatible, with its stderr as the reason.
/// A command that gives no verdict is an error, not an incompatible payload (which
/// would archive the message for good): one that cannot be started, that the shell
/// cannot find or run (exit 126 or 127), that a signal ends, or whose shell reports a
/// signal that ended what it ran (exit 128 + the signal's number, 129 to 192: an
/// out-of-memory kill of a checker behind a pipeline or a wrapper script, say). Any
/// other non-zero exit is an incompatible verdict.
fn schema_verdict(cmd: &str, payload: &[u8]) -> Result<SchemaVerdict, String> {
    let (status, out, err) = run_shell(cmd, &[], payload)
        .map_err(|e| format!("the schema command did not start: {e}"))?;
    match status.code() {
        Some(0) if out.is_empty() => Ok(SchemaVerdict::Compatible),
        Some(0) => Ok(SchemaVerdict::Transform(out)),
        Some(126 | 127 | 129..=192) | None => Err(format!(
            "the schema command gave no verdict ({status}): {err}"
        )),
        Some(_) => Ok(SchemaVerdict::Incompatible(err)),
    }
}

/// Whether a command is empty or only whitespace.
fn blank(cmd: &str) -> bool {
    cmd.trim().is_empty()
}

/// The environment a replay's `--exec` command gets for `key`: `IDEM_KEY_HEX`, the
/// key's bytes in hexadecimal, always; `IDEM_KEY`, the bytes themselves, unless the
/// key holds a NUL byte (which no environment variable can carry).
fn key_env(key: &[u8]) -> Vec<(&'static str, std::ffi::OsString)> {
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let mut env = vec![("IDEM_KEY_HEX", hex.into())];
    if !key.contains(&0) {
        #[cfg(unix)]
        let raw: std::ffi::OsString =
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(key).to_os_string();
        #[cfg(not(unix))]
        let raw: std::ffi::OsString = String::from_utf8_lossy(key).into_owned().into();
        env.push(("IDEM_KEY", raw));
    }
    env
}

/// Runs `sh -c cmd` with `input` on stdin: (exit status, stdout, stderr or the exit
/// status).
fn run_shell(
    cmd: &str,
    env: &[(&str, std::ffi::OsString)],
    input: &[u8],
) -> Result<(std::process::ExitStatus, Vec<u8>, String), String> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        // Only what this call gives: a key without IDEM_KEY (one with a NUL byte)
        // must not inherit one from idem's own environment.
        .env_remove("IDEM_KEY")
        .env_remove("IDEM_KEY_HEX")
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    // The input goes in from a thread of its own while the output is read: a
    // command that writes as it reads (`cat`, a filter) would otherwise fill its
    // output pipe and wait on it while this process waits on its input pipe.
    let writer = child.stdin.take().map(|mut stdin| {
        let input = input.to_vec();
        std::thread::spawn(move || {
            // A command that does not read its input closes the pipe early: not an
            // error.
            let _ = stdin.write_all(&input);
        })
    });
    let out = child.wait_with_output().map_err(|e| e.to_string());
    if let Some(w) = writer {
        let _ = w.join();
    }
    let out = out?;
    let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    let err = if err.is_empty() {
        format!("exec-failed: {}", out.status)
    } else {
        err
    };
    Ok((out.status, out.stdout, err))
}

/// The `--schema-cmd` verdict on the payload of each message of `chunk`, the
/// command run once per payload; or, at the first message whose payload cannot be
/// read or on which the command gives no verdict, why not.
fn chunk_verdicts(
    dlq: &Dlq,
    cmd: &str,
    chunk: &[MessageId],
) -> Result<HashMap<Vec<u8>, SchemaVerdict>, String> {
    let mut verdicts: HashMap<Vec<u8>, SchemaVerdict> = HashMap::new();
    for id in chunk {
        let payload = dlq
            .get(*id)
            .map_err(|e| format!("{e}, on message {id}"))?
            .payload()
            .to_vec();
        if let std::collections::hash_map::Entry::Vacant(slot) = verdicts.entry(payload) {
            let v = schema_verdict(cmd, slot.key()).map_err(|e| format!("{e}, on message {id}"))?;
            slot.insert(v);
        }
    }
    Ok(verdicts)
}

/// The exit status of a replay that ran to its end but sent messages back to
/// quarantine (their `--exec` command failed): a script can tell it from a replay
/// that applied everything it could (0) and from one that stopped (1).
const EXIT_SENT_BACK: u8 = 3;

/// A replay (or a dry run): success, or [`EXIT_SENT_BACK`] if a handler failed on
/// some message and it went back to quarantine; an error if the replay stopped.
fn replay(dlq: &Dlq, o: &Options) -> Result<ExitCode, String> {
    let mode = if o.dry_run {
        ReplayMode::DryRun
    } else {
        ReplayMode::Execute
    };
    // Select once, then replay in chunks so the progress bar can move. Each chunk
    // names its ids, and a replay refuses named ids it cannot take (replayed or
    // archived ones) before doing anything: those are left out here unless the
    // command named them itself, so that `--all` never stops half way. `--limit`
    // counts the messages left, as `Dlq::replay`'s does.
    let replayable = |m: &DeadLetterHeader| {
        matches!(
            m.state(),
            MessageState::Quarantined | MessageState::UnderReview
        )
    };
    // Ids and states only: the payloads are read one message at a time, as the
    // replay (or the schema command) takes each up.
    let selected: Vec<MessageId> = dlq
        .list_headers(&o.unlimited_selection())
        .map_err(|e| e.to_string())?
        .iter()
        .filter(|m| !o.ids.is_empty() || replayable(m))
        .map(DeadLetterHeader::id)
        .take(o.limit.unwrap_or(usize::MAX))
        .collect();
    let total = selected.len() as u64;
    let mut report = ReplayReport::default();
    let mut bar = Progress::new(total);
    let exec = o.exec.clone().unwrap_or_default();
    // A dry run goes in one piece: what it predicts for a message depends on the
    // messages of the same key before it, which a chunk of its own would not see. So
    // does a replay of named ids: the replay refuses ids it cannot take before it
    // does anything, which holds only for the ids of one call.
    let chunk_len = if o.dry_run || !o.ids.is_empty() {
        selected.len().max(1)
    } else {
        CHUNK
    };
    // What stopped the command before or within a chunk (a schema command that gave
    // no verdict, a store error), if anything.
    let mut failure = None;
    for chunk in selected.chunks(chunk_len) {
        let first = chunk[0];
        // The schema command runs for the whole chunk first: one that gives no verdict
        // stops the command before any message of the chunk is archived for it.
        let verdicts = match &o.schema_cmd {
            None => HashMap::new(),
            Some(cmd) => match chunk_verdicts(dlq, cmd, chunk) {
                Ok(verdicts) => verdicts,
                Err(e) => {
                    failure = Some(format!(
                        "{e}; the replay stopped before message {first}: it and the \
                         selected messages after it were left as they were"
                    ));
                    break;
                }
            },
        };
        let schema = |payload: &[u8]| match &o.schema_cmd {
            None => SchemaVerdict::Compatible,
            // Every payload the replay checks was read above (this process holds
            // the database, or a dry run reads it as it was when opened, so none
            // changed since); the command runs again only if one was not.
            Some(cmd) => verdicts.get(payload).cloned().unwrap_or_else(|| {
                schema_verdict(cmd, payload).unwrap_or_else(SchemaVerdict::Incompatible)
            }),
        };
        let sel = Selection::default().ids(chunk.iter().copied());
        // An error comes with the report of what the chunk did before it, which
        // stays done.
        let (r, error) = match dlq.replay_with_partial(
            &sel,
            &schema,
            |key: &[u8], payload: &[u8]| exec_outcome(run_shell(&exec, &key_env(key), payload)),
            mode,
        ) {
            Ok(r) => (r, None),
            Err(Interrupted { report, error, .. }) => (report, Some(error)),
        };
        report.replayed.extend(r.replayed);
        report.already_done.extend(r.already_done);
        report.archived.extend(r.archived);
        report.failed.extend(r.failed);
        report.skipped_in_progress.extend(r.skipped_in_progress);
        report.refused_key.extend(r.refused_key);
        report.unreadable_key.extend(r.unreadable_key);
        report.payload_mismatch.extend(r.payload_mismatch);
        report.transformed.extend(r.transformed);
        report.notes.extend(r.notes);
        bar.set(report.total() as u64);
        if let Some(e) = error {
            let last = chunk[chunk.len() - 1];
            failure = Some(format!(
                "{e}; the replay stopped among the selected messages {first} to {last}: \
                 those of them in the report were handled before the error as it says \
                 (what a replay wrote of them stays), and the rest and the selected \
                 messages after them were left as they were"
            ));
            break;
        }
        if r.stopped.is_some() {
            report.stopped = r.stopped;
            break;
        }
    }
    bar.finish();
    if let Some(e) = failure {
        // The messages replayed before the error (in the chunks before the one that
        // stopped the command, and in that one) changed the store: their report comes
        // first, as for an `--exec` command that gave no verdict. (Each message a
        // replay handled is in one of the report's lists: an empty report is a command
        // stopped before it handled any, which says only the error.)
        if report.total() > 0 {
            print_report(o, total, &report);
        }
        return Err(e);
    }
    print_report(o, total, &report);
    if let Some((id, why)) = &report.stopped {
        let why = text(why);
        return Err(format!(
            "the --exec command gave no verdict on message {id} ({why}); it and the \
             messages after it were left as they were, the replay stopped there"
        ));
    }
    if report.failed.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    errln!(
        "idem dlq replay: the --exec command failed on {} of the messages, which went \
         back to quarantine (exit {EXIT_SENT_BACK})",
        grouped(report.failed.len() as u64)
    );
    Ok(ExitCode::from(EXIT_SENT_BACK))
}

/// Prints a replay's report: the outcomes of the messages it covers, of `total`
/// selected, and the notes.
fn print_report(o: &Options, total: u64, report: &ReplayReport) {
    let verb = if o.dry_run { "would be " } else { "" };
    outln!(
        "{} ({} messages)",
        if o.dry_run { "dry run" } else { "replay" },
        grouped(total)
    );
    outln!("{:<34} {:>8}", "outcome", "messages");
    for (label, ids) in [
        (format!("{verb}replayed"), &report.replayed),
        (
            format!("{verb}replayed: already done"),
            &report.already_done,
        ),
        (format!("{verb}archived: schema"), &report.archived),
        ("failed: back in quarantine".to_owned(), &report.failed),
        (
            "skipped: key in progress".to_owned(),
            &report.skipped_in_progress,
        ),
        (
            "skipped: key refused by namespace".to_owned(),
            &report.refused_key,
        ),
        (
            "skipped: key's record unreadable".to_owned(),
            &report.unreadable_key,
        ),
        (
            "skipped: key has another payload".to_owned(),
            &report.payload_mismatch,
        ),
    ] {
        outln!("{label:<34} {:>8}", grouped(ids.len() as u64));
    }
    if !report.notes.is_empty() {
        outln!();
        for (id, note) in &report.notes {
            outln!("{:>8}  {}", id.to_string(), text(note));
        }
    }
}

/// What a run of the `--exec` command says of a message: exit 0, applied; any other
/// exit, failed, with its stderr as the reason. A command that never ran says
/// nothing of the message, whose attempts and reason stay as they were, and stops the
/// replay (a mistyped command would otherwise send every selected message back with
/// the shell's complaint as its reason): one that cannot be started, or that the
/// shell cannot find or run (exit 126 or 127). A command ended by a signal did run:
/// a message that crashes its handler is a failure of that message, counted, and the
/// replay goes on to the next (`--schema-cmd`, whose verdict archives for good, is
/// stricter).
fn exec_outcome(
    run: Result<(std::process::ExitStatus, Vec<u8>, String), String>,
) -> Result<(), HandlerFailure> {
    match run {
        Ok((status, _, _)) if status.success() => Ok(()),
        Ok((status, _, err)) => match status.code() {
            Some(126 | 127) => Err(HandlerFailure::NoVerdict(format!(
                "{status}: {}",
                err.trim()
            ))),
            // (Killed with nothing said: the signal is the reason.)
            None if err.trim().is_empty() => Err(HandlerFailure::Failed(status.to_string())),
            _ => Err(HandlerFailure::Failed(err)),
        },
        Err(e) => Err(HandlerFailure::NoVerdict(format!("it did not run: {e}"))),
    }
}

/// A progress bar on a terminal, a line per quarter elsewhere (both on stderr).
struct Progress {
    total: u64,
    tty: bool,
    started: Instant,
    next_quarter: u64,
}

impl Progress {
    fn new(total: u64) -> Progress {
        Progress {
            total,
            tty: std::io::stderr().is_terminal(),
            started: Instant::now(),
            next_quarter: 1,
        }
    }

    fn set(&mut self, done: u64) {
        let frac = done as f64 / self.total.max(1) as f64;
        if self.tty {
            let width = 40;
            let filled = ((frac * width as f64) as usize).min(width);
            err!(
                "\r[{}{}] {:5.1}% {}/{} messages  {:.1}s",
                "#".repeat(filled),
                ".".repeat(width - filled),
                frac * 100.0,
                grouped(done),
                grouped(self.total),
                self.started.elapsed().as_secs_f64()
            );
            let _ = std::io::stderr().flush();
        } else {
            while self.next_quarter <= 4 && frac >= self.next_quarter as f64 / 4.0 {
                errln!("progress: {}% of messages", self.next_quarter * 25);
                self.next_quarter += 1;
            }
        }
    }

    fn finish(&mut self) {
        if self.tty && self.total > 0 {
            errln!();
        }
    }
}

/// `idem __dlq_replay --dir DIR`: replays every quarantined message of namespace
/// `orders` (the consumer's database layout), printing `applied <key>` from the
/// handler before each completion, then `done`. The crash tests SIGKILL it.
pub(crate) fn crash_replay(args: &[String]) -> Result<ExitCode, String> {
    let mut dir = None;
    let mut lease_ms = 30_000u64;
    let mut it = args.iter();
    let mut given = crate::cli::Given::default();
    while let Some(a) = it.next() {
        given.once("__dlq_replay", a)?;
        match a.as_str() {
            "--dir" => dir = Some(PathBuf::from(it.next().ok_or("--dir needs a value")?)),
            "--lease-ms" => lease_ms = number(a, it.next())?,
            other => return Err(format!("__dlq_replay: unknown option {other:?}")),
        }
    }
    let dir = dir.ok_or("__dlq_replay: --dir is required")?;
    let engine = Engine::builder()
        .namespace(
            "orders",
            NamespaceConfig::new()
                .ttl(Duration::from_secs(3600))
                .lease(Duration::from_millis(lease_ms)),
        )
        .durable(&dir)
        .build()
        .map_err(|e| e.to_string())?;
    let dlq = engine.dlq("orders").map_err(|e| e.to_string())?;
    let mut out = std::io::stdout();
    dlq.replay(
        &Selection::default(),
        &|_: &[u8]| SchemaVerdict::Compatible,
        |key: &[u8], _: &[u8]| {
            let _ = writeln!(out, "applied {}", String::from_utf8_lossy(key));
            let _ = out.flush();
            Ok(())
        },
        ReplayMode::Execute,
    )
    .map_err(|e| e.to_string())?;
    outln!("done");
    Ok(ExitCode::SUCCESS)
}
