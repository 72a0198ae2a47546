//! Memory under long-running churn, on a manual clock: a namespace that claims,
//! completes (with and without results and payloads), releases, forgets, batches and
//! lets leases run out for many TTL periods settles at what it holds after its first
//! periods; one that grows and shrinks again and again holds no more than its
//! largest burst left; `Stats::hot_bytes` keeps telling what the allocator holds for
//! the hot tier; and what the documents say stays in memory (claim markers of claims
//! given up without an end, dead letters) costs what they say.
//!
//! Measured by this binary's allocator, which counts the heap bytes the whole
//! process holds: the tests take turns (`one_at_a_time`), and RocksDB's own (C++)
//! memory is not counted.

#![cfg(not(idem_loom))]

mod util;

use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use idem::{Claim, ManualClock, Namespace, NamespaceConfig};
use util::*;

static LIVE: AtomicIsize = AtomicIsize::new(0);

fn count(delta: isize) {
    LIVE.fetch_add(delta, Ordering::Relaxed);
}

#[global_allocator]
static ALLOCATOR: util::Counting = util::Counting(count);

/// Heap bytes the process holds now.
fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// The tests of this file one at a time: the count is the whole process's.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a cycle does besides claiming and completing new keys.
#[derive(Clone, Copy)]
struct Mix {
    payloads: bool,
    results: bool,
    /// Guards held past their lease, then dropped (released as lost).
    lapse: bool,
    release: bool,
    forget: bool,
    batch: bool,
}

const ALL: Mix = Mix {
    payloads: true,
    results: true,
    lapse: true,
    release: true,
    forget: true,
    batch: true,
};

const PLAIN: Mix = Mix {
    payloads: false,
    results: false,
    lapse: false,
    release: false,
    forget: false,
    batch: false,
};

/// One cycle: `n` new keys from `next` (a tenth of them in batches of 16), some
/// redeliveries of recent keys; guards whose lease is to run out go to `lapsed`.
fn cycle(
    ns: &Namespace,
    next: &mut u64,
    n: u64,
    mix: Mix,
    rng: &mut XorShift,
    lapsed: &mut Vec<idem::ClaimGuard>,
) {
    let mut i = 0;
    while i < n {
        let k = *next;
        if mix.batch && rng.below(10) == 0 {
            let keys: Vec<Vec<u8>> = (0..16).map(|j| key(k + j).into_bytes()).collect();
            let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            let guards: Vec<_> = ns
                .claim_batch(&refs)
                .unwrap()
                .into_iter()
                .map(|c| match c {
                    Claim::Acquired(g) => g,
                    other => panic!("{other:?}"),
                })
                .collect();
            let outcomes = if mix.results {
                let results: Vec<Vec<u8>> = (0..guards.len())
                    .map(|j| vec![7u8; (j * 13) % 300])
                    .collect();
                let pairs = guards.into_iter().zip(results.iter());
                let pairs: Vec<_> = pairs.map(|(g, r)| (g, &r[..])).collect();
                ns.complete_batch_with_results(pairs).unwrap()
            } else {
                ns.complete_batch(guards).unwrap()
            };
            assert!(outcomes.iter().all(Result::is_ok));
            *next += 16;
            i += 16;
            continue;
        }
        let kb = key(k).into_bytes();
        *next += 1;
        i += 1;
        let claim = if mix.payloads && rng.below(3) == 0 {
            let len = 1 + rng.below(40) as usize;
            ns.claim_with_payload(&kb, &rng.bytes(len))
        } else {
            ns.claim(&kb)
        };
        let g = match claim.unwrap() {
            Claim::Acquired(g) => g,
            other => panic!("{other:?}"),
        };
        match rng.below(20) {
            0 if mix.lapse => lapsed.push(g),
            1 if mix.release => g.release().unwrap(),
            2 if mix.forget => {
                g.complete().unwrap();
                ns.forget(&kb).unwrap();
            }
            3..=8 if mix.results => {
                let len = rng.below(500) as usize;
                g.complete_with_result(&vec![1u8; len]).unwrap()
            }
            _ => g.complete().unwrap(),
        }
        if rng.below(4) == 0 && *next > 100 {
            let old = key(*next - 1 - rng.below(100)).into_bytes();
            if let Claim::Acquired(g) = ns.claim(&old).unwrap() {
                g.complete().unwrap();
            }
        }
    }
}

