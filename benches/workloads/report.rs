//! The harness's report: the markdown tables of a run's samples, and the targets
//! checked against their medians. Kept apart from the measuring so that its tests
//! (`tests/harness_report.rs`) can run it on samples made up for the purpose.

use std::fmt::Write as _;

/// The cells a run measured: its sizes, thread counts and peers, in table order.
pub struct Grid<'a> {
    /// Key counts, in the order given.
    pub ns: &'a [usize],
    /// Thread counts, in the order given.
    pub threads: &'a [usize],
    /// Peers, in the order given.
    pub peers: &'a [String],
}

/// How a peer is named in the tables, for workload `w`.
pub fn peer_label(peer: &str, w: Workload) -> &'static str {
    match peer {
        "idem" if w == Workload::W1 => "idem (claim + complete)",
        "idem" => "idem",
        "idem-r64" if w == Workload::W1 => "idem (claim + complete, 64-byte result)",
        "idem-r64" => "idem (keys with a 64-byte result)",
        "idem-grow" if w == Workload::W1 => {
            "idem, memory made as keys arrive (claim + complete; `preallocate(false)`)"
        }
        "idem-grow" => "idem, memory made as keys arrive (`preallocate(false)`)",
        "idem-claim" if w == Workload::W1 => "idem, claims alone (guards kept, not completed)",
        "idem-claim" => "idem, claims alone (answered in progress)",
        "idem-aff" if w == Workload::W1 => {
            "idem, keys routed to the threads by `Namespace::router` (claim + complete; reference)"
        }
        "idem-aff" => "idem, keys routed to the threads by `Namespace::router` (reference)",
        "idem-b64" if w == Workload::W1 => "idem, batches of 64 (`claim_batch` + `complete_batch`)",
        "idem-b64" => "idem, batches of 64 (`claim_batch`)",
        "floor" => "floor: `Mutex<hashbrown::HashMap<[u8; 16], u32>>`",
        "dashmap" => "`DashMap<u128, u32>` entry",
        "moka" => "`moka::sync::Cache<String, ()>` TTL",
        "redis" => "Redis `SET NX EX`, one at a time",
        "redis-p64" => "Redis `SET NX EX`, pipelined 64",
        "jetstream" => "NATS JetStream dedup window (`Nats-Msg-Id`), one at a time",
        "jetstream-p64" => "NATS JetStream dedup window (`Nats-Msg-Id`), pipelined 64",
        "machine" if w == Workload::W1 => {
            "reference: one random store a key into an array, no table (the machine's scaling)"
        }
        "machine" => {
            "reference: one random load a key from an array, no table (the machine's scaling)"
        }
        "cas" if w == Workload::W1 => {
            "reference: one table, bucket taken by CAS, slab and wheel per thread (claim + complete)"
        }
        "cas" => "reference: one table, bucket taken by CAS, slab and wheel per thread",
        "cas12" if w == Workload::W1 => {
            "reference: idem's 12-slot buckets, each its own lock, slab and wheel per thread (claim + complete)"
        }
        "cas12" => "reference: idem's 12-slot buckets, read without lock, slab and wheel per thread",
        "cas12m" if w == Workload::W1 => {
            "reference: cas12 with a lane lock, a 1 ms maintenance pass, lazy completion (claim + complete)"
        }
        "cas12m" => "reference: cas12 with a lane lock, a 1 ms maintenance pass, lazy completion",
        _ => "?",
    }
}

/// A timed phase of a child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// N new keys claimed (and, for idem, completed).
    W1,
    /// The same N keys claimed again, in W1's order.
    W2,
    /// W2 again, in a shuffled order (after W2 in W1's order, in the same child).
    W2s,
    /// W2 in W1's order once more by one thread, in a child of more threads: over the
    /// table their fill made. Its samples carry the child's thread count.
    W2One,
}

