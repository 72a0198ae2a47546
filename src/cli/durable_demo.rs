//! `idem demo` on the durable tier: a consumer process is killed with SIGKILL in the
//! middle of its stream, restarted, and the co-committed ledger proves that every
//! message took effect exactly once.
//!
//! The check does not rely on the exclusivity it verifies. Every application of a
//! message writes its own ledger entry (keyed by run, worker and sequence number; see
//! [`consumer::application_key`]) in the atomic write of its completion, so two
//! applications of one message leave two entries, whether they ran one after the
//! other or at the same time. A completion that was in flight at the kill and never
//! reached the database took its entry with it, so the restarted consumer applying
//! that message again leaves one entry, as it should. Beside the ledger, the demo
//! counts the `ack <id> <worker> <seq>` lines of both runs per message: a completion
//! that returned `Ok` twice for one message is a violation too. The same lines say
//! which ledger entries must exist: the checker reads every worker's entries up to its
//! highest acknowledged sequence number and a margin past it (and past the last entry
//! it found), so an entry missing in the middle is reported as acknowledged but not
//! recorded, and the entries after it are still read and counted.
//!
//! The ledger cannot show a claim lost in the crash: the restarted consumer would
//! apply its message at once, once. The claims run 1 held in flight until the kill
//! (its `frozen` lines) must therefore each be one of the orphan claims that run 2
//! finds at its open; fewer orphans than that fails the demo.
//!
//! With `--dir`, the directory must be new or empty: the demo never deletes anything
//! in a directory it did not make, so a directory that holds anything (a database
//! of an earlier run included) is refused. Without `--dir` it makes a temporary
//! directory and removes it at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::Instant;

use idem::Engine;

use super::consumer;
use super::demo::Progress;
use super::{grouped, number};

/// What the durable demo was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    dir: Option<PathBuf>,
    messages: u64,
    workers: usize,
    sync: String,
    kill_at_pct: u64,
}

impl Options {
    pub(crate) fn parse(args: &[String]) -> Result<Options, String> {
        let mut o = Options {
            dir: None,
            messages: 100_000,
            workers: 4,
            sync: "periodic:1000".into(),
            kill_at_pct: 40,
        };
        let (mut quick, mut messages) = (false, None);
        let mut it = args.iter();
        let mut given = crate::cli::Given::default();
        while let Some(a) = it.next() {
            given.once("demo", crate::cli::demo::long_name(a))?;
            match a.as_str() {
                "--dir" => {
                    let v = it.next().ok_or("--dir needs a value")?;
                    if v.is_empty() {
                        return Err("demo: --dir needs a directory, not an empty string".into());
                    }
                    o.dir = Some(v.into());
                }
                "--messages" | "-n" => messages = Some(number(a, it.next())?),
                "--workers" | "-w" => o.workers = number(a, it.next())?,
                "--sync" => {
                    let v = it.next().ok_or("--sync needs a value")?;
                    consumer::parse_sync(Some(v))?;
                    o.sync = v.clone();
                }
                "--kill-at" => o.kill_at_pct = number(a, it.next())?,
                "--quick" => quick = true,
                other => return Err(format!("demo: unknown option {other:?}")),
            }
        }
        o.messages = crate::cli::stream_length(quick.then_some(10_000), messages, o.messages)?;
        if o.messages == 0 || o.messages > 10_000_000 {
            return Err("demo: --messages must be between 1 and 10,000,000".into());
        }
        if o.workers == 0 || o.workers > 64 {
            return Err("demo: --workers must be between 1 and 64".into());
        }
        if !(1..=99).contains(&o.kill_at_pct) {
            return Err("demo: --kill-at is a percentage between 1 and 99".into());
        }
        Ok(o)
    }
}

/// What one run of the consumer process printed, and how it ended.
#[derive(Debug, Default)]
struct Run {
    orphans: u64,
    /// `ack` lines, all of them: the pipe is read to its end, after a kill too.
    acks: u64,
    /// The sequence numbers of the acknowledged applications, per worker: the
    /// ledger entries that must exist.
    seqs: Acked,
    /// `frozen` lines: claims the consumer acquired and held in flight until the
    /// kill.
    frozen: u64,
    /// When the process was started and when it was reaped.
    spawned: Option<Instant>,
    reaped: Option<Instant>,
    /// When the `orphans` line, which the consumer prints once its engine is open,
    /// was read.
    opened: Option<Instant>,
    /// When each `ack` line was read, in order.
    ack_times: Vec<Instant>,
    /// For each `ack` line, in order: whether it ends in `waited` (its claim had
    /// found the key in progress first, held by a claim that never completed: an
    /// orphan whose lease the message waited for).
    waited: Vec<bool>,
    dups: u64,
    finished: bool,
    /// The demo sent SIGKILL and the signal is what ended the process. `false` if
    /// the process had exited on its own before the signal reached it.
    killed: bool,
    /// What a consumer that finished its stream measured: claim and completion
    /// latency (count, p50, p99, p99.9 in ns), and the hot tier's bytes and resident
    /// keys.
    claim_latency: Option<[u64; 4]>,
    complete_latency: Option<[u64; 4]>,
    memory: Option<(u64, u64)>,
}

