//! `idem __consumer`: the consumer process of the durable demo and of the crash tests.
//!
//! It consumes a deterministic stream (every message once, some redelivered) with
//! several worker threads. Each message's side effect is a co-commit: in the same
//! atomic write as the completion, the state family `ledger` gets the message's key
//! set to 1 (it was applied) and one entry for this application alone, keyed by run,
//! worker and the worker's sequence number ([`application_key`]) and holding the
//! message's id. Two applications of one message therefore leave two entries,
//! whatever the claims did: the entries count applications without relying on the
//! exclusivity they check. Each worker numbers its applications from 0 and stops at
//! its first failure.
//!
//! After a completion returns `Ok` the process prints `ack <id> <worker> <seq>` (the
//! application's ledger entry is that of `application_key(run, worker, seq)`, so a
//! reader knows which entries must exist), followed by ` waited` when a claim of
//! that delivery had found the key in progress first (held by a claim that then
//! never completed: after a crash, an orphan whose lease it waited for); a duplicate prints
//! `dup <id>`. At start it prints `orphans <n>`, at the end `done`. With `--hold <n>`
//! it first claims the keys `held-<i>` for i < n, prints `held <n>` and keeps those
//! claims in flight until it exits; with `--extend-held-ms <ms>` as well, it then
//! extends each held claim's lease to end that long from then (`extend_lease`) and
//! prints `extended <n>`. A parent may kill it with SIGKILL at any moment.
//! With `--freeze-after <n>`, a worker that acquires a claim once n messages were
//! acknowledged prints `frozen <id>` and holds that claim, in flight, until the
//! process is killed: while messages remain after n acknowledgements, the stream
//! cannot end before a parent that kills it on a `frozen` line does so (the durable
//! demo's crash is always mid-stream; a stream too short to freeze a claim ends on
//! its own, and the demo says no crash was shown).
//!
//! A failure of any worker stops all of them: the process reports it on stderr and
//! exits with status 1. `--fail-worker-after <n>` makes worker 0 fail on purpose
//! after acknowledging n messages (for the tests of that path).

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crossbeam::channel;
use idem::{Claim, ClaimMarkers, Engine, NamespaceConfig, StateChanges, SyncPolicy};

use super::histogram::Histogram;
use super::number;

/// The consumer's settings.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) dir: PathBuf,
    pub(crate) messages: u64,
    pub(crate) workers: usize,
    pub(crate) sync: SyncPolicy,
    pub(crate) lease_ms: u64,
    /// `EngineBuilder::commit_delay`, in microseconds (`None`: the engine's default,
    /// the adaptive wait; 0: group commit off).
    pub(crate) commit_delay_us: Option<u64>,
    /// Claims held in flight from the start (`held-<i>`), never completed.
    pub(crate) hold: u64,
    /// The lease the held claims are extended to, in ms (0: not extended).
    pub(crate) extend_held_ms: u64,
    pub(crate) markers: ClaimMarkers,
    pub(crate) journal_slots: usize,
    /// The run number in the keys of the application entries ([`application_key`]).
    pub(crate) run: u32,
    /// Worker 0 fails on purpose after acknowledging this many messages.
    pub(crate) fail_worker_after: Option<u64>,
    /// Once this many messages were acknowledged, each worker holds its next
    /// acquired claim until the process is killed.
    pub(crate) freeze_after: Option<u64>,
}