impl Workload {
    /// The workload's name on a child's command line and in notes.
    pub fn arg(self) -> &'static str {
        match self {
            Workload::W1 => "w1",
            Workload::W2 => "w2",
            Workload::W2s => "w2 shuffled",
            Workload::W2One => "w2 by one thread over a two-thread fill",
        }
    }
}

/// One child's result for one workload.
pub struct Sample {
    /// The peer measured.
    pub peer: String,
    /// The workload timed.
    pub w: Workload,
    /// Keys.
    pub n: usize,
    /// Threads.
    pub threads: usize,
    /// Claims per second.
    pub rate: f64,
    /// Keys whose answer was not the one the workload expects.
    pub failures: u64,
    /// Live heap after W1, over the structure's own (bytes).
    pub heap: isize,
    /// RSS growth over the same span (bytes).
    pub rss: isize,
    /// idem's own accounting of its hot tier (bytes), or -1 for other peers.
    pub own: i64,
    /// Where W1's fill spent its time, where the system tells (W1 samples only).
    pub cpu: Option<FillCpu>,
}

/// Where one fill's time went, from Linux's per-thread scheduler counters
/// (`/proc/<pid>/task/<tid>/schedstat`: time on a CPU, time runnable but waiting
/// for one), read by the workers at their start and end and, for the process's
/// other threads, by the harness before it lets the workers go and after they end.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FillCpu {
    /// The CPU time of the worker that used the most (seconds).
    pub busiest: f64,
    /// The longest time one worker was ready to run but waited for a CPU (seconds).
    pub waited: f64,
    /// The CPU time the process's other threads used meanwhile (seconds): the
    /// structure's own background threads (idem's maintenance thread), not the
    /// workers and not the harness's thread that waits for them.
    pub others: f64,
    /// How long the structure took to build, before the fill (seconds; not in the
    /// fill's time): what a peer does ahead, such as idem's `preallocate`, shows here.
    pub built: f64,
}

/// The CPU time, in nanoseconds, that the threads in both `before` and `after` (each
/// a list of thread id and its CPU time so far) used between the two readings,
/// leaving out the threads in `skip`. A thread that started or ended in between is
/// in only one list and is not counted.
pub fn others_cpu_ns(before: &[(u64, u64)], after: &[(u64, u64)], skip: &[u64]) -> u64 {
    after
        .iter()
        .filter(|(tid, _)| !skip.contains(tid))
        .filter_map(|&(tid, ns)| {
            let &(_, was) = before.iter().find(|(t, _)| *t == tid)?;
            Some(ns.saturating_sub(was))
        })
        .sum()
}

/// How a cell's `len` keys are split between its `threads` threads: exactly
/// `threads` contiguous ranges, in order, covering every key once; their lengths
/// differ by at most one, and some are empty when there are fewer keys than threads
/// (every thread still runs, so the cell's thread count is what ran).
pub fn parts(len: usize, threads: usize) -> Vec<std::ops::Range<usize>> {
    let threads = threads.max(1);
    (0..threads)
        .map(|i| i * len / threads..(i + 1) * len / threads)
        .collect()
}
/// `keys` reordered for `threads` threads that share (almost) no shard (the `idem-aff`
/// peer): the keys whose `group` (taken modulo `threads`: a worker a router names,
/// or a shard's number) is `t` come together, in their order, where [`parts`] puts
/// thread `t`'s range. Groups differ in size by the hash's spread (a router's) or
/// the shards' uneven shares, so a part's edge can fall inside the next group, and
/// those keys are claimed by the other group's thread (on two threads, a few hundred
/// to about a thousand keys of N = 1,000,000).
pub fn affine_order<K: Copy>(keys: &[K], threads: usize, group: impl Fn(&K) -> usize) -> Vec<K> {
    let threads = threads.max(1);
    // One allocation, the result's: no group vectors to free before the measured
    // table is made (see the `idem-aff` peer's probe).
    let mut out = Vec::with_capacity(keys.len());
    for t in 0..threads {
        out.extend(keys.iter().filter(|k| group(k) % threads == t).copied());
    }
    out
}