/// What a run saw after each cycle's maintenance pass.
#[derive(Default)]
struct Run {
    /// Heap bytes the process holds, less what it held before the engine was built.
    live: Vec<isize>,
    /// `hot_bytes + retired_bytes`.
    counted: Vec<u64>,
    /// `prefilter_bytes`.
    prefilter: Vec<u64>,
    resident: Vec<u64>,
}

impl Run {
    fn note(&mut self, base: isize, s: &idem::Stats) {
        self.live.push(live() - base);
        self.counted.push(s.hot_bytes + s.retired_bytes);
        self.prefilter.push(s.prefilter_bytes);
        self.resident.push(s.resident_keys);
    }

    /// Live bytes from cycle `from` on stay within `slack` (a share) of what they
    /// were at `from`, and so do the hot tier's counted bytes.
    fn settled(&self, what: &str, from: usize, slack: f64) {
        for (name, series) in [
            (
                "live",
                self.live.iter().map(|&b| b as f64).collect::<Vec<_>>(),
            ),
            ("counted", self.counted.iter().map(|&b| b as f64).collect()),
        ] {
            let at = series[from];
            let most = series[from..].iter().copied().fold(0.0, f64::max);
            assert!(
                most <= at * (1.0 + slack),
                "{what}: {name} bytes went from {at} at cycle {from} up to {most}"
            );
        }
    }

    /// At every cycle the hot tier's counted bytes (and `extra`, what is not part of
    /// them) are the allocator's live bytes, within 1 % (the engine's fixed parts).
    fn counted_truly(&self, what: &str, extra: impl Fn(usize) -> u64) {
        for (c, (&l, &h)) in self.live.iter().zip(&self.counted).enumerate() {
            let counted = (h + extra(c)) as f64;
            assert!(
                (l as f64 - counted).abs() <= l as f64 * 0.01,
                "{what}, cycle {c}: the allocator holds {l} B, stats count {counted} B"
            );
        }
    }
}

/// Runs `cycles` cycles of `per_cycle` new keys, the clock moving `step` after each,
/// on a memory-only engine.
fn run(cfg: NamespaceConfig, per_cycle: u64, step: Duration, cycles: usize, mix: Mix) -> Run {
    let base = live();
    let clock = ManualClock::new(T0);
    let (engine, ns) = engine_on(cfg, clock.clone());
    let (mut rng, mut next, mut lapsed, mut run) =
        (XorShift::new(7), 0, Vec::new(), Run::default());
    for _ in 0..cycles {
        let mut lapsing = Vec::new();
        cycle(&ns, &mut next, per_cycle, mix, &mut rng, &mut lapsing);
        clock.advance(step);
        // Last cycle's lapsed guards, their lease (2 s) over: dropped, refused as lost.
        lapsed.clear();
        lapsed = lapsing;
        engine.run_maintenance();
        run.note(base, &engine.stats());
    }
    run
}

/// 120 TTL-tenths of steady churn of every kind (results of 0 to 499 bytes,
/// payloads, releases, forgets, batches, leases run out), with fixed windows and
/// sliding ones: from the tenth cycle on the heap does not grow, and `hot_bytes` is
/// what the allocator holds all along.
#[test]
fn steady_churn_of_every_kind_settles_and_is_counted() {
    let _serial = one_at_a_time();
    for sliding in [false, true] {
        let cfg = small()
            .ttl(secs(10))
            .lease(secs(2))
            .max_keys(40_000)
            .extend_on_duplicate(sliding);
        let run = run(cfg, 2_000, secs(1), 120, ALL);
        let what = format!("sliding {sliding}");
        assert!(run.resident[119] > 15_000, "{what}: {}", run.resident[119]);
        run.settled(&what, 10, 0.02);
        run.counted_truly(&what, |_| 0);
    }
}

/// A namespace planned for 200,000 keys (20,000 a second for 10 s) under that churn
/// for 40 TTLs, its memory made at build (the default) or as keys arrive: it holds
/// what it holds filled once (the plan's figure and its small-namespace allowance;
/// tests/sizing.rs holds a filled one to it), and no more as the churn goes on.
#[test]
fn a_planned_namespace_under_churn_holds_what_it_holds_filled() {
    let _serial = one_at_a_time();
    let plan = idem::Sizing::new(20_000.0, secs(10)).plan().unwrap();
    // 200,000 keys sit below SMALL_NAMESPACE_KEYS, where a shard's fixed parts
    // weigh: within 15 % of the plan as keys arrive, 20 % made at build (a slab
    // chunk more for each of its shards' lanes, the room a lane's last, partly
    // used chunk leaves).
    for (preallocate, allowance) in [(true, 1.20), (false, 1.15)] {
        let cfg = NamespaceConfig::new()
            .ttl(plan.ttl)
            .max_keys(plan.resident_keys as usize)
            .preallocate(preallocate);
        let what = format!("planned, preallocate {preallocate}");
        let run = run(cfg, 20_000, secs(1), 40, PLAIN);
        run.settled(&what, 10, 0.01);
        run.counted_truly(&what, |_| 0);
        let most = *run.live.iter().max().unwrap() as f64;
        assert!(
            most <= plan.hot_bytes as f64 * allowance,
            "{what}: {most} B held, {} B planned",
            plan.hot_bytes
        );
    }
}

