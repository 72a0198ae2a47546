//! The benchmark harness's report (`benches/workloads/report.rs`): its tables and
//! target verdicts, on samples made up here, so that a figure in BENCHMARKS.md is
//! what the run measured.

#[allow(dead_code)]
#[path = "../benches/workloads/report.rs"]
mod report;

use report::{
    affine_order, fill_cpu_table, median, others_cpu_ns, parts, run_order, table, targets, FillCpu,
    Grid, Sample, Workload,
};

fn sample(peer: &str, w: Workload, n: usize, threads: usize, rate: f64) -> Sample {
    Sample {
        peer: peer.to_owned(),
        w,
        n,
        threads,
        rate,
        failures: 0,
        heap: 0,
        rss: 0,
        own: -1,
        cpu: None,
    }
}

/// W1 samples with a heap of `bytes_per_key` a key.
fn w1_with_heap(peer: &str, n: usize, rate: f64, bytes_per_key: isize) -> Sample {
    Sample {
        heap: bytes_per_key * n as isize,
        ..sample(peer, Workload::W1, n, 1, rate)
    }
}

/// The targets table of `all`, for a run of sizes `ns`, thread counts `threads` and
/// peers `peers`.
fn targets_of(ns: &[usize], threads: &[usize], peers: &[&str], all: &[Sample]) -> String {
    let peers: Vec<String> = peers.iter().map(|s| s.to_string()).collect();
    targets(
        &Grid {
            ns,
            threads,
            peers: &peers,
        },
        all,
    )
}

/// The table of workload `w` for the same.
fn table_of(
    ns: &[usize],
    threads: &[usize],
    peers: &[&str],
    all: &[Sample],
    w: Workload,
) -> String {
    let peers: Vec<String> = peers.iter().map(|s| s.to_string()).collect();
    table(
        &Grid {
            ns,
            threads,
            peers: &peers,
        },
        all,
        w,
    )
}

/// The cells of the row of `out` whose second column is `what`, for key count `n`.
fn row<'a>(out: &'a str, n: usize, what: &str) -> Vec<&'a str> {
    cells(out, &format!("| {n} | {what} |"))
}

/// The cells of the first row of `out` that starts with `start`.
fn cells<'a>(out: &'a str, start: &str) -> Vec<&'a str> {
    let line = out
        .lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no row {start:?} in\n{out}"));
    line.trim_matches('|').split('|').map(str::trim).collect()
}

#[test]
fn the_median_is_the_middle_value_or_the_mean_of_the_middle_two() {
    assert_eq!(median(&mut [5.0, 1.0, 3.0]), 3.0);
    assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    assert_eq!(median(&mut [7.0]), 7.0);
}

#[test]
fn ratio_targets_are_read_from_the_medians_and_say_met_or_missed() {
    let n = 1_000;
    let mut all = Vec::new();
    // idem's median W1 rate is 4.5 M (of 3 runs); the floor's is 8 M: 0.5625x.
    for r in [4.0e6, 4.5e6, 9.0e6] {
        all.push(w1_with_heap("idem", n, r, 35));
    }
    all.push(w1_with_heap("floor", n, 8.0e6, 44));
    all.push(w1_with_heap("redis", n, 4.0e4, 105));
    // Two threads: W1 1.5x one thread (missed), W2 1.8x (met).
    all.push(sample("idem", Workload::W1, n, 2, 6.75e6));
    all.push(sample("idem", Workload::W2, n, 1, 10.0e6));
    all.push(sample("idem", Workload::W2, n, 2, 18.0e6));
    let out = targets_of(&[n], &[1, 2], &["idem", "floor", "redis"], &all);
    assert_eq!(
        row(&out, n, "W1 1T: idem / floor >= 0.5x (within 2x)")[2..],
        ["0.56x", "met"]
    );
    assert_eq!(
        row(&out, n, "W1 1T: idem / Redis one at a time >= 40x")[2..],
        ["112.50x", "met"]
    );
    assert_eq!(
        row(&out, n, "W1: idem 2 threads / 1 thread >= 1.7x")[2..],
        ["1.50x", "**missed**"]
    );
    assert_eq!(
        row(&out, n, "W2: idem 2 threads / 1 thread >= 1.7x")[2..],
        ["1.80x", "met"]
    );
    // A peer that did not run leaves its targets unjudged.
    assert_eq!(
        row(&out, n, "W1 1T: idem / moka >= 3x")[2..],
        ["not run", "-"]
    );
    // At most: exactly a third of Redis's memory meets "<= 0.33x" (a third).
    assert_eq!(
        row(&out, n, "W1 memory per key: idem / Redis <= 0.33x")[2..],
        ["0.33x", "met"]
    );
    assert_eq!(
        row(&out, n, "W1 memory per key: idem / floor <= 1.5x")[2..],
        ["0.80x", "met"]
    );
    assert_eq!(
        row(
            &out,
            n,
            "W1 memory per key: idem heap <= 40 B (`max_keys` = N)"
        )[2..],
        ["35.0 B", "met"]
    );
}