/// The order in which run `run` (from 0) measures `peers`: the first run in their
/// order, each later one in a shuffle seeded by its number (the same every time). A
/// child's time moves with what ran just before it (the memory the last child freed,
/// first touched again cheaply or not: up to about a tenth at 1 M keys,
/// BENCHMARKS.md, 2026-12-07, 20:43-21:51 UTC); in one fixed order, or one merely
/// rotated, every run would put each peer after the same one, and its medians would
/// keep that.
pub fn run_order(peers: &[String], run: usize) -> Vec<&String> {
    use rand::seq::SliceRandom as _;
    use rand::SeedableRng as _;
    let mut order: Vec<&String> = peers.iter().collect();
    if run > 0 {
        order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(run as u64));
    }
    order
}

/// The median of `v` (sorted in place); the mean of the middle two for an even length.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Claims per second in millions, or in thousands below 100,000 (Redis one at a time).
pub fn mega(x: f64) -> String {
    if x < 1e5 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{:.2} M", x / 1e6)
    }
}

/// Median, min and max of claims/s over the runs of one cell.
pub fn rates(samples: &[&Sample]) -> (f64, f64, f64) {
    let mut r: Vec<f64> = samples.iter().map(|s| s.rate).collect();
    let lo = r.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = r.iter().copied().fold(0.0, f64::max);
    (median(&mut r), lo, hi)
}

/// The median over `samples` of `f`'s bytes divided by the sample's keys.
pub fn per_key(samples: &[&Sample], f: impl Fn(&Sample) -> isize) -> f64 {
    let mut v: Vec<f64> = samples.iter().map(|s| f(s) as f64 / s.n as f64).collect();
    median(&mut v)
}