impl Run {
    /// Killed before it had consumed its whole stream, with a claim in flight: a
    /// crash in the middle of it. (A consumer that had printed `done` may still be
    /// killed while it closes its engine, when the pipe's reader falls behind: that
    /// tests no crash mid-stream.)
    fn crashed_mid_stream(&self) -> bool {
        self.killed && !self.finished && self.frozen > 0
    }
}

/// Whether `status` is that of a process ended by SIGKILL.
#[cfg(unix)]
fn ended_by_sigkill(status: &ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(libc::SIGKILL)
}

/// Whether `status` is that of a process ended by SIGKILL: without signals, any
/// failure after a kill.
#[cfg(not(unix))]
fn ended_by_sigkill(status: &ExitStatus) -> bool {
    !status.success()
}

/// The acknowledged sequence numbers of one run's applications, per worker.
type Acked = BTreeMap<usize, BTreeSet<u64>>;

/// Reads the consumer's lines from `out` to their end, counting each
/// `ack <id> <worker> <seq>` in `acked[id]`, and sends `child` SIGKILL once
/// `kill_after` acknowledgements and a `frozen` line were read: a claim is in flight
/// when the kill is sent. (The consumer started with `--freeze-after kill_after`
/// freezes its next acquired claim; a consumer that runs out of messages first exits
/// on its own and is not killed.) Then reaps the child: the run counts as killed only
/// if the signal is what ended it (a child that had already exited is not killed by
/// it, though `Child::kill` succeeds on it until it is reaped).
fn watch(
    out: impl BufRead,
    child: &mut Child,
    kill_after: Option<u64>,
    acked: &mut [u8],
    mut progress: Option<(&mut Throttled, u64)>,
) -> Result<Run, String> {
    let mut run = Run::default();
    let mut kill_sent = false;
    let mut result = Ok(());
    for line in out.lines() {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                result = Err(format!("reading the consumer's output: {e}"));
                break;
            }
        };
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("orphans"), Some(n)) => {
                run.orphans = n.parse().unwrap_or(0);
                run.opened.get_or_insert_with(Instant::now);
            }
            (Some("ack"), Some(id)) => {
                let id = id.parse::<usize>().ok().filter(|&i| i < acked.len());
                let worker = words.next().and_then(|w| w.parse::<usize>().ok());
                let seq = words.next().and_then(|q| q.parse::<u64>().ok());
                let waited = words.next() == Some("waited");
                match (id, worker, seq) {
                    (Some(i), Some(w), Some(q)) => {
                        acked[i] = acked[i].saturating_add(1);
                        run.acks += 1;
                        run.seqs.entry(w).or_default().insert(q);
                        run.ack_times.push(Instant::now());
                        run.waited.push(waited);
                    }
                    _ => {
                        result = Err(format!("the consumer printed {line:?}"));
                        break;
                    }
                }
            }
            (Some("dup"), _) => run.dups += 1,
            (Some("frozen"), _) => run.frozen += 1,
            (Some("done"), _) => run.finished = true,
            (Some("latency"), Some(what)) => {
                let figures: Vec<u64> = words.filter_map(|w| w.parse().ok()).collect();
                if let Ok(f) = <[u64; 4]>::try_from(figures) {
                    match what {
                        "claim" => run.claim_latency = Some(f),
                        "complete" => run.complete_latency = Some(f),
                        _ => {}
                    }
                }
            }
            (Some("memory"), Some(bytes)) => {
                if let (Ok(b), Some(Ok(k))) = (bytes.parse(), words.next().map(str::parse)) {
                    run.memory = Some((b, k));
                }
            }
            _ => {}
        }
        if let Some((bar, before)) = progress.as_mut() {
            bar.tick(*before + run.acks);
        }
        if !kill_sent && run.frozen > 0 && kill_after.is_some_and(|k| run.acks >= k) {
            // SIGKILL: no destructor, no flush, no goodbye. The lines it wrote
            // before are still in the pipe and are read on.
            if let Err(e) = child.kill() {
                result = Err(format!("killing the consumer: {e}"));
                break;
            }
            kill_sent = true;
        }
    }
    if result.is_err() && !kill_sent {
        let _ = child.kill();
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for the consumer: {e}"))?;
    result?;
    run.killed = kill_sent && ended_by_sigkill(&status);
    if !run.killed && !status.success() {
        return Err(format!("the consumer failed: {status}"));
    }
    Ok(run)
}

/// [`Progress`] redrawn at most every 100 ms: a consumer acknowledges far more
/// often.
struct Throttled {
    bar: Progress,
    last: Option<Instant>,
}

impl Throttled {
    fn tick(&mut self, done: u64) {
        if self
            .last
            .is_none_or(|t| t.elapsed() >= std::time::Duration::from_millis(100))
        {
            self.bar.show(done);
            self.last = Some(Instant::now());
        }
    }
}

