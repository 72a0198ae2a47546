//! `idem bench durable`: W4 (durable completion) and W5 (restart) of the benchmark
//! workloads, with RocksDB used directly as the peer in the same run.
//!
//! `idem bench durable [--quick] [--w4] [--w5] [--keys N]`
//! `idem bench durable --disk [--keys N] [--result-bytes N]`
//!
//! It lives in the binary (not under `benches/`) so that it runs on the same release
//! build as `idem demo`: RocksDB's C++ is compiled once.
//!
//! W4: claim + complete of fresh keys per sync policy, 1 and 2 threads, beside RocksDB
//! get + put (a check-then-write, as a consumer would use it) with the same write
//! options. W5: a database holding N completed keys is reopened: time from open to the
//! first claim served, peak memory of the process (a child process per measurement),
//! then every key is claimed again and must be a duplicate.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use idem::{Claim, Engine, NamespaceConfig, SyncPolicy};

fn key(i: u64) -> [u8; 20] {
    let mut k = [0u8; 20];
    k.copy_from_slice(format!("ord-{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).as_bytes());
    k
}

struct Dir(PathBuf);
impl Dir {
    fn new(tag: &str) -> Dir {
        let base = std::env::var_os("IDEM_BENCH_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let p = base.join(format!("idem-bench-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        Dir(p)
    }
}
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn policy_name(p: SyncPolicy) -> &'static str {
    match p {
        SyncPolicy::Always => "Always",
        SyncPolicy::Periodic(_) => "Periodic 1 s",
        _ => "Never",
    }
}

fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

struct Run {
    ops_per_s: f64,
    p50_ns: u64,
    p99_ns: u64,
}

/// Runs `per_thread` operations on each of `threads` threads; `op(thread, i)` returns
/// the nanoseconds of the part whose latency is reported.
fn drive(threads: usize, per_thread: u64, op: &(dyn Fn(usize, u64) -> u64 + Sync)) -> Run {
    let barrier = Barrier::new(threads);
    let mut lat: Vec<u64> = Vec::new();
    let started = Instant::now();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    (0..per_thread).map(|i| op(t, i)).collect::<Vec<u64>>()
                })
            })
            .collect();
        for h in hs {
            lat.extend(h.join().unwrap());
        }
    });
    let elapsed = started.elapsed();
    lat.sort_unstable();
    Run {
        ops_per_s: (threads as u64 * per_thread) as f64 / elapsed.as_secs_f64(),
        p50_ns: percentile(&lat, 0.5),
        p99_ns: percentile(&lat, 0.99),
    }
}

fn w4_idem(policy: SyncPolicy, threads: usize, per_thread: u64) -> Run {
    let dir = Dir::new("w4");
    let engine = Engine::builder()
        .namespace(
            "w4",
            NamespaceConfig::new()
                .ttl(Duration::from_secs(3600))
                .sync(policy)
                .max_keys(4_000_000),
        )
        .durable(&dir.0)
        .build()
        .unwrap();
    let ns = engine.namespace("w4").unwrap();
    drive(threads, per_thread, &|t, i| {
        let k = key(t as u64 * 1_000_000_000 + i);
        let Claim::Acquired(g) = ns.claim(&k).unwrap() else {
            panic!("fresh key not acquired")
        };
        let c = Instant::now();
        g.complete().unwrap();
        c.elapsed().as_nanos() as u64
    })
}

fn w4_rocksdb(policy: SyncPolicy, threads: usize, per_thread: u64) -> Run {
    let dir = Dir::new("w4raw");
    let mut opts = rocksdb::Options::default();
    opts.create_if_missing(true);
    let db = rocksdb::DB::open(&opts, &dir.0).unwrap();
    let mut wo = rocksdb::WriteOptions::default();
    wo.set_sync(matches!(policy, SyncPolicy::Always));
    let stop = std::sync::atomic::AtomicBool::new(false);
    let value = [7u8; 24];
    std::thread::scope(|s| {
        if let SyncPolicy::Periodic(d) = policy {
            let (db, stop) = (&db, &stop);
            s.spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(d);
                    let _ = db.flush_wal(true);
                }
            });
        }
        let r = drive(threads, per_thread, &|t, i| {
            let k = key(t as u64 * 1_000_000_000 + i);
            assert!(db.get(k).unwrap().is_none());
            let c = Instant::now();
            db.put_opt(k, value, &wo).unwrap();
            c.elapsed().as_nanos() as u64
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    })
}

