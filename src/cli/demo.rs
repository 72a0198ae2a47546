//! `idem demo`: a simulated at-least-once consumer.
//!
//! A producer publishes a stream of messages in which some are redelivered later and
//! some are delivered twice back to back (two workers may then take the two
//! deliveries at the same time and race for the same key, or one after the other). Worker
//! threads claim each message's key before applying it; some workers "fail" after
//! claiming (they drop the guard, which releases the claim) and the broker redelivers.
//! At the end every message's side-effect counter must be exactly 1.
//!
//! A worker that fails for real (an error from the engine) stops the others and the
//! progress display, and the demo reports the failure with status 1.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel;
use idem::{Claim, Engine, NamespaceConfig};

use super::histogram::Histogram;
use super::{grouped, number};

/// What `idem demo` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    messages: u64,
    workers: usize,
    redeliver_pct: u64,
    fail_pct: u64,
    /// Worker 0 returns an error after handling this many deliveries (a failure of
    /// the demo itself, not a simulated one; for the tests of that path).
    fail_worker_after: Option<u64>,
}

impl Options {
    pub(crate) fn parse(args: &[String]) -> Result<Options, String> {
        let mut o = Options {
            messages: 1_000_000,
            workers: 4,
            redeliver_pct: 10,
            fail_pct: 1,
            fail_worker_after: None,
        };
        let (mut quick, mut messages) = (false, None);
        let mut it = args.iter();
        let mut given = crate::cli::Given::default();
        while let Some(a) = it.next() {
            given.once("demo", long_name(a))?;
            match a.as_str() {
                "--messages" | "-n" => messages = Some(number(a, it.next())?),
                "--workers" | "-w" => o.workers = number(a, it.next())?,
                "--redeliver" => o.redeliver_pct = number(a, it.next())?,
                "--fail" => o.fail_pct = number(a, it.next())?,
                "--quick" => quick = true,
                other => return Err(format!("demo: unknown option {other:?}")),
            }
        }
        o.messages = crate::cli::stream_length(quick.then_some(50_000), messages, o.messages)?;
        if o.messages == 0 || o.messages > 100_000_000 {
            return Err("demo: --messages must be between 1 and 100,000,000".into());
        }
        if o.workers == 0 || o.workers > 256 {
            return Err("demo: --workers must be between 1 and 256".into());
        }
        if o.redeliver_pct > 100 || o.fail_pct > 50 {
            return Err("demo: --redeliver is at most 100 and --fail at most 50 (percent)".into());
        }
        Ok(o)
    }
}

/// The long name of a demo's option: `-n` is `--messages`, `-w` is `--workers`.
pub(crate) fn long_name(flag: &str) -> &str {
    match flag {
        "-n" => "--messages",
        "-w" => "--workers",
        other => other,
    }
}

/// A small deterministic generator (xorshift64*), so runs are repeatable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn percent(&mut self, pct: u64) -> bool {
        self.next() % 100 < pct
    }
}

fn key_of(i: u64) -> [u8; 20] {
    let mut k = [0u8; 20];
    let s = format!("ord-{i:016x}");
    k.copy_from_slice(s.as_bytes());
    k
}

#[derive(Default)]
struct Tally {
    acquired: AtomicU64,
    duplicates: AtomicU64,
    in_progress: AtomicU64,
    failed: AtomicU64,
    acked: AtomicU64,
    /// When the last delivery was acknowledged: the run's end, which the progress
    /// display (polling every 100 ms) and idle workers' waits come after.
    finished: std::sync::Mutex<Option<Instant>>,
    /// Set when a worker ends, by returning or by panicking: the others and the
    /// progress display stop too instead of waiting for deliveries a failed worker
    /// will never acknowledge.
    stop: AtomicBool,
}

impl Tally {
    /// Counts an acknowledged delivery of the `total`, noting the time of the last.
    fn ack(&self, total: u64) {
        if self.acked.fetch_add(1, Ordering::AcqRel) + 1 == total {
            if let Ok(mut end) = self.finished.lock() {
                *end = Some(Instant::now());
            }
        }
    }
}