fn consume(
    o: &Options,
    dir: &Path,
    run: u32,
    kill_after: Option<u64>,
    acked: &mut [u8],
    progress: &mut Throttled,
    before: u64,
) -> Result<Run, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let spawned = Instant::now();
    let mut child = Command::new(exe)
        .args(["__consumer", "--dir"])
        .arg(dir)
        .args(["--messages", &o.messages.to_string()])
        .args(["--workers", &o.workers.to_string()])
        .args(["--sync", &o.sync])
        .args(["--run", &run.to_string()])
        // The kill lands mid-stream: the consumer holds its claims from there on.
        .args(
            kill_after
                .map(|n| ["--freeze-after".to_owned(), n.to_string()])
                .into_iter()
                .flatten(),
        )
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the consumer: {e}"))?;
    let Some(out) = child.stdout.take() else {
        let _ = child.kill();
        let _ = child.wait();
        return Err("no consumer output".into());
    };
    let mut run = watch(
        BufReader::new(out),
        &mut child,
        kill_after,
        acked,
        Some((progress, before)),
    )?;
    run.spawned = Some(spawned);
    run.reaped = Some(Instant::now());
    Ok(run)
}

/// Where the time of one run went: from its start to its open (process start, open,
/// recovery), from there to its `head`-th acknowledgement, the rest to the last
/// acknowledgement, and from there to its end (the kill, or closing); and the run's
/// own pace, `head` acknowledgements from the first to the `head`-th. All in
/// seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Split {
    head: u64,
    start: f64,
    consuming: f64,
    /// From the first acknowledgement to the `head`-th.
    pace: f64,
    rest: f64,
    end: f64,
}

impl Run {
    /// The run's time split at its `head`-th acknowledgement (all of them if fewer;
    /// with none, at its open).
    fn split(&self, head: u64) -> Split {
        let secs = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64();
        let (Some(spawned), Some(reaped)) = (self.spawned, self.reaped) else {
            return Split {
                head: 0,
                start: 0.0,
                consuming: 0.0,
                pace: 0.0,
                rest: 0.0,
                end: 0.0,
            };
        };
        let head = head.min(self.ack_times.len() as u64);
        let opened = self
            .opened
            .or(self.ack_times.first().copied())
            .unwrap_or(reaped);
        let last = self.ack_times.last().copied().unwrap_or(opened);
        let (first, at_head) = match head {
            0 => (opened, opened),
            h => (self.ack_times[0], self.ack_times[h as usize - 1]),
        };
        Split {
            head,
            start: secs(spawned, opened),
            consuming: secs(opened, at_head),
            pace: secs(first, at_head),
            rest: secs(at_head, last),
            end: secs(last, reaped),
        }
    }

    /// The acknowledgements up to the last one that did not wait for an orphan
    /// claim's lease: those after it each waited, and came once a lease ran out
    /// rather than at the run's own pace. (An orphan whose lease ran out before the
    /// stream reached its message is acknowledged in the stream, at its pace.)
    fn paced_acks(&self) -> u64 {
        self.waited
            .iter()
            .rposition(|w| !w)
            .map_or(0, |i| i as u64 + 1)
    }
}

/// `n` over `secs` per second, or `-` over no measurable time.
fn per_second(n: u64, secs: f64) -> String {
    if n > 1 && secs > 0.0 {
        grouped((n.saturating_sub(1) as f64 / secs) as u64)
    } else {
        "-".into()
    }
}

/// What the ledger entries and the acknowledgements say about each message.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Verdict {
    /// Applied once, acknowledged at most once.
    once: u64,
    /// Never applied.
    lost: u64,
    /// Acknowledged applications whose ledger entry is missing.
    unrecorded: u64,
    /// Applied more than once.
    doubled: u64,
    /// Applied once but acknowledged more than once (two completions returned `Ok`).
    acked_twice: u64,
    /// Application entries that name no message of the stream.
    stray: u64,
    /// Application entries read.
    entries: u64,
}

impl Verdict {
    /// Every one of `messages` messages was applied once and acknowledged at most
    /// once, every acknowledged application has its entry, and no entry is stray.
    fn exactly_once(&self, messages: u64) -> bool {
        self.once == messages && self.stray == 0 && self.unrecorded == 0
    }
}

/// How far past a worker's highest acknowledged sequence number, and past its last
/// entry found, the check reads: a completion committed and not acknowledged at the
/// kill leaves an entry past the last acknowledged one.
const SEQ_MARGIN: u64 = 64;

