//! `idem __consumer`: the consumer process of the durable demo and of the crash tests.
//!
//! It consumes a deterministic stream (every message once, some redelivered) with
//! several worker threads. Each message's side effect is a co-commit: the message's
//! counter in the state family `ledger` is incremented in the same atomic write as
//! the completion. After a completion returns `Ok` the process prints `ack <id>`;
//! a duplicate prints `dup <id>`. At start it prints `orphans <n>`, at the end `done`.
//! With `--hold <n>` it first claims the keys `held-<i>` for i < n, prints
//! `held <n>` and keeps those claims in flight until it exits. A parent may kill it
//! with SIGKILL at any moment.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use crossbeam::channel;
use idem::{Claim, ClaimMarkers, Engine, NamespaceConfig, StateChanges, SyncPolicy};

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
    pub(crate) markers: ClaimMarkers,
    pub(crate) journal_slots: usize,
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
            markers: ClaimMarkers::default(),
            journal_slots: idem::DEFAULT_JOURNAL_SLOTS,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--dir" => o.dir = it.next().ok_or("--dir needs a value")?.into(),
                "--messages" => o.messages = number(a, it.next())?,
                "--workers" => o.workers = number(a, it.next())?,
                "--lease-ms" => o.lease_ms = number(a, it.next())?,
                "--commit-delay-us" => o.commit_delay_us = Some(number(a, it.next())?),
                "--hold" => o.hold = number(a, it.next())?,
                "--journal-slots" => o.journal_slots = number(a, it.next())?,
                "--markers" => {
                    o.markers = match it.next().map(String::as_str) {
                        Some("journal") => ClaimMarkers::Journal,
                        Some("immediate") => ClaimMarkers::Immediate,
                        Some("deferred") => ClaimMarkers::Deferred,
                        other => {
                            return Err(format!(
                                "--markers takes journal, immediate or deferred, not {other:?}"
                            ))
                        }
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
        // The durable demo's own bound on its stream.
        if o.messages > 10_000_000 {
            return Err("__consumer: --messages is at most 10,000,000".into());
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
        other => Err(format!(
            "--sync takes always, never or periodic:<ms>, not {other:?}"
        )),
    }
}

/// The key of message `id`, in the benchmark format.
pub(crate) fn key_of(id: u64) -> Vec<u8> {
    format!("ord-{id:016x}").into_bytes()
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
                    .max_keys(4_000_000),
            ),
        )
        .state_family("ledger")
        .durable(dir)
        .build()
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

pub(crate) fn run(o: Options) -> Result<std::process::ExitCode, String> {
    let engine = open_with(
        &o.dir,
        o.sync,
        o.lease_ms,
        o.commit_delay_us.map(Duration::from_micros),
        |c| c.claim_markers(o.markers).journal_slots(o.journal_slots),
    )
    .map_err(|e| e.to_string())?;
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

    let (tx, rx) = channel::unbounded::<u64>();
    let all = stream(o.messages);
    let total = all.len();
    for id in all {
        tx.send(id).map_err(|e| e.to_string())?;
    }
    let handled = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| -> Result<(), String> {
        let mut workers = Vec::new();
        for _ in 0..o.workers {
            let (tx, rx) = (tx.clone(), rx.clone());
            let (orders, engine, say, handled) = (&orders, &engine, &say, &handled);
            workers.push(scope.spawn(move || -> Result<(), String> {
                while handled.load(std::sync::atomic::Ordering::Acquire) < total {
                    let Ok(id) = rx.recv_timeout(Duration::from_millis(20)) else {
                        continue;
                    };
                    let key = key_of(id);
                    match orders.claim(&key).map_err(|e| e.to_string())? {
                        Claim::Acquired(guard) => {
                            let seen = engine
                                .read_state("ledger", &key)
                                .map_err(|e| e.to_string())?
                                .map_or(0, |v| v.first().copied().unwrap_or(0));
                            let mut changes = StateChanges::new();
                            changes.put("ledger", &key, &[seen.saturating_add(1)]);
                            guard
                                .complete_with(None, changes)
                                .map_err(|e| e.to_string())?;
                            say(format!("ack {id}"));
                        }
                        Claim::Duplicate(_) => say(format!("dup {id}")),
                        Claim::InProgress(busy) => {
                            // An orphan of a killed run, or another worker: try later.
                            std::thread::sleep(busy.retry_after().min(Duration::from_millis(20)));
                            tx.send(id).map_err(|e| e.to_string())?;
                            continue;
                        }
                    }
                    handled.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                }
                Ok(())
            }));
        }
        for w in workers {
            w.join().map_err(|_| "a worker panicked".to_string())??;
        }
        Ok(())
    })?;
    say("done".to_string());
    drop(held);
    Ok(std::process::ExitCode::SUCCESS)
}