/// The markdown table of workload `w`: every cell of `o`, with medians, spreads and
/// ratios to idem, then two threads over one where both ran.
pub fn table(o: &Grid<'_>, all: &[Sample], w: Workload) -> String {
    let mut t = String::new();
    let title = match w {
        Workload::W1 => "W1 fresh: N new keys claimed (and, for idem, completed)",
        Workload::W2 => {
            "W2 duplicate: the same N keys claimed again, every answer must be Duplicate"
        }
        Workload::W2s => {
            "W2 in a shuffled order: the same N keys claimed once more, in another fixed order than W1's"
        }
        Workload::W2One => {
            "W2 by one thread over the table of a fill by more: the same N keys claimed once more"
        }
    };
    let _ = writeln!(t, "### {title}\n");
    match w {
        Workload::W1 => {
            let _ = writeln!(
                t,
                "| N | threads | peer | claims/s median | spread (min-max) | idem / peer | heap B/key | RSS B/key | not taken |"
            );
            let _ = writeln!(t, "|---:|---:|---|---:|---|---:|---:|---:|---:|");
        }
        Workload::W2 | Workload::W2s | Workload::W2One => {
            let _ = writeln!(
                t,
                "| N | threads | peer | claims/s median | spread (min-max) | idem / peer | not Duplicate |"
            );
            let _ = writeln!(t, "|---:|---:|---|---:|---|---:|---:|");
        }
    }
    for &n in o.ns {
        for &threads in o.threads {
            let cell = |peer: &str| -> Vec<&Sample> {
                all.iter()
                    .filter(|s| s.peer == peer && s.w == w && s.n == n && s.threads == threads)
                    .collect()
            };
            let idem = cell("idem");
            let idem_med = (!idem.is_empty()).then(|| rates(&idem).0);
            for peer in o.peers {
                let c = cell(peer);
                if c.is_empty() {
                    let _ = match w {
                        Workload::W1 => writeln!(
                            t,
                            "| {n} | {threads} | {} | not run | | | | | |",
                            peer_label(peer, w)
                        ),
                        Workload::W2 | Workload::W2s | Workload::W2One => writeln!(
                            t,
                            "| {n} | {threads} | {} | not run | | | |",
                            peer_label(peer, w)
                        ),
                    };
                    continue;
                }
                let (med, lo, hi) = rates(&c);
                let ratio = match idem_med {
                    Some(_) if peer == "idem" => "1".to_owned(),
                    Some(im) => format!("{:.2}x", im / med),
                    None => "-".to_owned(),
                };
                let failures: u64 = c.iter().map(|s| s.failures).sum();
                let _ = match w {
                    Workload::W1 => writeln!(
                        t,
                        "| {n} | {threads} | {} | {} | {} - {} | {ratio} | {:.1} | {:.1} | {failures} |",
                        peer_label(peer, w),
                        mega(med),
                        mega(lo),
                        mega(hi),
                        per_key(&c, |s| s.heap),
                        per_key(&c, |s| s.rss),
                    ),
                    Workload::W2 | Workload::W2s | Workload::W2One => writeln!(
                        t,
                        "| {n} | {threads} | {} | {} | {} - {} | {ratio} | {failures} |",
                        peer_label(peer, w),
                        mega(med),
                        mega(lo),
                        mega(hi),
                    ),
                };
            }
        }
    }
    // Scaling from one thread to two, per peer.
    if o.threads.contains(&1) && o.threads.contains(&2) {
        // W2 also reads two threads over one on the same table: the two-thread
        // child's, which its one-thread pass read as well.
        let same_table = w == Workload::W2;
        let _ = writeln!(t, "\nTwo threads over one (median claims/s):\n");
        if same_table {
            let _ = writeln!(
                t,
                "| N | peer | 1 thread | 2 threads | 2T / 1T | 1 thread over the two-thread fill's table | 2T / 1T on that table |"
            );
            let _ = writeln!(t, "|---:|---|---:|---:|---:|---:|---:|");
        } else {
            let _ = writeln!(t, "| N | peer | 1 thread | 2 threads | 2T / 1T |");
            let _ = writeln!(t, "|---:|---|---:|---:|---:|");
        }
        for &n in o.ns {
            for peer in o.peers {
                let cell = |w: Workload, threads: usize| -> Vec<&Sample> {
                    all.iter()
                        .filter(|s| s.peer == *peer && s.w == w && s.n == n && s.threads == threads)
                        .collect()
                };
                let (one, two) = (cell(w, 1), cell(w, 2));
                if one.is_empty() || two.is_empty() {
                    continue;
                }
                let (a, b) = (rates(&one).0, rates(&two).0);
                let same = if same_table {
                    // The two-thread child's one-thread pass over its own table.
                    let c = cell(Workload::W2One, 2);
                    if c.is_empty() {
                        " - | - |".to_owned()
                    } else {
                        let a1 = rates(&c).0;
                        format!(" {} | {:.2}x |", mega(a1), b / a1)
                    }
                } else {
                    String::new()
                };
                let _ = writeln!(
                    t,
                    "| {n} | {} | {} | {} | {:.2}x |{same}",
                    peer_label(peer, w),
                    mega(a),
                    mega(b),
                    b / a
                );
            }
        }
    }
    if w == Workload::W1 {
        let mut notes = Vec::new();
        for &n in o.ns {
            let c: Vec<&Sample> = all
                .iter()
                .filter(|s| s.peer == "idem" && s.w == w && s.n == n && s.own >= 0)
                .collect();
            if !c.is_empty() {
                let mut v: Vec<f64> = c.iter().map(|s| s.own as f64 / n as f64).collect();
                notes.push(format!("{:.1} B/key at N = {n}", median(&mut v)));
            }
        }
        if !notes.is_empty() {
            let _ = writeln!(
                t,
                "\nidem's own accounting (`Stats::hot_bytes` / N): {}.",
                notes.join(", ")
            );
        }
    }
    t
}

/// A target: a ratio at least or at most some value, a rate (claims/s) at least some
/// value, or bytes a key at most some value.
#[derive(Clone, Copy)]
enum Want {
    AtLeast(f64),
    AtMost(f64),
    RateAtLeast(f64),
    BytesAtMost(f64),
}