/// Bursts of 20,000 to 140,000 keys, each followed by three quiet TTLs, 24 times:
/// the hot tier keeps the slab chunks, index arrays and column blocks its largest
/// burst made (`max_keys` bounds them; chunks are never freed while the shard lives)
/// and hands nothing more out as the bursts repeat; what it holds is counted.
#[test]
fn repeated_bursts_hold_no_more_than_the_largest_left() {
    let _serial = one_at_a_time();
    let base = live();
    let clock = ManualClock::new(T0);
    let (engine, ns) = engine_on(
        small().ttl(secs(10)).lease(secs(2)).max_keys(200_000),
        clock.clone(),
    );
    let (mut rng, mut next, mut run) = (XorShift::new(9), 0, Run::default());
    let mut peak = 0;
    for round in 0..24 {
        let mut lapsed = Vec::new();
        cycle(
            &ns,
            &mut next,
            20_000 + (round % 4) * 40_000,
            ALL,
            &mut rng,
            &mut lapsed,
        );
        engine.run_maintenance();
        peak = peak.max(live() - base);
        for _ in 0..30 {
            clock.advance(secs(1));
            drop(std::mem::take(&mut lapsed));
            engine.run_maintenance();
        }
        run.note(base, &engine.stats());
        assert_eq!(run.resident[round as usize], 0);
    }
    // The first four rounds reached the largest burst; after them the quiet
    // figure moves only as a few more column blocks are made (within 5 %).
    run.settled("bursts", 3, 0.05);
    run.counted_truly("bursts", |_| 0);
    assert!(
        run.live[23] < peak / 2,
        "{} B held quiet, {peak} B at the peak",
        run.live[23]
    );
}

#[cfg(feature = "durable")]
mod durable {
    use super::*;
    use idem::{ClaimMarkers, Engine, SyncPolicy};

    /// Every claim-marker mode.
    const MARKER_MODES: [ClaimMarkers; 3] = [
        ClaimMarkers::Journal,
        ClaimMarkers::Immediate,
        ClaimMarkers::Deferred,
    ];

    /// A durable engine on `dir` with namespace "ns" of `cfg`.
    fn open(dir: &TempDir, clock: &ManualClock, cfg: NamespaceConfig) -> (Engine, Namespace) {
        durable_on(dir.path(), cfg.sync(SyncPolicy::Never), clock)
    }