#[test]
fn memory_over_its_bound_is_missed() {
    let n = 1_000;
    let all = vec![
        w1_with_heap("idem", n, 1e6, 36),
        w1_with_heap("redis-p64", n, 1e5, 105),
        w1_with_heap("floor", n, 1e6, 20),
    ];
    let out = targets_of(&[n], &[1], &["idem", "redis-p64", "floor"], &all);
    // Redis pipelined stands in for Redis's memory when one at a time did not run.
    assert_eq!(
        row(&out, n, "W1 memory per key: idem / Redis <= 0.33x")[2..],
        ["0.34x", "**missed**"]
    );
    assert_eq!(
        row(&out, n, "W1 memory per key: idem / floor <= 1.5x")[2..],
        ["1.80x", "**missed**"]
    );
    // The bound itself is met; a byte over it is missed.
    for (bytes, shown, verdict) in [(40, "40.0 B", "met"), (41, "41.0 B", "**missed**")] {
        let all = vec![w1_with_heap("idem", n, 1e6, bytes)];
        let out = targets_of(&[n], &[1], &["idem"], &all);
        assert_eq!(
            row(
                &out,
                n,
                "W1 memory per key: idem heap <= 40 B (`max_keys` = N)"
            )[2..],
            [shown, verdict]
        );
    }
}

#[test]
fn figures_are_judged_to_the_claim_and_printed_finer_than_the_target() {
    let n = 10_000;
    let all = vec![
        sample("idem", Workload::W1, n, 1, 3_999_000.0),
        sample("idem", Workload::W2, n, 1, 8_000_000.0),
        sample("idem", Workload::W1, n * 10, 1, 3_999_600.0),
        // Two threads over one: W1 1.7036x (met), W2 1.697x (missed).
        sample("idem", Workload::W1, n, 2, 6_812_700.0),
        sample("idem", Workload::W2, n, 2, 13_576_000.0),
    ];
    let out = targets_of(&[n, n * 10], &[1, 2], &["idem"], &all);
    assert_eq!(
        row(&out, n, "W1 1T: idem claim + complete >= 4 M/s")[2..],
        ["3.999 M/s", "**missed**"]
    );
    // A rate whose three decimals would round up to the target gets a fourth.
    assert_eq!(
        row(&out, n * 10, "W1 1T: idem claim + complete >= 4 M/s")[2..],
        ["3.9996 M/s", "**missed**"]
    );
    assert_eq!(
        row(&out, n, "W2 1T: idem duplicate claims >= 8 M/s")[2..],
        ["8.000 M/s", "met"]
    );
    // A ratio whose two decimals would round up to the target gets a third.
    assert_eq!(
        row(&out, n, "W2: idem 2 threads / 1 thread >= 1.7x")[2..],
        ["1.697x", "**missed**"]
    );
    assert_eq!(
        row(&out, n, "W1: idem 2 threads / 1 thread >= 1.7x")[2..],
        ["1.70x", "met"]
    );
}