/// Counts the application entries of `runs` (each a run number and its acknowledged
/// sequence numbers per worker) and workers `0..workers` per message, and judges every
/// message of `acked` (its acknowledgements over all runs). Each worker's entries are
/// read from 0 up to [`SEQ_MARGIN`] past both its highest acknowledged sequence number
/// and the last entry found: an entry missing on the way does not stop the count, and
/// one missing for an acknowledged application is counted as unrecorded.
fn verify(
    engine: &Engine,
    runs: &[(u32, &Acked)],
    workers: usize,
    acked: &[u8],
) -> Result<Verdict, String> {
    let mut applied = vec![0u8; acked.len()];
    let mut v = Verdict::default();
    let none = BTreeSet::new();
    for &(run, seqs) in runs {
        for worker in 0..workers {
            let acknowledged = seqs.get(&worker).unwrap_or(&none);
            let mut end = acknowledged
                .last()
                .map_or(0, |&q| q.saturating_add(1))
                .saturating_add(SEQ_MARGIN);
            let mut seq = 0;
            while seq < end {
                let entry = engine
                    .read_state("ledger", &consumer::application_key(run, worker, seq))
                    .map_err(|e| e.to_string())?;
                let Some(entry) = entry else {
                    if acknowledged.contains(&seq) {
                        v.unrecorded += 1;
                    }
                    seq += 1;
                    continue;
                };
                end = end.max(seq.saturating_add(1).saturating_add(SEQ_MARGIN));
                seq += 1;
                v.entries += 1;
                let id = <[u8; 8]>::try_from(entry.as_slice())
                    .ok()
                    .map(u64::from_le_bytes)
                    .and_then(|id| usize::try_from(id).ok())
                    .filter(|&id| id < applied.len());
                match id {
                    Some(id) => applied[id] = applied[id].saturating_add(1),
                    None => v.stray += 1,
                }
            }
        }
    }
    for (&applications, &acks) in applied.iter().zip(acked) {
        match (applications, acks) {
            (0, _) => v.lost += 1,
            (1, 0 | 1) => v.once += 1,
            (1, _) => v.acked_twice += 1,
            _ => v.doubled += 1,
        }
    }
    Ok(v)
}