    /// 100 cycles of 5 s (8 TTLs, 4 retentions) of churn of every kind through a hot
    /// tier of half what a TTL brings (evictions, and read-backs of older keys),
    /// in each claim-marker mode, fixed windows and sliding ones: the hot tier's
    /// bytes settle and are counted, the prefilter's generations stay bounded (its
    /// span, a quarter of the retention, and the minute each is kept past its end),
    /// and the heap beside the prefilter settles too.
    #[test]
    fn durable_churn_settles_with_evictions_and_read_backs() {
        let _serial = one_at_a_time();
        for markers in MARKER_MODES {
            for sliding in [false, true] {
                let what = format!("{markers:?}, sliding {sliding}");
                let dir = TempDir::new();
                let clock = ManualClock::new(T0);
                let base = live();
                let cfg = small()
                    .ttl(secs(60))
                    .retention(secs(120))
                    .lease(secs(2))
                    .max_keys(3_000)
                    .claim_markers(markers)
                    .extend_on_duplicate(sliding);
                let (engine, ns) = open(&dir, &clock, cfg);
                let (mut rng, mut next, mut lapsed) = (XorShift::new(11), 0, Vec::new());
                let mut run = Run::default();
                let mut generations = 0;
                for _ in 0..100 {
                    let mut lapsing = Vec::new();
                    cycle(&ns, &mut next, 500, ALL, &mut rng, &mut lapsing);
                    for _ in 0..50 {
                        let k = key(rng.below(next)).into_bytes();
                        if let Claim::Acquired(g) = ns.claim(&k).unwrap() {
                            g.complete().unwrap()
                        }
                    }
                    clock.advance(secs(5));
                    lapsed.clear();
                    lapsed = lapsing;
                    engine.run_maintenance();
                    let s = engine.stats();
                    generations = generations.max(s.prefilter_generations);
                    run.note(base, &s);
                }
                let s = engine.stats();
                assert!(
                    s.evictions > 10_000 && s.durable_reads > 1_000,
                    "{what}: {s:?}"
                );
                // Live at most: 4 spans of retention, the one under way, the two of
                // the minute kept, and a TTL more with sliding windows.
                assert!(generations <= 10, "{what}: {generations} generations");
                // The hot tier is full by cycle 12 (its TTL); the prefilter grows
                // until cycle 60 (retention and a minute), so it is taken out.
                let beside: Vec<isize> = (0..100)
                    .map(|c| run.live[c] - run.prefilter[c] as isize)
                    .collect();
                let hot = Run {
                    live: beside,
                    counted: run.counted.clone(),
                    ..Run::default()
                };
                hot.settled(&what, 12, 0.02);
                let prefilter = run.prefilter.clone();
                // Outside `hot_bytes` and the prefilter: the store's handles and
                // buffers on the Rust side, and with `Journal` markers the journal's
                // list of free slots (4 bytes each, 128 KiB by default).
                let gap = (12..100)
                    .map(|c| run.live[c] - (run.counted[c] + prefilter[c]) as isize)
                    .max()
                    .unwrap();
                assert!(gap < 256 << 10, "{what}: {gap} B outside the stats");
            }
        }
    }

    /// A claim given up without an end (here a completion refused as
    /// `ResultTooLarge`) keeps its marker until the next open reports it with
    /// `Immediate` markers, which keep no memory for it. With `Journal` markers the
    /// maintenance pass after the lease's end frees its slot (the sweep), so the
    /// journal never fills with them and nothing goes to RocksDB; with `Deferred`
    /// ones it deletes the flushed marker, and its note in memory
    /// (`markers_on_disk`). A claim whose guard outlived its lease and was then
    /// dropped keeps nothing, in every mode.
    #[test]
    fn claims_given_up_keep_their_markers_as_documented() {
        let _serial = one_at_a_time();
        for markers in MARKER_MODES {
            for refused in [true, false] {
                let what = format!("{markers:?}, refused {refused}");
                let dir = TempDir::new();
                let clock = ManualClock::new(T0);
                let cfg = small()
                    .ttl(secs(10))
                    .lease(secs(2))
                    .max_keys(10_000)
                    .max_result_len(10)
                    .journal_slots(1024)
                    .claim_markers(markers);
                let (engine, ns) = open(&dir, &clock, cfg);
                let mut next = 0u64;
                let mut at_10 = 0;
                for c in 0..60 {
                    let mut held = Vec::new();
                    for _ in 0..200 {
                        let g = acquire(&ns, key(next).as_bytes());
                        next += 1;
                        if refused {
                            assert!(g.complete_with_result(&[0; 11]).is_err());
                        } else {
                            held.push(g);
                        }
                    }
                    clock.advance(secs(3));
                    engine.run_maintenance();
                    drop(held);
                    engine.run_maintenance();
                    if c == 10 {
                        at_10 = live();
                    }
                }
                let grew = live() - at_10;
                let s = engine.stats();
                let given_up = 49 * 200;
                let left = (s.journal_markers, s.markers_on_disk, s.journal_overflows);
                assert_eq!(left, (0, 0, 0), "{what}");
                assert!(
                    grew < 16 << 10,
                    "{what}: grew {grew} B, {given_up} given up"
                );
            }
        }
    }