#[test]
fn the_machine_reference_scaling_is_reported_beside_the_targets() {
    let n = 1_000;
    let all = vec![
        sample("machine", Workload::W1, n, 1, 10e6),
        sample("machine", Workload::W1, n, 2, 13e6),
    ];
    let out = targets_of(&[n], &[1, 2], &["machine"], &all);
    let line = out
        .lines()
        .find(|l| l.starts_with("The machine's own two threads over one"))
        .expect("the reference's line");
    assert!(line.ends_with(": W1 1.30x at N = 1000."), "{line}");
    // Without the reference, no such line.
    let out = targets_of(&[n], &[1, 2], &["idem"], &all[..0]);
    assert!(!out.contains("The machine's own"), "{out}");
}

#[test]
fn the_two_thread_targets_are_also_judged_with_the_keys_routed() {
    let n = 1_000;
    let w1 = "W1, another reading: idem with the keys routed to the threads by `Namespace::router` (`idem-aff`), 2 threads / 1 thread >= 1.7x";
    let w2 = "W2, another reading: idem with the keys routed to the threads by `Namespace::router` (`idem-aff`), 2 threads / 1 thread >= 1.7x";
    let all = vec![
        sample("idem-aff", Workload::W1, n, 1, 10e6),
        sample("idem-aff", Workload::W1, n, 2, 18e6),
        sample("idem-aff", Workload::W2, n, 1, 20e6),
        sample("idem-aff", Workload::W2, n, 2, 33e6),
        // The shared reading is judged on `idem`'s own samples, not these.
        sample("idem", Workload::W1, n, 1, 10e6),
        sample("idem", Workload::W1, n, 2, 14e6),
    ];
    let out = targets_of(&[n], &[1, 2], &["idem", "idem-aff"], &all);
    assert_eq!(row(&out, n, w1)[2..], ["1.80x", "met"]);
    assert_eq!(row(&out, n, w2)[2..], ["1.65x", "**missed**"]);
    assert_eq!(
        row(&out, n, "W1: idem 2 threads / 1 thread >= 1.7x")[2..],
        ["1.40x", "**missed**"]
    );
    // Without the routed peer, its readings are not run.
    let out = targets_of(&[n], &[1, 2], &["idem"], &all[4..]);
    assert_eq!(row(&out, n, w1)[2..], ["not run", "-"]);
}

#[test]
fn the_fresh_two_thread_target_is_also_judged_with_the_memory_made_as_keys_arrive() {
    let n = 1_000;
    let grow = "W1, another reading: idem with the namespace's memory made as keys arrive (`idem-grow`: `preallocate(false)`), 2 threads / 1 thread >= 1.7x";
    let all = vec![
        sample("idem-grow", Workload::W1, n, 1, 10e6),
        sample("idem-grow", Workload::W1, n, 2, 12e6),
        sample("idem", Workload::W1, n, 1, 10e6),
        sample("idem", Workload::W1, n, 2, 17.5e6),
    ];
    let out = targets_of(&[n], &[1, 2], &["idem", "idem-grow"], &all);
    assert_eq!(row(&out, n, grow)[2..], ["1.20x", "**missed**"]);
    assert_eq!(
        row(&out, n, "W1: idem 2 threads / 1 thread >= 1.7x")[2..],
        ["1.75x", "met"]
    );
    let out = targets_of(&[n], &[1, 2], &["idem"], &all[2..]);
    assert_eq!(row(&out, n, grow)[2..], ["not run", "-"]);
}