/// The temporary directory of a run without `--dir`, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    /// A directory the demo made, removed when the demo ends, or when it stops at
    /// once because nobody reads its output (see [`crate::cli::emit`]).
    fn new(dir: PathBuf) -> Scratch {
        crate::cli::remove_on_early_exit(&dir, true);
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        crate::cli::remove_on_early_exit(&self.0, false);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Refuses a `--dir` that exists and is not an empty directory: the demo writes its
/// database there and never deletes what it did not make. A path it cannot read is
/// left to the consumer, which reports why it cannot open a database there.
fn check_dir(dir: &Path) -> Result<(), String> {
    if dir.exists() && !dir.is_dir() {
        return Err(format!("demo: --dir {} is not a directory", dir.display()));
    }
    if let Ok(mut entries) = std::fs::read_dir(dir) {
        if entries.next().is_some() {
            return Err(format!(
                "demo: --dir {} is not empty: the demo needs a new or empty directory \
                 (it never deletes anything in one it did not make)",
                dir.display()
            ));
        }
    }
    Ok(())
}

/// A new directory of the system's temporary directory, made here (never one that
/// was there already: another user could have made it) and, on Unix, readable by
/// this user alone. Its name ends in a random number.
fn new_temp_dir() -> Result<PathBuf, String> {
    use std::hash::{BuildHasher, Hasher};
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    let mut last = None;
    for _ in 0..16 {
        // (Each `RandomState` is seeded at random.)
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        let d = std::env::temp_dir().join(format!("idem-demo-{:016x}", h.finish()));
        match builder.create(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => {
                return Err(format!(
                    "making a directory in {}: {e}",
                    std::env::temp_dir().display()
                ))
            }
        }
    }
    Err(format!(
        "no new directory in {}: {last:?}",
        std::env::temp_dir().display()
    ))
}

/// Runs the demo. A directory the demo cannot use is a usage error; a failure while
/// it runs is reported on stderr with status 1, as a failed check is.
pub(crate) fn run(o: Options) -> Result<ExitCode, String> {
    let (dir, _scratch) = match &o.dir {
        Some(d) => {
            check_dir(d)?;
            (d.clone(), None)
        }
        None => {
            let d = new_temp_dir()?;
            (d.clone(), Some(Scratch::new(d)))
        }
    };
    match demo(&o, &dir) {
        Ok(code) => Ok(code),
        Err(e) => {
            errln!("idem demo: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn demo(o: &Options, dir: &Path) -> Result<ExitCode, String> {
    outln!(
        "idem demo: {} messages (+10% redelivered), {} workers, durable tier in {} (sync {})",
        grouped(o.messages),
        o.workers,
        dir.display(),
        o.sync
    );
    let started = Instant::now();
    // At least one acknowledgement before the kill, whatever the stream's length.
    let kill_after = (o.messages * o.kill_at_pct / 100).max(1);
    let messages = usize::try_from(o.messages).map_err(|e| e.to_string())?;
    let mut acked = vec![0u8; messages];
    let mut bar = Throttled {
        bar: Progress::new(o.messages, "messages", started),
        last: None,
    };
    let first = consume(o, dir, 1, Some(kill_after), &mut acked, &mut bar, 0)?;
    if first.crashed_mid_stream() {
        // (Its frozen claims were in flight at the kill.)
        outln!(
            "run 1:      the consumer acknowledged {} messages, then was killed with SIGKILL",
            grouped(first.acks)
        );
    } else if first.killed {
        outln!(
            "run 1:      the consumer acknowledged {} messages and had finished its stream \
             when the kill reached it: no crash mid-stream was tested",
            grouped(first.acks)
        );
    } else {
        outln!(
            "run 1:      the consumer acknowledged {} messages and exited before the kill \
             reached it: no crash was tested",
            grouped(first.acks)
        );
    }
    let second = consume(o, dir, 2, None, &mut acked, &mut bar, first.acks)?;
    bar.bar.show(first.acks + second.acks);
    bar.bar.end();
    if !second.finished {
        return Err("the restarted consumer did not finish its stream".into());
    }
    outln!(
        "run 2:      restarted; {} orphan claim{} found at open (in flight at the kill); {} acknowledged, {} duplicates skipped",
        grouped(second.orphans),
        if second.orphans == 1 { "" } else { "s" },
        grouped(second.acks),
        grouped(second.dups)
    );
    let elapsed = started.elapsed();
    let checked = Instant::now();

    // Verify from the ledger, whose entries every completion co-committed atomically.
    let engine = consumer::open(dir, consumer::parse_sync(Some(&o.sync))?, 1000)
        .map_err(|e| e.to_string())?;
    let v = verify(
        &engine,
        &[(1, &first.seqs), (2, &second.seqs)],
        o.workers,
        &acked,
    )?;
    drop(engine);
    // The consumers' own pace: acknowledgements from each run's first to its last
    // (run 1) or to the last one that did not wait for an orphan's lease (run 2: an
    // orphan claim is acquired again only once its lease ran out; the consumer marks
    // the acknowledgements whose claim found their key in progress first).
    let one = first.split(first.acks);
    let two = second.split(second.paced_acks());
    let waited = second.acks - two.head;
    let lease_wait = if waited > 0 {
        format!(
            "its last {} (orphan claims, acquired again once their lease ran out) {:.2} s after those",
            grouped(waited),
            two.rest
        )
    } else {
        "and none waited past those for an orphan claim's lease".to_string()
    };
    outln!(
        "throughput: run 1 {} acknowledged in {:.2} s ({} per second) before the kill; \
         run 2 {} in {:.2} s ({} per second), {}",
        grouped(first.acks),
        one.pace,
        per_second(one.head, one.pace),
        grouped(two.head),
        two.pace,
        per_second(two.head, two.pace),
        lease_wait
    );
    outln!(
        "time:       {:.2} s in all: run 1 {:.2} s (start and open {:.2} s, consuming {:.2} s, \
         to the kill {:.2} s); run 2 {:.2} s (start, open and recovery {:.2} s, consuming {:.2} s, \
         last {} acknowledgements (the orphans' leases) {:.2} s, closing {:.2} s); check {:.2} s",
        (elapsed + checked.elapsed()).as_secs_f64(),
        one.start + one.consuming + one.rest + one.end,
        one.start,
        one.consuming + one.rest,
        one.end,
        two.start + two.consuming + two.rest + two.end,
        two.start,
        two.consuming,
        grouped(waited),
        two.rest,
        two.end,
        checked.elapsed().as_secs_f64()
    );
    // What a completion's write costs depends on the sync policy: only `always`
    // fsyncs it before `complete` returns.
    let synced = match consumer::parse_sync(Some(&o.sync))? {
        idem::SyncPolicy::Always => "fsynced before it returns".to_string(),
        idem::SyncPolicy::Never => "never fsynced".to_string(),
        idem::SyncPolicy::Periodic(d) => format!(
            "not fsynced: the write-ahead log is fsynced every {} ms",
            d.as_millis()
        ),
    };
    if let (Some(c), Some(d)) = (second.claim_latency, second.complete_latency) {
        let us = |ns: u64| ns as f64 / 1e3;
        outln!(
            "latency:    run 2, claim p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us ({} claims); \
             complete (with its ledger entries, one atomic write, {}) p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us",
            us(c[1]),
            us(c[2]),
            us(c[3]),
            grouped(c[0]),
            synced,
            us(d[1]),
            us(d[2]),
            us(d[3])
        );
    }
    if let Some((bytes, keys)) = second.memory {
        outln!(
            "memory:     {} resident keys after run 2, {:.1} hot-tier bytes per key",
            grouped(keys),
            bytes as f64 / keys.max(1) as f64
        );
    }
    outln!(
        "check:      {} ledger entries, one per application; {} acknowledgements, counted per message",
        grouped(v.entries),
        grouped(first.acks + second.acks)
    );
    match outcome(o.messages, &first, &second, &v) {
        Outcome::Verified => {
            outln!(
                "verified:   every one of {} messages took effect exactly once, across a SIGKILL and a restart",
                grouped(o.messages)
            );
            Ok(ExitCode::SUCCESS)
        }
        Outcome::NotShown => {
            outln!(
                "not shown:  every one of {} messages took effect exactly once, but the consumer \
                 was not killed mid-stream; run again with a lower --kill-at or more --messages",
                grouped(o.messages)
            );
            Ok(ExitCode::FAILURE)
        }
        Outcome::Failed => {
            if second.orphans < first.frozen {
                outln!(
                    "FAILED:     {} claims were held in flight at the kill, but the restart found {} orphan claims: \
                     a claim in flight at the crash was lost",
                    grouped(first.frozen),
                    grouped(second.orphans)
                );
            }
            if !v.exactly_once(o.messages) {
                outln!(
                    "FAILED:     {} exactly once, {} never applied, {} applied more than once, {} acknowledged more than once, {} acknowledged but not recorded, {} stray ledger entries",
                    grouped(v.once),
                    grouped(v.lost),
                    grouped(v.doubled),
                    grouped(v.acked_twice),
                    grouped(v.unrecorded),
                    grouped(v.stray)
                );
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

/// What the demo concludes from its two runs and the check of the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Every message took effect exactly once across a crash mid-stream, and every
    /// claim held at the kill was found as an orphan at the restart.
    Verified,
    /// Every message took effect exactly once, but run 1 was not killed mid-stream.
    NotShown,
    /// A message did not take effect exactly once, or a claim held in flight at the
    /// kill was not found at the restart.
    Failed,
}

/// Judges the demo. The claims run 1 froze were acquired and held, in flight, until
/// the kill: each must be one of the orphan claims run 2 found at its open (more may
/// be, such as a claim whose completion the kill interrupted). Fewer orphans than
/// frozen claims means the database lost a claim in flight at a crash, which the
/// ledger alone would not show: run 2 would then apply the message at once, once.
fn outcome(messages: u64, first: &Run, second: &Run, v: &Verdict) -> Outcome {
    if !v.exactly_once(messages) || second.orphans < first.frozen {
        Outcome::Failed
    } else if first.crashed_mid_stream() {
        Outcome::Verified
    } else {
        Outcome::NotShown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[cfg(unix)]
    /// A process that runs until it is killed: `cat` reading a pipe nobody writes.
    fn blocked_child() -> Child {
        Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("cat starts")
    }

    /// A process that has exited and is not reaped yet: waits for its exit without
    /// reaping it, as the demo's kill can find a consumer that just finished.
    #[cfg(unix)]
    fn exited_child() -> Child {
        let child = Command::new("true").spawn().expect("true starts");
        // SAFETY: `info` is a plain C struct that waitid fills in; WNOWAIT leaves the
        // child unreaped, so `Child` still owns its process id.
        let rc = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                child.id() as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        assert_eq!(rc, 0, "waitid: {}", std::io::Error::last_os_error());
        child
    }

    #[cfg(unix)]
    const LINES: &str = "orphans 0\nack 0 0 0\nack 1 0 1\nack 2 1 0\ndone\n";

    /// A consumer that froze a claim after its first acknowledgement, whose later
    /// lines were in the pipe when the kill came.
    #[cfg(unix)]
    const FROZEN: &str = "orphans 0\nack 0 0 0\nfrozen 1\nack 1 0 1\nack 2 1 0\n";

    #[test]
    fn an_empty_directory_name_is_a_usage_error() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let e = Options::parse(&args(&["--dir", ""])).unwrap_err();
        assert!(e.contains("--dir needs a directory"), "{e}");
        let o = Options::parse(&args(&["--dir", "d"])).unwrap();
        assert_eq!(o.dir, Some(std::path::PathBuf::from("d")));
    }

    #[cfg(unix)]
    #[test]
    fn a_consumer_that_exited_before_the_kill_is_not_counted_as_killed() {
        let mut child = exited_child();
        let mut acked = vec![0u8; 3];
        let run = watch(Cursor::new(LINES), &mut child, Some(1), &mut acked, None).unwrap();
        assert!(!run.killed, "{run:?}");
        assert!(run.finished, "{run:?}");
        assert_eq!(run.acks, 3);
    }

    #[cfg(unix)]
    #[test]
    fn a_killed_consumer_is_counted_as_killed_and_its_pipe_read_to_the_end() {
        let mut child = blocked_child();
        let mut acked = vec![0u8; 3];
        let run = watch(Cursor::new(FROZEN), &mut child, Some(1), &mut acked, None).unwrap();
        assert!(run.killed, "{run:?}");
        // Every ack written before the kill counts, not only those before the limit.
        assert_eq!(run.acks, 3);
        assert_eq!(acked, [1, 1, 1]);
        assert_eq!(run.seqs[&0], BTreeSet::from([0, 1]));
        assert_eq!(run.seqs[&1], BTreeSet::from([0]));
        assert!(run.crashed_mid_stream(), "{run:?}");
        // It had printed `done`: killed while closing, which is no crash mid-stream.
        let mut child = blocked_child();
        let mut acked = vec![0u8; 3];
        let lines = format!("{FROZEN}done\n");
        let run = watch(Cursor::new(lines), &mut child, Some(1), &mut acked, None).unwrap();
        assert!(run.killed, "{run:?}");
        assert!(!run.crashed_mid_stream(), "{run:?}");
    }

    #[cfg(unix)]
    #[test]
    fn a_claim_held_at_the_kill_and_not_found_at_the_restart_fails_the_demo() {
        // Run 1 acknowledged message 0, then held message 1's claim until the kill.
        let mut acked = vec![0u8; 2];
        let mut child = blocked_child();
        let lines = "orphans 0\nack 0 0 0\nfrozen 1\n";
        let first = watch(Cursor::new(lines), &mut child, Some(1), &mut acked, None).unwrap();
        assert!(first.crashed_mid_stream(), "{first:?}");
        // Run 2 applied message 1 once: the ledger is right either way.
        let once = Verdict {
            once: 2,
            entries: 2,
            ..Verdict::default()
        };
        let second = |orphans: u64| {
            let mut child = exited_child();
            let lines = format!("orphans {orphans}\nack 1 0 0\ndone\n");
            let mut acked = acked.clone();
            watch(Cursor::new(lines), &mut child, None, &mut acked, None).unwrap()
        };
        // The restart found the claim held at the kill.
        assert_eq!(outcome(2, &first, &second(1), &once), Outcome::Verified);
        // It did not: the claim in flight at the crash was lost, and run 2 applied
        // the message at once instead of waiting for its lease.
        assert_eq!(outcome(2, &first, &second(0), &once), Outcome::Failed);
    }

    #[cfg(unix)]
    #[test]
    fn only_acknowledgements_that_waited_for_an_orphans_lease_are_set_apart() {
        let paced = |lines: &str| {
            let mut child = exited_child();
            let mut acked = vec![0u8; 8];
            let mut run = watch(Cursor::new(lines), &mut child, None, &mut acked, None).unwrap();
            assert!(run.opened.is_some(), "{run:?}");
            (run.spawned, run.reaped) = (run.opened, Some(Instant::now()));
            (run.paced_acks(), run.split(run.paced_acks()).head)
        };
        // The orphans' leases outlasted the stream: their messages came last.
        assert_eq!(
            paced("orphans 2\nack 0 0 0\nack 1 0 1\nack 5 1 0 waited\nack 6 2 0 waited\ndone\n"),
            (2, 2)
        );
        // One lease ran out in the middle of the stream (its message was reached
        // before, and waited), the other before the stream reached its message: no
        // acknowledgement at the end waited, whatever the orphan count says.
        assert_eq!(
            paced("orphans 2\nack 0 0 0\nack 5 1 0 waited\nack 1 0 1\nack 6 0 2\ndone\n"),
            (4, 4)
        );
        // Every acknowledgement waited: none is at the run's own pace.
        assert_eq!(
            paced("orphans 2\nack 5 1 0 waited\nack 6 0 0 waited\ndone\n"),
            (0, 0)
        );
    }

    #[cfg(unix)]
    #[test]
    fn no_kill_is_sent_before_a_claim_is_in_flight() {
        // Enough acknowledgements, but no `frozen` line: the consumer ran out of
        // messages and exited on its own, and no crash was shown.
        let mut child = exited_child();
        let mut acked = vec![0u8; 3];
        let run = watch(Cursor::new(LINES), &mut child, Some(1), &mut acked, None).unwrap();
        assert!(!run.killed && !run.crashed_mid_stream(), "{run:?}");
    }

    #[cfg(unix)]
    #[test]
    fn a_finished_consumers_figures_are_read() {
        let mut child = exited_child();
        let mut acked = vec![0u8; 3];
        let lines = "orphans 0\nack 0 0 0\nlatency claim 3 400 900 1200\n\
                     latency complete 1 5000 7000 8000\nmemory 3500 100\ndone\n";
        let run = watch(Cursor::new(lines), &mut child, None, &mut acked, None).unwrap();
        assert_eq!(run.claim_latency, Some([3, 400, 900, 1200]));
        assert_eq!(run.complete_latency, Some([1, 5000, 7000, 8000]));
        assert_eq!(run.memory, Some((3500, 100)));
        // A run killed before its end reports none.
        let mut child = exited_child();
        let run = watch(Cursor::new(LINES), &mut child, None, &mut acked, None).unwrap();
        assert_eq!((run.claim_latency, run.memory), (None, None));
    }

    #[cfg(unix)]
    #[test]
    fn a_consumer_that_fails_on_its_own_is_a_failure() {
        let mut child = Command::new("false").spawn().expect("false starts");
        let mut acked = vec![0u8; 3];
        let err = watch(
            Cursor::new("orphans 0\n"),
            &mut child,
            Some(1),
            &mut acked,
            None,
        )
        .expect_err("a failed consumer");
        assert!(err.contains("the consumer failed"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn an_ack_of_no_message_of_the_stream_is_refused() {
        let mut child = blocked_child();
        let mut acked = vec![0u8; 3];
        let err = watch(
            Cursor::new("ack 7 0 0\n"),
            &mut child,
            None,
            &mut acked,
            None,
        )
        .expect_err("an id out of the stream");
        assert!(err.contains("ack 7"), "{err}");
        // An ack without its worker and sequence number says no entry to look for.
        let mut child = blocked_child();
        let err = watch(Cursor::new("ack 1\n"), &mut child, None, &mut acked, None)
            .expect_err("an ack without its entry");
        assert!(err.contains("ack 1"), "{err}");
    }

    /// A fresh directory under the temporary directory, removed when dropped.
    fn scratch(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("idem-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        Scratch::new(d)
    }

    /// Writes ledger entries as completions do: in the atomic write of a completion
    /// (of a key of its own, so that no claim of a message is involved).
    fn write_entries(engine: &Engine, entries: &[(u32, usize, u64, u64)]) {
        let orders = engine.namespace("orders").unwrap();
        for (n, &(run, worker, seq, id)) in entries.iter().enumerate() {
            let mut changes = idem::StateChanges::new();
            changes.put(
                "ledger",
                &consumer::application_key(run, worker, seq),
                &id.to_le_bytes(),
            );
            match orders.claim(format!("writer-{n}").as_bytes()).unwrap() {
                idem::Claim::Acquired(g) => g.complete_with(None, changes).unwrap(),
                other => panic!("{other:?}"),
            }
        }
    }

    fn open(dir: &Path) -> Engine {
        consumer::open(dir, idem::SyncPolicy::Never, 1000).unwrap()
    }

    /// Runs 1 and 2 with no acknowledged sequence numbers: every worker's entries
    /// are read up to the margin past its last one found.
    fn unacked() -> [(u32, &'static Acked); 2] {
        static NONE: Acked = Acked::new();
        [(1, &NONE), (2, &NONE)]
    }

    #[test]
    fn the_check_reads_past_a_missing_entry_and_catches_a_doubled_one_after_it() {
        let dir = scratch("verify-gap");
        let engine = open(&dir.0);
        // Worker 0 acknowledged seqs 0 to 3; the entry of seq 1 (message 1) is
        // missing, and seq 3 applied message 0 a second time.
        write_entries(&engine, &[(1, 0, 0, 0), (1, 0, 2, 2), (1, 0, 3, 0)]);
        let seqs = Acked::from([(0, BTreeSet::from([0, 1, 2, 3]))]);
        let none = Acked::new();
        let v = verify(&engine, &[(1, &seqs), (2, &none)], 1, &[2, 1, 1]).unwrap();
        assert_eq!(
            (v.once, v.lost, v.doubled, v.unrecorded, v.entries),
            (1, 1, 1, 1, 3),
            "{v:?}"
        );
        // An entry committed but not acknowledged (the kill came between) is read.
        let dir = scratch("verify-unacked");
        let engine = open(&dir.0);
        write_entries(&engine, &[(1, 0, 0, 0), (1, 0, 1, 1)]);
        let seqs = Acked::from([(0, BTreeSet::from([0]))]);
        let v = verify(&engine, &[(1, &seqs), (2, &none)], 1, &[1, 0]).unwrap();
        assert_eq!((v.once, v.unrecorded, v.entries), (2, 0, 2), "{v:?}");
    }

    #[test]
    fn the_consumers_namespace_is_sized_for_its_stream() {
        let dir = scratch("consumer-room");
        let args: Vec<String> = [
            "--dir",
            &dir.0.to_string_lossy(),
            "--messages",
            "5000",
            "--hold",
            "3",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        let o = consumer::Options::parse(&args).unwrap();
        let engine = consumer::open_for(&o).unwrap();
        let orders = engine.namespace("orders").unwrap();
        assert_eq!(orders.config().get_max_keys(), 5_000 + 3 + 1_024);
    }

    #[test]
    fn the_check_catches_two_workers_applying_one_message_at_once() {
        let dir = scratch("verify-concurrent");
        let engine = open(&dir.0);
        // Message 1 applied by workers 0 and 1 of the same run, as two holders of one
        // claim would: a counter read and written back by both would read 1.
        write_entries(
            &engine,
            &[(1, 0, 0, 0), (1, 0, 1, 1), (1, 1, 0, 1), (1, 1, 1, 2)],
        );
        let v = verify(&engine, &unacked(), 2, &[1, 1, 1]).unwrap();
        assert_eq!(
            (v.once, v.lost, v.doubled, v.entries),
            (2, 0, 1, 4),
            "{v:?}"
        );
    }

    #[test]
    fn the_check_catches_a_message_applied_again_after_the_restart() {
        let dir = scratch("verify-again");
        let engine = open(&dir.0);
        write_entries(&engine, &[(1, 0, 0, 0), (1, 0, 1, 1), (2, 0, 0, 1)]);
        let v = verify(&engine, &unacked(), 1, &[1, 1]).unwrap();
        assert_eq!((v.once, v.doubled), (1, 1), "{v:?}");
    }

    #[test]
    fn a_completion_lost_in_the_crash_applied_again_is_once() {
        let dir = scratch("verify-lost");
        let engine = open(&dir.0);
        // Run 1 applied 0 and had 1 in flight at the kill: its completion and its
        // entry were lost together, and run 2 applied it.
        write_entries(&engine, &[(1, 0, 0, 0), (2, 0, 0, 1)]);
        let v = verify(&engine, &unacked(), 1, &[1, 1]).unwrap();
        assert_eq!(
            (v.once, v.lost, v.doubled, v.acked_twice),
            (2, 0, 0, 0),
            "{v:?}"
        );
    }

    #[test]
    fn the_check_catches_two_acknowledgements_and_stray_entries() {
        let dir = scratch("verify-acks");
        let engine = open(&dir.0);
        write_entries(&engine, &[(1, 0, 0, 0), (1, 0, 1, 1), (1, 0, 2, 9)]);
        let v = verify(&engine, &unacked(), 1, &[1, 2, 0]).unwrap();
        assert_eq!(
            (v.once, v.lost, v.acked_twice, v.stray),
            (1, 1, 1, 1),
            "{v:?}"
        );
    }
}