    /// A claim marker in RocksDB that a `Deferred` namespace notes in memory (here
    /// flushed markers of claims given up without an end, before their lease ends)
    /// costs about 35 to 75 bytes (`markers_on_disk`), as README.md says; the sweep
    /// after their lease's end deletes them and gives that memory back.
    #[test]
    fn markers_noted_on_disk_cost_what_the_readme_says() {
        let _serial = one_at_a_time();
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        let cfg = small()
            .lease(secs(60))
            .max_keys(200_000)
            .max_result_len(10)
            .claim_markers(ClaimMarkers::Deferred);
        let (engine, ns) = open(&dir, &clock, cfg);
        for n in [5_000u64, 9_000, 20_000] {
            for i in 0..n {
                let g = acquire(&ns, key(i).as_bytes());
                assert!(g.complete_with_result(&[0; 11]).is_err());
            }
            // The markers wait in memory; the flush notes them on disk.
            let waiting = live();
            engine.run_maintenance();
            let noted = live() - waiting;
            let per = noted as f64 / n as f64;
            assert_eq!(engine.stats().markers_on_disk, n, "{n}");
            assert!((30.0..=80.0).contains(&per), "{n}: {per:.1} B a marker");
            clock.advance(secs(61));
            let before = live();
            engine.run_maintenance();
            assert_eq!(engine.stats().markers_on_disk, 0, "{n}: swept");
            let freed = before - live();
            assert!(
                freed >= noted * 9 / 10,
                "{n}: {freed} B of {noted} given back"
            );
            // The next round claims the same keys again.
            clock.advance(secs(1));
        }
    }

    /// Dead letters are never deleted: a replayed or archived one stays in the
    /// store, with its history. An engine's store keeps about 80 bytes of memory a
    /// letter (its index entry, no payload); a memory-only store keeps every letter
    /// whole. (README.md, "Memory".)
    #[test]
    fn archived_dead_letters_cost_what_the_readme_says() {
        let _serial = one_at_a_time();
        for durable in [false, true] {
            let dir = TempDir::new();
            let clock = ManualClock::new(T0);
            let mut b = Engine::builder()
                .namespace("ns", small().sync(SyncPolicy::Never))
                .clock(clock.clone())
                .maintenance_interval(None);
            if durable {
                b = b.durable(dir.path());
            }
            let engine = b.build().unwrap();
            let dlq = engine.dlq("ns").unwrap();
            let base = live();
            const LETTERS: isize = 5_000;
            for i in 0..LETTERS as u64 {
                let id = dlq
                    .quarantine(key(i).as_bytes(), &[5u8; 1000], "outage:x")
                    .unwrap();
                dlq.archive(id, "done").unwrap();
                if i % 1_000 == 999 {
                    clock.advance(secs(60));
                    engine.run_maintenance();
                }
            }
            let per = (live() - base) / LETTERS;
            assert_eq!(dlq.health().depth, 0);
            if durable {
                assert!(per <= 100, "{per} B a letter");
            } else {
                assert!(per >= 1000, "{per} B a letter");
            }
        }
    }

    /// A durable namespace planned for 100 keys a second, a TTL of a minute and a
    /// retention of ten, under that load for 25 minutes (2.5 retentions): the
    /// prefilter's bytes average what the plan says, and peak, for the minute after
    /// each quarter of the retention, at one filter more (`Plan::prefilter_bytes`,
    /// the plan's notes).
    #[test]
    fn the_prefilter_holds_its_planned_average_and_peaks_one_filter_above() {
        let _serial = one_at_a_time();
        let plan = idem::Sizing::new(100.0, secs(60))
            .retention(secs(600))
            .plan()
            .unwrap();
        let dir = TempDir::new();
        let clock = ManualClock::new(T0);
        let cfg = NamespaceConfig::new()
            .ttl(plan.ttl)
            .retention(plan.retention)
            .max_keys(plan.resident_keys as usize);
        let (engine, ns) = open(&dir, &clock, cfg);
        let mut next = 0;
        let mut bytes = Vec::new();
        for _ in 0..300 {
            for _ in 0..500 {
                acquire(&ns, key(next).as_bytes()).complete().unwrap();
                next += 1;
            }
            clock.advance(secs(5));
            engine.run_maintenance();
            bytes.push(engine.stats().prefilter_bytes as f64);
        }
        // From the first full retention and a minute on (cycle 132), five whole
        // spans of 150 s.
        let steady = &bytes[150..300];
        let average = steady.iter().sum::<f64>() / steady.len() as f64;
        let peak = steady.iter().copied().fold(0.0, f64::max);
        let planned = plan.prefilter_bytes as f64;
        assert!(
            (average - planned).abs() <= planned * 0.03,
            "{average} B on average, {planned} B planned"
        );
        // One filter is a quarter of the retained keys' at 5.4 filters' worth of
        // bits a key: 1/5.4 of the plan.
        let filter = planned / 5.4;
        assert!(
            peak > planned && peak <= planned + filter * 1.01,
            "{peak} B at the peak, {planned} B planned, a filter {filter} B"
        );
    }
}