#[test]
fn the_shard_affine_reference_is_reported_beside_idems_own_scaling() {
    let n = 1_000;
    let mut all = vec![
        sample("idem-aff", Workload::W1, n, 1, 10e6),
        sample("idem-aff", Workload::W1, n, 2, 18e6),
    ];
    let line_of = |all: &[Sample], peers: &[&str]| {
        targets_of(&[n], &[1, 2], peers, all)
            .lines()
            .find(|l| l.starts_with("idem's two threads over one where almost no shard"))
            .map(str::to_owned)
    };
    let line = line_of(&all, &["idem-aff"]).expect("the reference's line");
    assert!(line.ends_with(": W1 1.80x at N = 1000."), "{line}");
    // With `idem` measured too, its own reading goes beside it.
    all.push(sample("idem", Workload::W1, n, 1, 12e6));
    all.push(sample("idem", Workload::W1, n, 2, 15e6));
    let line = line_of(&all, &["idem", "idem-aff"]).expect("the reference's line");
    assert!(
        line.ends_with(": W1 1.80x at N = 1000 (`idem`, whose threads write every shard: 1.25x)."),
        "{line}"
    );
    // W2's reading follows W1's, said as what it is: idem's threads write no shard
    // there.
    for (peer, one, two) in [("idem-aff", 20e6, 38e6), ("idem", 20e6, 30e6)] {
        all.push(sample(peer, Workload::W2, n, 1, one));
        all.push(sample(peer, Workload::W2, n, 2, two));
    }
    let line = line_of(&all, &["idem", "idem-aff"]).expect("the reference's line");
    assert!(
        line.ends_with(
            ": W1 1.80x at N = 1000 (`idem`, whose threads write every shard: 1.25x), \
             W2 1.90x at N = 1000 (`idem`, whose threads read every shard and write none: 1.50x)."
        ),
        "{line}"
    );
    // Without the reference's two thread counts, no such line.
    let idem_only = [
        sample("idem", Workload::W1, n, 1, 12e6),
        sample("idem", Workload::W1, n, 2, 15e6),
    ];
    assert_eq!(line_of(&idem_only, &["idem"]), None);
    assert_eq!(line_of(&all[..1], &["idem-aff"]), None);
}

#[test]
fn affine_order_gives_each_threads_part_the_keys_of_its_own_shards() {
    let keys: Vec<u32> = (0..1_000).collect();
    // Shards of uneven shares: a key's shard is its value mod 7.
    let shard = |k: &u32| (*k % 7) as usize;
    for threads in [1, 2, 3] {
        let ordered = affine_order(&keys, threads, shard);
        let mut sorted = ordered.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, keys, "every key once");
        // Group `t` holds the keys of shards t, t + threads, ..., in their order.
        let mut at = 0;
        for t in 0..threads {
            let group: Vec<u32> = keys
                .iter()
                .copied()
                .filter(|k| shard(k) % threads == t)
                .collect();
            assert_eq!(ordered[at..at + group.len()], group[..], "group {t}");
            at += group.len();
        }
        // Thread `t`'s part is mostly its own group: at most the groups' imbalance
        // strays across an edge.
        for (t, part) in parts(ordered.len(), threads).into_iter().enumerate() {
            let stray = ordered[part.clone()]
                .iter()
                .filter(|k| shard(k) % threads != t)
                .count();
            assert!(
                stray <= 1_000 / 7,
                "{threads} threads, part {t}: {stray} stray keys"
            );
        }
    }
}

#[test]
fn a_table_gives_medians_spreads_ratios_and_two_threads_over_one() {
    let n = 1_000;
    let mut all = Vec::new();
    for r in [2.0e6, 3.0e6, 10.0e6] {
        all.push(sample("idem", Workload::W2, n, 1, r));
    }
    all.push(sample("floor", Workload::W2, n, 1, 6.0e6));
    all.push(sample("idem", Workload::W2, n, 2, 5.1e6));
    let ps = ["idem", "floor", "moka"];
    let out = table_of(&[n], &[1, 2], &ps, &all, Workload::W2);
    assert_eq!(
        row(&out, n, "1")[2..],
        ["idem", "3.00 M", "2.00 M - 10.00 M", "1", "0"]
    );
    let floor = cells(&out, "| 1000 | 1 | floor");
    assert_eq!(floor[3..6], ["6.00 M", "6.00 M - 6.00 M", "0.50x"]);
    assert!(out.contains("| 1000 | 1 | `moka::sync::Cache<String, ()>` TTL | not run |"));
    // Two threads over one: only peers with both cells.
    assert!(
        out.contains("| 1000 | idem | 3.00 M | 5.10 M | 1.70x |"),
        "{out}"
    );
    assert!(!out.contains("| 1000 | floor: `Mutex<hashbrown::HashMap<[u8; 16], u32>>` | 6.00 M"));
    // With one thread count there is no scaling table.
    assert!(!table_of(&[n], &[1], &ps, &all, Workload::W2).contains("Two threads over one"));
}