impl Options {
    pub(crate) fn parse(args: &[String]) -> Result<Options, String> {
        let mut o = Options {
            dir: PathBuf::new(),
            messages: 10_000,
            workers: 4,
            sync: SyncPolicy::Always,
            lease_ms: 1000,
            commit_delay_us: None,
            hold: 0,
            extend_held_ms: 0,
            markers: ClaimMarkers::default(),
            journal_slots: idem::DEFAULT_JOURNAL_SLOTS,
            run: 0,
            fail_worker_after: None,
            freeze_after: None,
        };
        let mut it = args.iter();
        let mut given = crate::cli::Given::default();
        while let Some(a) = it.next() {
            given.once("__consumer", a)?;
            match a.as_str() {
                "--dir" => o.dir = it.next().ok_or("--dir needs a value")?.into(),
                "--messages" => o.messages = number(a, it.next())?,
                "--workers" => o.workers = number(a, it.next())?,
                "--lease-ms" => o.lease_ms = number(a, it.next())?,
                "--commit-delay-us" => o.commit_delay_us = Some(number(a, it.next())?),
                "--hold" => o.hold = number(a, it.next())?,
                "--extend-held-ms" => o.extend_held_ms = number(a, it.next())?,
                "--journal-slots" => o.journal_slots = number(a, it.next())?,
                "--run" => o.run = number(a, it.next())?,
                "--fail-worker-after" => o.fail_worker_after = Some(number(a, it.next())?),
                "--freeze-after" => o.freeze_after = Some(number(a, it.next())?),
                "--markers" => {
                    o.markers = match it.next().map(String::as_str) {
                        Some("journal") => ClaimMarkers::Journal,
                        Some("immediate") => ClaimMarkers::Immediate,
                        Some("deferred") => ClaimMarkers::Deferred,
                        Some(other) => {
                            return Err(format!(
                                "--markers takes journal, immediate or deferred, not {other:?}"
                            ))
                        }
                        None => return Err("--markers needs a value".into()),
                    }
                }
                "--sync" => o.sync = parse_sync(it.next().map(String::as_str))?,
                other => return Err(format!("__consumer: unknown option {other:?}")),
            }
        }
        if o.dir.as_os_str().is_empty() {
            return Err("__consumer: --dir is required".into());
        }
        if o.workers == 0 || o.messages == 0 || o.lease_ms == 0 {
            return Err("__consumer: --messages, --workers and --lease-ms must be positive".into());
        }
        // The durable demo's own bounds on its stream and its workers (a thread
        // each: past what the system gives, the spawn would panic).
        if o.messages > 10_000_000 {
            return Err("__consumer: --messages is at most 10,000,000".into());
        }
        if o.workers > 64 {
            return Err("__consumer: --workers is at most 64".into());
        }
        Ok(o)
    }
}

/// `always`, `never`, or `periodic:<ms>`.
pub(crate) fn parse_sync(v: Option<&str>) -> Result<SyncPolicy, String> {
    match v {
        Some("always") => Ok(SyncPolicy::Always),
        Some("never") => Ok(SyncPolicy::Never),
        Some(p) if p.starts_with("periodic:") => p["periodic:".len()..]
            .parse::<u64>()
            .ok()
            .filter(|&ms| ms > 0)
            .map(|ms| SyncPolicy::Periodic(Duration::from_millis(ms)))
            .ok_or_else(|| format!("--sync: bad interval in {p:?}")),
        Some(other) => Err(format!(
            "--sync takes always, never or periodic:<ms>, not {other:?}"
        )),
        None => Err("--sync needs a value: always, never or periodic:<ms>".into()),
    }
}

/// The key of message `id`, in the benchmark format.
pub(crate) fn key_of(id: u64) -> Vec<u8> {
    format!("ord-{id:016x}").into_bytes()
}

/// The key of the ledger entry of one application: the `seq`-th message (from 0)
/// that worker `worker` applied in run `run`. Its value is the message's id, eight
/// bytes little-endian.
pub(crate) fn application_key(run: u32, worker: usize, seq: u64) -> Vec<u8> {
    format!("app-{run}-{worker}-{seq:016x}").into_bytes()
}

/// The demo's engine over `dir`: namespace `orders`, state family `ledger`.
pub(crate) fn open(dir: &std::path::Path, sync: SyncPolicy, lease_ms: u64) -> idem::Result<Engine> {
    open_with(dir, sync, lease_ms, None, |c| c)
}