/// Sets [`Tally::stop`] when dropped: when its worker ends, however it ends.
struct StopOnExit(Arc<Tally>);

impl Drop for StopOnExit {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::Release);
    }
}

/// The messages by how many times their side effect took place.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Effects {
    once: u64,
    /// Never.
    lost: u64,
    /// More than once.
    doubled: u64,
}

impl Effects {
    /// Counts the messages by their side-effect counters, one per message.
    fn count(counters: impl IntoIterator<Item = u32>) -> Effects {
        let mut e = Effects::default();
        for n in counters {
            match n {
                0 => e.lost += 1,
                1 => e.once += 1,
                _ => e.doubled += 1,
            }
        }
        e
    }

    /// Every one of `messages` messages took effect exactly once.
    fn verified(&self, messages: u64) -> bool {
        self.lost == 0 && self.doubled == 0 && self.once == messages
    }
}

/// Runs the demo: status 0 if every message took effect exactly once, 1 if not or if
/// the demo itself failed (the reason on stderr).
pub(crate) fn run(o: Options) -> Result<ExitCode, String> {
    match demo(&o) {
        Ok(code) => Ok(code),
        Err(e) => {
            errln!("idem demo: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn demo(o: &Options) -> Result<ExitCode, String> {
    let engine = Engine::builder()
        .namespace(
            "orders",
            NamespaceConfig::new()
                .ttl(Duration::from_secs(3600))
                .lease(Duration::from_secs(30))
                // The stream's keys are 0..messages: the exact bound, as a plan
                // sizes it (its memory is made at build).
                .max_keys((o.messages as usize).max(1024)),
        )
        .build()
        .map_err(|e| e.to_string())?;
    let orders = engine.namespace("orders").map_err(|e| e.to_string())?;

    // The stream: every message once, in a scrambled order, plus redeliveries. A
    // redelivery is either immediate (a back-to-back duplicate: the next delivery, which
    // another worker may take while the first is in flight) or
    // later in the stream.
    let mut rng = Rng(0x1de3_5eed_0000_0001);
    let mut stream: Vec<u64> =
        Vec::with_capacity((o.messages * (100 + o.redeliver_pct) / 100) as usize);
    let mut later: Vec<u64> = Vec::new();
    let mut concurrent = 0u64;
    let mut order: Vec<u64> = (0..o.messages).collect();
    for n in (1..order.len()).rev() {
        let j = (rng.next() % (n as u64 + 1)) as usize;
        order.swap(n, j);
    }
    for i in order {
        stream.push(i);
        if rng.percent(o.redeliver_pct) {
            if rng.percent(30) {
                stream.push(i);
                concurrent += 1;
            } else {
                later.push(i);
            }
        }
        if !later.is_empty() && rng.percent(o.redeliver_pct) {
            let pick = (rng.next() % later.len() as u64) as usize;
            stream.push(later.swap_remove(pick));
        }
    }
    stream.append(&mut later);
    let deliveries = stream.len() as u64;

    outln!(
        "idem demo: {} messages, {} deliveries ({} redeliveries, {} of them back-to-back duplicates), {} workers; {}% of acquired claims fail before applying (released, delivered again)",
        grouped(o.messages),
        grouped(deliveries),
        grouped(deliveries - o.messages),
        grouped(concurrent),
        o.workers,
        o.fail_pct
    );

    let effects: Arc<Vec<AtomicU32>> =
        Arc::new((0..o.messages).map(|_| AtomicU32::new(0)).collect());
    let tally = Arc::new(Tally::default());
    let (tx, rx) = channel::unbounded::<u64>();
    for m in stream {
        tx.send(m).map_err(|e| e.to_string())?;
    }

    let started = Instant::now();
    let mut handles = Vec::new();
    for w in 0..o.workers {
        let (tx, rx) = (tx.clone(), rx.clone());
        let orders = orders.clone();
        let effects = effects.clone();
        let tally = tally.clone();
        let fail_pct = o.fail_pct;
        let fail_after = o.fail_worker_after.filter(|_| w == 0);
        handles.push(std::thread::spawn(move || -> Result<Histogram, String> {
            let _stop = StopOnExit(tally.clone());
            let mut handled = 0u64;
            let mut rng = Rng(0xabcd_0000_0000_0001 ^ (w as u64 + 1).wrapping_mul(0x9E37_79B9));
            let mut hist = Histogram::new();
            while !tally.stop.load(Ordering::Acquire) {
                if fail_after.is_some_and(|n| handled >= n) {
                    return Err(format!(
                        "worker {w} fails on purpose after {handled} deliveries"
                    ));
                }
                let m = match rx.recv_timeout(Duration::from_millis(20)) {
                    Ok(m) => m,
                    Err(_) if tally.acked.load(Ordering::Acquire) >= deliveries => break,
                    Err(_) => continue,
                };
                handled += 1;
                let key = key_of(m);
                let t = Instant::now();
                let claim = orders.claim(&key).map_err(|e| e.to_string())?;
                hist.record(t.elapsed().as_nanos() as u64);
                match claim {
                    Claim::Acquired(guard) => {
                        tally.acquired.fetch_add(1, Ordering::Relaxed);
                        if rng.percent(fail_pct) {
                            // The worker dies before finishing: the guard is dropped,
                            // the claim released, and the broker redelivers.
                            drop(guard);
                            tally.failed.fetch_add(1, Ordering::Relaxed);
                            tx.send(m).map_err(|e| e.to_string())?;
                            continue;
                        }
                        effects[m as usize].fetch_add(1, Ordering::Relaxed);
                        guard.complete().map_err(|e| e.to_string())?;
                        tally.ack(deliveries);
                    }
                    Claim::Duplicate(_) => {
                        tally.duplicates.fetch_add(1, Ordering::Relaxed);
                        tally.ack(deliveries);
                    }
                    Claim::InProgress(_) => {
                        // Someone else holds it: nack, the broker redelivers later.
                        tally.in_progress.fetch_add(1, Ordering::Relaxed);
                        tx.send(m).map_err(|e| e.to_string())?;
                    }
                }
            }
            Ok(hist)
        }));
    }
    drop(tx);

    progress(&tally, deliveries, started);
    let mut hist = Histogram::new();
    let mut first_error = None;
    for h in handles {
        match h
            .join()
            .map_err(|_| "a worker thread panicked".to_string())
            .and_then(|r| r)
        {
            Ok(h) => hist.merge(&h),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    let ended = tally.finished.lock().ok().and_then(|end| *end);
    let elapsed = ended.map_or_else(|| started.elapsed(), |end| end - started);

    let effects = Effects::count(effects.iter().map(|e| e.load(Ordering::Relaxed)));
    let stats = engine.stats();
    let claims = hist.count();
    outln!(
        "answers:    {} acquired ({} by workers that then failed), {} duplicate, {} in progress (another worker held the claim: nacked, redelivered)",
        grouped(tally.acquired.load(Ordering::Relaxed)),
        grouped(tally.failed.load(Ordering::Relaxed)),
        grouped(tally.duplicates.load(Ordering::Relaxed)),
        grouped(tally.in_progress.load(Ordering::Relaxed)),
    );
    outln!(
        "throughput: {} claims in {:.2} s = {} claims/s ({} workers, including the simulated side effects)",
        grouped(claims),
        elapsed.as_secs_f64(),
        grouped((claims as f64 / elapsed.as_secs_f64()) as u64),
        o.workers
    );
    outln!(
        "latency:    claim p50 {} ns, p99 {} ns, p99.9 {} ns",
        grouped(hist.quantile(0.5)),
        grouped(hist.quantile(0.99)),
        grouped(hist.quantile(0.999))
    );
    outln!(
        "memory:     {} resident keys, {:.1} hot-tier bytes per key",
        grouped(stats.resident_keys),
        stats.bytes_per_key()
    );
    if effects.verified(o.messages) {
        outln!(
            "verified:   every one of {} messages took effect exactly once",
            grouped(o.messages)
        );
        Ok(ExitCode::SUCCESS)
    } else {
        outln!(
            "FAILED:     {} exactly once, {} never applied, {} applied more than once",
            grouped(effects.once),
            grouped(effects.lost),
            grouped(effects.doubled)
        );
        Ok(ExitCode::FAILURE)
    }
}

/// Draws a progress bar on a terminal, or a line per quarter elsewhere, until done or
/// until a worker stopped early.
fn progress(tally: &Tally, total: u64, started: Instant) {
    let mut bar = Progress::new(total, "deliveries", started);
    loop {
        let done = tally.acked.load(Ordering::Acquire).min(total);
        bar.show(done);
        if done >= total || tally.stop.load(Ordering::Acquire) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bar.end();
}

/// The demos' progress display on stderr: a bar redrawn in place on a terminal, a
/// line per quarter elsewhere.
pub(crate) struct Progress {
    total: u64,
    what: &'static str,
    started: Instant,
    tty: bool,
    next_quarter: u64,
}

impl Progress {
    /// Progress towards `total` acknowledged `what`, timed from `started`.
    pub(crate) fn new(total: u64, what: &'static str, started: Instant) -> Self {
        Progress {
            total,
            what,
            started,
            tty: std::io::stderr().is_terminal(),
            next_quarter: 1,
        }
    }

    /// Shows `done` of the total.
    pub(crate) fn show(&mut self, done: u64) {
        let done = done.min(self.total);
        let frac = done as f64 / self.total.max(1) as f64;
        if self.tty {
            let width = 40;
            let filled = (frac * width as f64) as usize;
            err!(
                "\r[{}{}] {:5.1}% {}/{} {}  {:.1}s",
                "#".repeat(filled),
                ".".repeat(width - filled),
                frac * 100.0,
                grouped(done),
                grouped(self.total),
                self.what,
                self.started.elapsed().as_secs_f64()
            );
            let _ = std::io::stderr().flush();
        } else {
            while self.next_quarter <= 4 && frac >= self.next_quarter as f64 / 4.0 {
                errln!(
                    "progress: {}% of {} acknowledged",
                    self.next_quarter * 25,
                    self.what
                );
                self.next_quarter += 1;
            }
        }
    }

    /// Ends the display (the bar's line on a terminal).
    pub(crate) fn end(self) {
        if self.tty {
            errln!();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(fail_worker_after: Option<u64>) -> Options {
        Options {
            messages: 20_000,
            workers: 4,
            redeliver_pct: 10,
            fail_pct: 1,
            fail_worker_after,
        }
    }

    /// Runs the demo on a thread and waits for its end, at most `limit`: a demo that
    /// hangs fails the test instead of hanging it.
    /// The exit code is compared by its `Debug` form.
    fn run_within(o: Options, limit: Duration) -> String {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(run(o).map(|code| format!("{code:?}")));
        });
        rx.recv_timeout(limit)
            .expect("the demo ends instead of waiting for the failed worker")
            .expect("a failure of the demo is a status, not a usage error")
    }

    #[test]
    fn a_lost_or_doubled_effect_fails_the_verdict() {
        let e = Effects::count([1, 0, 1, 2, 1]);
        assert_eq!(
            e,
            Effects {
                once: 3,
                lost: 1,
                doubled: 1
            }
        );
        assert!(!e.verified(5));
        assert!(!Effects::count([1, 1, 0]).verified(3));
        assert!(!Effects::count([1, 3, 1]).verified(3));
        assert!(Effects::count([1, 1, 1]).verified(3));
        // A counter per message: fewer counters than messages is no verdict.
        assert!(!Effects::count([1, 1]).verified(3));
    }

    #[test]
    fn a_failing_worker_ends_the_demo_with_status_1() {
        let code = run_within(options(Some(100)), Duration::from_secs(120));
        assert_eq!(code, format!("{:?}", ExitCode::FAILURE));
    }

    #[test]
    fn the_demo_without_a_failure_succeeds() {
        let code = run_within(options(None), Duration::from_secs(120));
        assert_eq!(code, format!("{:?}", ExitCode::SUCCESS));
    }
}