#[test]
fn w2_two_threads_over_one_are_also_read_on_the_two_thread_fills_table() {
    let n = 1_000;
    let mut all = vec![
        sample("idem", Workload::W2, n, 1, 10.0e6),
        sample("idem", Workload::W2, n, 2, 15.0e6),
    ];
    let ps = ["idem", "floor"];
    // Without the one-thread pass over the two-thread table, that reading is not run.
    let out = targets_of(&[n], &[1, 2], &ps, &all);
    let same = "W2, another reading: idem 2 threads / 1 thread on the same table (the two-thread fill's) >= 1.7x";
    assert_eq!(row(&out, n, same)[2..], ["not run", "-"]);
    assert_eq!(
        row(&out, n, "W2: idem 2 threads / 1 thread >= 1.7x")[2..],
        ["1.50x", "**missed**"]
    );
    // One thread over the two-thread fill's table is slower than over its own: the
    // same table's reading is 15 / 8 (medians of the passes).
    for r in [7.0e6, 8.0e6, 9.0e6] {
        all.push(sample("idem", Workload::W2One, n, 2, r));
    }
    let out = targets_of(&[n], &[1, 2], &ps, &all);
    assert_eq!(row(&out, n, same)[2..], ["1.88x", "met"]);
    assert_eq!(
        row(&out, n, "W2: idem 2 threads / 1 thread >= 1.7x")[2..],
        ["1.50x", "**missed**"],
        "the first reading is unchanged"
    );
    // The W2 table's scaling rows show both readings; W1's has no such columns.
    let table = table_of(&[n], &[1, 2], &ps, &all, Workload::W2);
    assert!(
        table.contains("| 1000 | idem | 10.00 M | 15.00 M | 1.50x | 8.00 M | 1.88x |"),
        "{table}"
    );
    all.push(sample("idem", Workload::W1, n, 1, 4.0e6));
    all.push(sample("idem", Workload::W1, n, 2, 6.0e6));
    let w1 = table_of(&[n], &[1, 2], &ps, &all, Workload::W1);
    assert!(
        w1.contains("| 1000 | idem (claim + complete) | 4.00 M | 6.00 M | 1.50x |\n"),
        "{w1}"
    );
}

#[test]
fn failures_are_summed_over_a_cells_runs() {
    let n = 1_000;
    let all = vec![
        Sample {
            failures: 2,
            ..sample("idem", Workload::W2, n, 1, 1e6)
        },
        Sample {
            failures: 3,
            ..sample("idem", Workload::W2, n, 1, 1e6)
        },
    ];
    let out = table_of(&[n], &[1], &["idem"], &all, Workload::W2);
    assert_eq!(row(&out, n, "1").last(), Some(&"5"));
}

#[test]
fn every_thread_of_a_cell_gets_a_part_even_with_fewer_keys_than_threads() {
    for (len, threads) in [(1, 2), (5, 4), (6, 4), (1000, 64), (1_000_000, 2), (7, 1)] {
        let p = parts(len, threads);
        assert_eq!(p.len(), threads, "{len} keys on {threads} threads: {p:?}");
        assert_eq!(p[0].start, 0);
        assert_eq!(p[threads - 1].end, len);
        for w in p.windows(2) {
            assert_eq!(w[0].end, w[1].start, "{p:?}");
        }
        let (min, max) = (
            p.iter().map(|r| r.len()).min().unwrap(),
            p.iter().map(|r| r.len()).max().unwrap(),
        );
        assert!(max - min <= 1, "{p:?}");
    }
}

/// A W1 sample of `threads` threads at `rate` whose fill reported `cpu`.
fn w1_with_cpu(peer: &str, n: usize, threads: usize, rate: f64, cpu: Option<FillCpu>) -> Sample {
    Sample {
        cpu,
        ..sample(peer, Workload::W1, n, threads, rate)
    }
}