impl Want {
    fn met(self, m: f64) -> bool {
        match self {
            Want::AtLeast(w) | Want::RateAtLeast(w) => m >= w,
            Want::AtMost(w) | Want::BytesAtMost(w) => m <= w,
        }
    }

    /// "1.23x" for a ratio, "4.000 M/s" for a rate (three decimals, so that a miss
    /// by a hair does not print as the target), "35.3 B" for bytes a key. A figure whose decimals would round
    /// across the target (1.697 against 1.7) gets as many more as it takes for the
    /// figure shown to read as its verdict.
    fn show(self, m: f64) -> String {
        let (scale, mut digits, unit) = match self {
            Want::RateAtLeast(_) => (1e6, 3, " M/s"),
            Want::BytesAtMost(_) => (1.0, 1, " B"),
            _ => (1.0, 2, "x"),
        };
        let mut shown = format!("{:.digits$}", m / scale);
        while digits < 6 && shown.parse::<f64>().map(|v| self.met(v * scale)) != Ok(self.met(m)) {
            digits += 1;
            shown = format!("{:.digits$}", m / scale);
        }
        format!("{shown}{unit}")
    }
}

/// The performance targets, checked against this run's medians (1 thread unless
/// stated).
pub fn targets(o: &Grid<'_>, all: &[Sample]) -> String {
    let cell = |peer: &str, w: Workload, n: usize, threads: usize| -> Vec<&Sample> {
        all.iter()
            .filter(|s| s.peer == peer && s.w == w && s.n == n && s.threads == threads)
            .collect()
    };
    let rate = |peer: &str, w: Workload, n: usize, threads: usize| {
        let c = cell(peer, w, n, threads);
        (!c.is_empty()).then(|| rates(&c).0)
    };
    let heap = |peer: &str, n: usize| {
        let c = cell(peer, Workload::W1, n, 1);
        (!c.is_empty()).then(|| per_key(&c, |s| s.heap))
    };
    let mut t = String::new();
    let _ = writeln!(t, "### Targets, from this run's medians\n");
    let _ = writeln!(t, "| N | target | measured | verdict |");
    let _ = writeln!(t, "|---:|---|---:|---|");
    let ratio = |a: Option<f64>, b: Option<f64>| Some(a? / b?);
    for &n in o.ns {
        let w1 = |p: &str| rate(p, Workload::W1, n, 1);
        let w2 = |p: &str| rate(p, Workload::W2, n, 1);
        let redis_heap = heap("redis-p64", n).or_else(|| heap("redis", n));
        let rows: [(&str, Option<f64>, Want); 17] = [
            (
                "W1 1T: idem / Redis one at a time >= 40x",
                ratio(w1("idem"), w1("redis")),
                Want::AtLeast(40.0),
            ),
            (
                "W1 1T: idem / Redis pipelined 64 >= 4x",
                ratio(w1("idem"), w1("redis-p64")),
                Want::AtLeast(4.0),
            ),
            (
                "W1 1T: idem / moka >= 3x",
                ratio(w1("idem"), w1("moka")),
                Want::AtLeast(3.0),
            ),
            (
                "W1 1T: idem / floor >= 0.5x (within 2x)",
                ratio(w1("idem"), w1("floor")),
                Want::AtLeast(0.5),
            ),
            (
                "W1 1T: idem claim + complete >= 4 M/s",
                w1("idem"),
                Want::RateAtLeast(4e6),
            ),
            (
                "W2 1T: idem duplicate claims >= 8 M/s",
                w2("idem"),
                Want::RateAtLeast(8e6),
            ),
            (
                "W2 1T: idem / moka >= 3x",
                ratio(w2("idem"), w2("moka")),
                Want::AtLeast(3.0),
            ),
            (
                "W2: idem 2 threads / 1 thread >= 1.7x",
                ratio(rate("idem", Workload::W2, n, 2), w2("idem")),
                Want::AtLeast(1.7),
            ),
            (
                "W2, another reading: idem 2 threads / 1 thread on the same table (the two-thread fill's) >= 1.7x",
                ratio(
                    rate("idem", Workload::W2, n, 2),
                    rate("idem", Workload::W2One, n, 2),
                ),
                Want::AtLeast(1.7),
            ),
            (
                "W1: idem 2 threads / 1 thread >= 1.7x",
                ratio(rate("idem", Workload::W1, n, 2), w1("idem")),
                Want::AtLeast(1.7),
            ),
            (
                "W1, another reading: idem with the keys routed to the threads by `Namespace::router` (`idem-aff`), 2 threads / 1 thread >= 1.7x",
                ratio(rate("idem-aff", Workload::W1, n, 2), w1("idem-aff")),
                Want::AtLeast(1.7),
            ),
            (
                "W1, another reading: idem with the namespace's memory made as keys arrive (`idem-grow`: `preallocate(false)`), 2 threads / 1 thread >= 1.7x",
                ratio(rate("idem-grow", Workload::W1, n, 2), w1("idem-grow")),
                Want::AtLeast(1.7),
            ),
            (
                "W2, another reading: idem with the keys routed to the threads by `Namespace::router` (`idem-aff`), 2 threads / 1 thread >= 1.7x",
                ratio(rate("idem-aff", Workload::W2, n, 2), w2("idem-aff")),
                Want::AtLeast(1.7),
            ),
            (
                "W2, batches of 64: idem 2 threads / 1 thread >= 1.7x",
                ratio(rate("idem-b64", Workload::W2, n, 2), w2("idem-b64")),
                Want::AtLeast(1.7),
            ),
            (
                "W1 memory per key: idem heap <= 40 B (`max_keys` = N)",
                heap("idem", n),
                Want::BytesAtMost(40.0),
            ),
            (
                "W1 memory per key: idem / Redis <= 0.33x",
                ratio(heap("idem", n), redis_heap),
                Want::AtMost(1.0 / 3.0),
            ),
            (
                "W1 memory per key: idem / floor <= 1.5x",
                ratio(heap("idem", n), heap("floor", n)),
                Want::AtMost(1.5),
            ),
        ];
        for (what, measured, want) in rows {
            let (m, verdict) = match measured {
                None => ("not run".to_owned(), "-"),
                Some(m) => (want.show(m), if want.met(m) { "met" } else { "**missed**" }),
            };
            let _ = writeln!(t, "| {n} | {what} | {m} | {verdict} |");
        }
    }
    // A peer's two threads over one, each workload and N it ran both at.
    let scaling = |peer: &str| {
        let mut out = Vec::new();
        for &n in o.ns {
            for w in [Workload::W1, Workload::W2] {
                if let (Some(one), Some(two)) = (rate(peer, w, n, 1), rate(peer, w, n, 2)) {
                    out.push((w, n, two / one));
                }
            }
        }
        out
    };
    // The machine's own scaling in this run: a two-thread target cannot be judged
    // where the machine itself gives two threads less than it asks.
    let refs: Vec<String> = scaling("machine")
        .into_iter()
        .map(|(w, n, r)| format!("{} {r:.2}x at N = {n}", w.arg().to_uppercase()))
        .collect();
    if !refs.is_empty() {
        let _ = writeln!(
            t,
            "\nThe machine's own two threads over one in this run (the `machine` reference: \
             one random store or load a key, no table): {}.",
            refs.join(", ")
        );
    }
    // idem's own, where its two threads (almost) never write a shard the other
    // writes: in W1, what writing the same shards costs the targets' two-thread
    // reading in this run. (In W2 idem's threads answer without writing a shard, so
    // there the two differ in what each core reads: every shard, or its half.)
    let idem = scaling("idem");
    let own: Vec<String> = scaling("idem-aff")
        .into_iter()
        .map(|(w, n, r)| {
            let shared = match idem.iter().find(|&&(iw, i_n, _)| iw == w && i_n == n) {
                Some(&(_, _, b)) if w == Workload::W1 => {
                    format!(" (`idem`, whose threads write every shard: {b:.2}x)")
                }
                Some(&(_, _, b)) => {
                    format!(" (`idem`, whose threads read every shard and write none: {b:.2}x)")
                }
                None => String::new(),
            };
            format!("{} {r:.2}x at N = {n}{shared}", w.arg().to_uppercase())
        })
        .collect();
    if !own.is_empty() {
        let _ = writeln!(
            t,
            "\nidem's two threads over one where almost no shard is written by both (the `idem-aff` \
             reference: each thread's keys routed by `Namespace::router`, in shards of its own): {}.",
            own.join(", ")
        );
    }
    t
}