fn w4(quick: bool) {
    println!("### W4: durable completion (claim + complete of fresh keys)\n");
    println!("| sync | threads | idem claim+complete /s | RocksDB get+put /s | idem / RocksDB | idem complete p50 / p99 | RocksDB put p50 / p99 |");
    println!("|---|---|---|---|---|---|---|");
    for policy in [
        SyncPolicy::Always,
        SyncPolicy::Periodic(Duration::from_secs(1)),
        SyncPolicy::Never,
    ] {
        let mut one = 0.0;
        for threads in [1usize, 2] {
            let per = match (policy, quick) {
                (SyncPolicy::Always, true) => 200,
                (SyncPolicy::Always, false) => 2_000,
                (_, true) => 5_000,
                (_, false) => 100_000,
            };
            let raw = w4_rocksdb(policy, threads, per);
            let idem = w4_idem(policy, threads, per);
            if threads == 1 {
                one = idem.ops_per_s;
            }
            println!(
                "| {} | {} | {:.0} | {:.0} | {:.2} | {:.1} / {:.1} us | {:.1} / {:.1} us |",
                policy_name(policy),
                threads,
                idem.ops_per_s,
                raw.ops_per_s,
                idem.ops_per_s / raw.ops_per_s,
                idem.p50_ns as f64 / 1e3,
                idem.p99_ns as f64 / 1e3,
                raw.p50_ns as f64 / 1e3,
                raw.p99_ns as f64 / 1e3,
            );
            if threads == 2 {
                println!("|  | 2 vs 1 |  |  | {:.2}x |  |  |", idem.ops_per_s / one);
            }
        }
    }
    println!();
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn w5_engine(dir: &Path, keys: u64) -> Engine {
    Engine::builder()
        .namespace(
            "w5",
            NamespaceConfig::new()
                .ttl(Duration::from_secs(3600))
                .sync(SyncPolicy::Never)
                .max_keys(keys as usize + 1024),
        )
        .durable(dir)
        .build()
        .unwrap()
}

/// Child: fill the database with `keys` completed keys.
fn w5_fill(dir: &Path, keys: u64) {
    let engine = w5_engine(dir, keys);
    let ns = engine.namespace("w5").unwrap();
    let mut i = 0;
    while i < keys {
        let end = (i + 1024).min(keys);
        let ks: Vec<[u8; 20]> = (i..end).map(key).collect();
        let refs: Vec<&[u8]> = ks.iter().map(|k| &k[..]).collect();
        let guards = ns
            .claim_batch(&refs)
            .unwrap()
            .into_iter()
            .map(|c| match c {
                Claim::Acquired(g) => g,
                _ => panic!("fresh key not acquired"),
            })
            .collect();
        for r in ns.complete_batch(guards).unwrap() {
            r.unwrap();
        }
        i = end;
    }
}

/// Disk bytes per completed key: N keys completed (sync Never), then the done records
/// flushed and compacted (`Engine::compact_store`); the SST files over N, and the
/// whole directory (write-ahead log, manifest, options files included) beside it.
/// Sizes do not depend on the build profile, so any build measures them.
fn disk(keys: u64, result_bytes: usize) {
    let dir = Dir::new("disk");
    let engine = w5_engine(&dir.0, keys);
    let ns = engine.namespace("w5").unwrap();
    let result = vec![0xA5u8; result_bytes];
    let mut i = 0;
    while i < keys {
        let end = (i + 1024).min(keys);
        let ks: Vec<[u8; 20]> = (i..end).map(key).collect();
        let refs: Vec<&[u8]> = ks.iter().map(|k| &k[..]).collect();
        let guards: Vec<_> = ns
            .claim_batch(&refs)
            .unwrap()
            .into_iter()
            .map(|c| match c {
                Claim::Acquired(g) => g,
                _ => panic!("fresh key not acquired"),
            })
            .collect();
        if result.is_empty() {
            for r in ns.complete_batch(guards).unwrap() {
                r.unwrap();
            }
        } else {
            for g in guards {
                g.complete_with_result(&result).unwrap();
            }
        }
        i = end;
    }
    engine.compact_store().unwrap();
    let (mut sst, mut total) = (0u64, 0u64);
    for e in std::fs::read_dir(&dir.0).unwrap().filter_map(|e| e.ok()) {
        let len = e.metadata().map_or(0, |m| m.len());
        total += len;
        if e.file_name().to_string_lossy().ends_with(".sst") {
            sst += len;
        }
    }
    drop(ns);
    drop(engine);
    // The done records' own SST files (the claim markers' column family may have
    // flushed too, with markers and their deletions).
    let opts = rocksdb::Options::default();
    let cfs = rocksdb::DB::list_cf(&opts, &dir.0).unwrap();
    let db = rocksdb::DB::open_cf_for_read_only(&opts, &dir.0, &cfs, false).unwrap();
    let (mut done, mut done_entries) = (0u64, 0u64);
    for f in db.live_files().unwrap() {
        if f.column_family_name.starts_with("done:") {
            done += f.size as u64;
            done_entries += f.num_entries;
        }
    }
    println!("### Durable tier: disk per completed key\n");
    println!("| keys | result bytes | done records' SST files | per key | all SST files | per key | whole directory | per key |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mb = |b: u64| b as f64 / 1e6;
    let per = |b: u64| b as f64 / keys as f64;
    println!(
        "| {keys} | {result_bytes} | {:.1} MB ({done_entries} records) | {:.1} | {:.1} MB | {:.1} | {:.1} MB | {:.1} |",
        mb(done),
        per(done),
        mb(sst),
        per(sst),
        mb(total),
        per(total)
    );
    println!();
}

/// Child: reopen, time the first claim, then claim every key again.
fn w5_restart(dir: &Path, keys: u64) {
    let t = Instant::now();
    let engine = w5_engine(dir, keys);
    let ns = engine.namespace("w5").unwrap();
    let first = ns.claim(&key(0)).unwrap();
    let ready = t.elapsed();
    assert!(
        first.is_duplicate(),
        "a completed key must be a duplicate after restart"
    );
    let rss_ready = peak_rss_kib();
    let t = Instant::now();
    let mut dups = 0u64;
    for i in 0..keys {
        if ns.claim(&key(i)).unwrap().is_duplicate() {
            dups += 1;
        }
    }
    let w2 = t.elapsed();
    println!(
        "RESULT {} {} {} {} {}",
        ready.as_micros(),
        rss_ready,
        dups,
        w2.as_millis(),
        peak_rss_kib()
    );
}

fn w5(keys: u64) {
    let dir = Dir::new("w5");
    let exe = std::env::current_exe().unwrap();
    let t = Instant::now();
    let st = Command::new(&exe)
        .args(["bench", "durable", "--child-fill", &keys.to_string()])
        .arg(&dir.0)
        .status()
        .unwrap();
    assert!(st.success());
    let fill = t.elapsed();
    let out = Command::new(&exe)
        .args(["bench", "durable", "--child-restart", &keys.to_string()])
        .arg(&dir.0)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("RESULT")).unwrap();
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    let disk: u64 = std::fs::read_dir(&dir.0)
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!("### W5: restart with {keys} completed keys\n");
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| fill (claim_batch + complete_batch of 1024, sync Never) | {:.1} s |",
        fill.as_secs_f64()
    );
    println!(
        "| size on disk | {:.1} MB ({:.1} bytes per key) |",
        disk as f64 / 1e6,
        disk as f64 / keys as f64
    );
    println!(
        "| open to first claim served | {:.1} ms |",
        f[0] as f64 / 1e3
    );
    println!(
        "| peak RSS when the first claim was served | {:.1} MB |",
        f[1] as f64 / 1024.0
    );
    println!(
        "| W2 over all keys after restart: duplicates | {} of {} |",
        f[2], keys
    );
    println!(
        "| W2 over all keys after restart: claims/s | {:.0} |",
        keys as f64 / (f[3] as f64 / 1e3)
    );
    println!("| peak RSS after W2 | {:.1} MB |", f[4] as f64 / 1024.0);
    println!();
}