fn fill(busiest: f64, waited: f64, others: f64) -> Option<FillCpu> {
    Some(FillCpu {
        busiest,
        waited,
        others,
        built: others / 10.0,
    })
}

#[test]
fn the_other_threads_cpu_counts_the_threads_read_both_times_but_those_left_out() {
    let before = [(1, 100), (2, 50), (3, 10)];
    // 3 ended and 4 started between the readings; 2 is a worker.
    let after = [(1, 150), (2, 80), (4, 999)];
    assert_eq!(others_cpu_ns(&before, &after, &[2]), 50);
    assert_eq!(others_cpu_ns(&before, &after, &[]), 80);
    assert_eq!(others_cpu_ns(&before, &after, &[1, 2]), 0);
}

#[test]
fn the_fill_cpu_table_reads_two_threads_over_one_by_the_workers_cpu_beside_the_time() {
    let n = 1_000;
    let all = vec![
        w1_with_cpu("idem", n, 1, 1.0e6, fill(0.100, 0.0, 0.010)),
        w1_with_cpu("idem", n, 1, 1.2e6, fill(0.120, 0.001, 0.020)),
        w1_with_cpu("idem", n, 2, 1.5e6, fill(0.060, 0.020, 0.030)),
        w1_with_cpu("idem", n, 2, 1.7e6, fill(0.050, 0.030, 0.040)),
        // A peer whose fills do not all report is left out.
        w1_with_cpu("floor", n, 1, 5.0e6, fill(0.02, 0.0, 0.0)),
        w1_with_cpu("floor", n, 2, 6.0e6, None),
    ];
    let ps: Vec<String> = ["idem", "floor"].iter().map(|s| s.to_string()).collect();
    let grid = Grid {
        ns: &[n],
        threads: &[1, 2],
        peers: &ps,
    };
    let out = fill_cpu_table(&grid, &all);
    let row = cells(&out, "| 1000 | idem");
    // CPU 110 ms over 55 ms: 2.00x; time: 1.6 M over 1.1 M a second; built in
    // 1 and 2 ms with one thread, 3 and 4 ms with two (a tenth of `others` here).
    assert_eq!(
        row[2..],
        [
            "110.0 ms",
            "55.0 ms",
            "2.00x",
            "1.45x",
            "25.0 ms",
            "15.0 ms / 35.0 ms",
            "1.5 ms / 3.5 ms"
        ],
        "{out}"
    );
    assert!(!out.contains("floor"), "{out}");
    // No peer with every fill reporting: no table at all.
    assert_eq!(fill_cpu_table(&grid, &all[4..]), "");
}

#[test]
fn each_run_orders_the_peers_afresh_so_that_no_peer_always_follows_the_same_one() {
    let peers: Vec<String> = [
        "idem",
        "idem-aff",
        "idem-grow",
        "idem-b64",
        "floor",
        "dashmap",
        "moka",
        "redis",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let order = |run| -> Vec<&str> {
        run_order(&peers, run)
            .into_iter()
            .map(|s| s.as_str())
            .collect()
    };
    // The first run in the list's order; every run a permutation, the same each time.
    assert_eq!(
        order(0),
        peers.iter().map(|s| s.as_str()).collect::<Vec<_>>()
    );
    for run in 0..5 {
        let mut sorted = order(run);
        sorted.sort_unstable();
        let mut want: Vec<&str> = peers.iter().map(|s| s.as_str()).collect();
        want.sort_unstable();
        assert_eq!(sorted, want, "run {run}");
        assert_eq!(order(run), order(run));
    }
    // Over three runs, what comes just before each peer is not always the same.
    let before = |peer: &str, run| -> Option<&str> {
        let o = order(run);
        let i = o.iter().position(|&p| p == peer).unwrap();
        i.checked_sub(1).map(|j| o[j])
    };
    for peer in &peers {
        let seen: std::collections::HashSet<Option<&str>> =
            (0..3).map(|r| before(peer, r)).collect();
        assert!(seen.len() >= 2, "{peer}: {seen:?}");
    }
    assert!(run_order(&[], 5).is_empty());
}