/// W1's one thread and two threads side by side by where their time went (medians
/// over the runs of each cell, for the peers whose fills report it): the workers' own
/// CPU time, how long a worker waited for a CPU, and what the process's other threads
/// used meanwhile. Two threads over one by the workers' CPU (one thread's CPU over
/// the busier of two workers') is what the wall-clock ratio would be if nothing else
/// ran on the workers' cores; on a machine with as many cores as workers, a
/// background thread's work during the fill comes out of a worker's time.
pub fn fill_cpu_table(o: &Grid<'_>, all: &[Sample]) -> String {
    let mut t = String::new();
    let mut rows = Vec::new();
    let ms = |x: f64| format!("{:.1} ms", x * 1e3);
    for &n in o.ns {
        for peer in o.peers {
            let cell = |threads: usize| -> Vec<&Sample> {
                all.iter()
                    .filter(|s| {
                        s.peer == *peer && s.w == Workload::W1 && s.n == n && s.threads == threads
                    })
                    .collect()
            };
            let (one, two) = (cell(1), cell(2));
            let read = |c: &[&Sample]| -> Option<Vec<FillCpu>> {
                if c.is_empty() {
                    return None;
                }
                c.iter().map(|s| s.cpu).collect()
            };
            let (Some(a), Some(b)) = (read(&one), read(&two)) else {
                continue;
            };
            let med = |v: &[FillCpu], f: fn(&FillCpu) -> f64| {
                median(&mut v.iter().map(f).collect::<Vec<f64>>())
            };
            let (cpu1, cpu2) = (med(&a, |c| c.busiest), med(&b, |c| c.busiest));
            let by_time = rates(&two).0 / rates(&one).0;
            rows.push(format!(
                "| {n} | {} | {} | {} | {:.2}x | {:.2}x | {} | {} / {} | {} / {} |",
                peer_label(peer, Workload::W1),
                ms(cpu1),
                ms(cpu2),
                cpu1 / cpu2,
                by_time,
                ms(med(&b, |c| c.waited)),
                ms(med(&a, |c| c.others)),
                ms(med(&b, |c| c.others)),
                ms(med(&a, |c| c.built)),
                ms(med(&b, |c| c.built)),
            ));
        }
    }
    if rows.is_empty() {
        return t;
    }
    let _ = writeln!(
        t,
        "### W1: where one thread's and two threads' fill time went\n"
    );
    let _ = writeln!(
        t,
        "| N | peer | 1 thread: its CPU | 2 threads: the busier worker's CPU | 2T / 1T by the workers' CPU | 2T / 1T by time | 2 threads: the longest wait for a CPU | other threads' CPU, 1 thread / 2 threads | built before the fill, 1 thread / 2 threads |"
    );
    let _ = writeln!(t, "|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let _ = writeln!(t, "{r}");
    }
    let _ = writeln!(
        t,
        "\nMedians over the runs. CPU and waits from the kernel's per-thread scheduler counters (`schedstat`); other threads: the process's threads but the workers and the harness's own, over the fill (idem's maintenance thread). With two workers on two cores, what the other threads use comes out of a worker's time: two threads over one by the workers' CPU is what the time would read without it. Built: the time the structure took to be made, before the fill and not in its time (for idem, the engine and its namespace; with `preallocate`, its whole index and slab, written)."
    );
    t
}