/// [`open`] with a commit delay (group commit under `SyncPolicy::Always`; `None`: the
/// default) and more namespace settings.
pub(crate) fn open_with(
    dir: &std::path::Path,
    sync: SyncPolicy,
    lease_ms: u64,
    commit_delay: Option<Duration>,
    more: impl FnOnce(NamespaceConfig) -> NamespaceConfig,
) -> idem::Result<Engine> {
    let mut builder = Engine::builder();
    if let Some(d) = commit_delay {
        builder = builder.commit_delay(d);
    }
    builder
        .namespace(
            "orders",
            more(
                NamespaceConfig::new()
                    .ttl(Duration::from_secs(3600))
                    .lease(Duration::from_millis(lease_ms))
                    .sync(sync)
                    // A bound above any stream it is given, not a size: its memory
                    // is made as keys arrive, not 4 M keys' worth at every start.
                    .max_keys(4_000_000)
                    .preallocate(false),
            ),
        )
        .state_family("ledger")
        .durable(dir)
        .build()
}

/// The resident keys a consumer of `messages` messages holding `hold` claims may
/// need: every message's key, the held ones, and a margin.
fn stream_room(messages: u64, hold: u64) -> usize {
    usize::try_from(messages.saturating_add(hold).saturating_add(1024)).unwrap_or(usize::MAX)
}

/// The deterministic stream: every id once, and one in ten redelivered a little
/// later.
pub(crate) fn stream(messages: u64) -> Vec<u64> {
    let mut out = Vec::with_capacity(messages as usize * 11 / 10);
    let mut later = Vec::new();
    for id in 0..messages {
        out.push(id);
        if id % 10 == 3 {
            later.push(id);
        }
        if id % 10 == 9 {
            if let Some(r) = later.pop() {
                out.push(r);
            }
        }
    }
    out.extend(later);
    out
}

/// Sets a flag when dropped: when its worker ends, by returning or by panicking.
struct StopOnExit<'a>(&'a AtomicBool);