pub(crate) fn run(args: &[String]) -> Result<std::process::ExitCode, String> {
    run_inner(args);
    Ok(std::process::ExitCode::SUCCESS)
}

fn run_inner(args: &[String]) {
    if let Some(pos) = args.iter().position(|a| a == "--child-fill") {
        return w5_fill(Path::new(&args[pos + 2]), args[pos + 1].parse().unwrap());
    }
    if let Some(pos) = args.iter().position(|a| a == "--child-restart") {
        return w5_restart(Path::new(&args[pos + 2]), args[pos + 1].parse().unwrap());
    }
    let quick = args.iter().any(|a| a == "--quick");
    let only_w4 = args.iter().any(|a| a == "--w4");
    let only_w5 = args.iter().any(|a| a == "--w5");
    let keys = args
        .iter()
        .position(|a| a == "--keys")
        .and_then(|p| args.get(p + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 100_000 } else { 10_000_000 });
    println!("command: idem bench durable {}\n", args.join(" "));
    if args.iter().any(|a| a == "--disk") {
        let result_bytes = args
            .iter()
            .position(|a| a == "--result-bytes")
            .and_then(|p| args.get(p + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        return disk(keys, result_bytes);
    }
    if !only_w5 {
        w4(quick);
    }
    if !only_w4 {
        w5(keys);
    }
}