impl Drop for StopOnExit<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Runs the consumer: status 0 once every message was handled, 1 (with the reason
/// on stderr) if the engine or a worker failed.
pub(crate) fn run(o: Options) -> Result<std::process::ExitCode, String> {
    match consume(&o) {
        Ok(()) => Ok(std::process::ExitCode::SUCCESS),
        Err(e) => {
            errln!("idem __consumer: {e}");
            Ok(std::process::ExitCode::FAILURE)
        }
    }
}

/// The consumer's engine, its namespace sized for the stream's keys and the held
/// claims: a namespace is sized by `max_keys` (shards, chunk reservoir), and the demo
/// reports bytes per key.
pub(crate) fn open_for(o: &Options) -> idem::Result<Engine> {
    open_with(
        &o.dir,
        o.sync,
        o.lease_ms,
        o.commit_delay_us.map(Duration::from_micros),
        |c| {
            c.claim_markers(o.markers)
                .journal_slots(o.journal_slots)
                .max_keys(stream_room(o.messages, o.hold))
        },
    )
}

fn consume(o: &Options) -> Result<(), String> {
    let engine = open_for(o).map_err(|e| e.to_string())?;
    let orders = engine.namespace("orders").map_err(|e| e.to_string())?;
    let out = Mutex::new(std::io::stdout());
    let say = |line: String| {
        let mut w = out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(w, "{line}");
        let _ = w.flush();
    };
    say(format!("orphans {}", engine.orphans().len()));
    let mut held = Vec::new();
    for i in 0..o.hold {
        match orders
            .claim(format!("held-{i}").as_bytes())
            .map_err(|e| e.to_string())?
        {
            Claim::Acquired(g) => held.push(g),
            other => return Err(format!("held-{i}: expected Acquired, got {other:?}")),
        }
    }
    if o.hold > 0 {
        say(format!("held {}", o.hold));
    }
    if o.extend_held_ms > 0 {
        for g in &mut held {
            g.extend_lease(Duration::from_millis(o.extend_held_ms))
                .map_err(|e| format!("extending a held claim's lease: {e}"))?;
        }
        say(format!("extended {}", held.len()));
    }

    // Each delivery is a message id and whether its claim found the key in
    // progress before (it was put back to wait for the holder).
    let (tx, rx) = channel::unbounded::<(u64, bool)>();
    let all = stream(o.messages);
    let total = all.len();
    for id in all {
        tx.send((id, false)).map_err(|e| e.to_string())?;
    }
    let handled = AtomicUsize::new(0);
    // Acknowledgements printed, for `--freeze-after`.
    let acks = AtomicU64::new(0);
    let (mut claims, mut completions) = (Histogram::new(), Histogram::new());
    // Set when any worker ends: the others stop too instead of waiting for messages
    // that a failed worker will never handle.
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| -> Result<(), String> {
        let mut workers = Vec::new();
        for w in 0..o.workers {
            let (tx, rx) = (tx.clone(), rx.clone());
            let (orders, say, handled, stop, acks) = (&orders, &say, &handled, &stop, &acks);
            workers.push(scope.spawn(move || -> Result<[Histogram; 2], String> {
                let _stop = StopOnExit(stop);
                let fail_after = o.fail_worker_after.filter(|_| w == 0);
                let mut seq = 0u64;
                // Claim and completion latencies, ns.
                let (mut claims, mut completions) = (Histogram::new(), Histogram::new());
                while handled.load(Ordering::Acquire) < total && !stop.load(Ordering::Acquire) {
                    let Ok((id, waited)) = rx.recv_timeout(Duration::from_millis(20)) else {
                        continue;
                    };
                    let key = key_of(id);
                    let t = Instant::now();
                    let claim = orders.claim(&key).map_err(|e| e.to_string())?;
                    claims.record(t.elapsed().as_nanos() as u64);
                    match claim {
                        Claim::Acquired(guard)
                            if o.freeze_after
                                .is_some_and(|n| acks.load(Ordering::Acquire) >= n) =>
                        {
                            say(format!("frozen {id}"));
                            // In flight until the kill (parking can wake spuriously).
                            let _held = guard;
                            loop {
                                std::thread::park();
                            }
                        }
                        Claim::Acquired(guard) => {
                            let mut changes = StateChanges::new();
                            changes.put("ledger", &key, &[1]);
                            changes.put(
                                "ledger",
                                &application_key(o.run, w, seq),
                                &id.to_le_bytes(),
                            );
                            let t = Instant::now();
                            guard
                                .complete_with(None, changes)
                                .map_err(|e| e.to_string())?;
                            completions.record(t.elapsed().as_nanos() as u64);
                            say(if waited {
                                format!("ack {id} {w} {seq} waited")
                            } else {
                                format!("ack {id} {w} {seq}")
                            });
                            seq += 1;
                            acks.fetch_add(1, Ordering::AcqRel);
                            if fail_after.is_some_and(|n| seq >= n) {
                                return Err(format!(
                                    "worker {w} fails on purpose after {seq} messages"
                                ));
                            }
                        }
                        Claim::Duplicate(_) => say(format!("dup {id}")),
                        Claim::InProgress(busy) => {
                            // An orphan of a killed run, or another worker: try later.
                            std::thread::sleep(busy.retry_after().min(Duration::from_millis(20)));
                            tx.send((id, true)).map_err(|e| e.to_string())?;
                            continue;
                        }
                    }
                    handled.fetch_add(1, Ordering::AcqRel);
                }
                Ok([claims, completions])
            }));
        }
        let mut first_error = None;
        for w in workers {
            let r = w
                .join()
                .map_err(|_| "a worker panicked".to_string())
                .and_then(|r| r);
            match r {
                Ok([c, d]) => {
                    claims.merge(&c);
                    completions.merge(&d);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    })?;
    if handled.load(Ordering::Acquire) < total {
        return Err("the workers stopped before the end of the stream".into());
    }
    // The run's figures, for the demo to print: latency lines (count, p50, p99,
    // p99.9 in ns) and the hot tier's bytes and resident keys.
    for (what, h) in [("claim", &claims), ("complete", &completions)] {
        say(format!(
            "latency {what} {} {} {} {}",
            h.count(),
            h.quantile(0.5),
            h.quantile(0.99),
            h.quantile(0.999)
        ));
    }
    let stats = orders.stats();
    say(format!(
        "memory {} {}",
        stats.hot_bytes, stats.resident_keys
    ));
    say("done".to_string());
    drop(held);
    Ok(())
}
