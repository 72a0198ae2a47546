//! `idem demo` on the durable tier: a consumer process is killed with SIGKILL in the
//! middle of its stream, restarted, and the co-committed ledger proves that every
//! message took effect exactly once.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use super::consumer;
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
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--dir" => o.dir = Some(it.next().ok_or("--dir needs a value")?.into()),
                "--messages" | "-n" => o.messages = number(a, it.next())?,
                "--workers" | "-w" => o.workers = number(a, it.next())?,
                "--sync" => {
                    let v = it.next().ok_or("--sync needs a value")?;
                    consumer::parse_sync(Some(v))?;
                    o.sync = v.clone();
                }
                "--kill-at" => o.kill_at_pct = number(a, it.next())?,
                "--quick" => o.messages = 10_000,
                other => return Err(format!("demo: unknown option {other:?}")),
            }
        }
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

/// What one run of the consumer process printed.
#[derive(Debug, Default)]
struct Run {
    orphans: u64,
    acks: u64,
    dups: u64,
    finished: bool,
    killed: bool,
}

fn consume(o: &Options, dir: &std::path::Path, kill_after: Option<u64>) -> Result<Run, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args(["__consumer", "--dir"])
        .arg(dir)
        .args(["--messages", &o.messages.to_string()])
        .args(["--workers", &o.workers.to_string()])
        .args(["--sync", &o.sync])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the consumer: {e}"))?;
    let out = child.stdout.take().ok_or("no consumer output")?;
    let mut run = Run::default();
    for line in BufReader::new(out).lines() {
        let line = line.map_err(|e| e.to_string())?;
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("orphans"), Some(n)) => run.orphans = n.parse().unwrap_or(0),
            (Some("ack"), _) => run.acks += 1,
            (Some("dup"), _) => run.dups += 1,
            (Some("done"), _) => run.finished = true,
            _ => {}
        }
        if kill_after.is_some_and(|k| run.acks >= k) {
            // SIGKILL: no destructor, no flush, no goodbye.
            child.kill().map_err(|e| e.to_string())?;
            run.killed = true;
            break;
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    if !run.killed && !status.success() {
        return Err(format!("the consumer failed: {status}"));
    }
    Ok(run)
}

pub(crate) fn run(o: Options) -> Result<ExitCode, String> {
    let (dir, temporary) = match &o.dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("idem-demo-{}", std::process::id())),
            true,
        ),
    };
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    outln!(
        "idem demo: {} messages (+10% redelivered), {} workers, durable tier in {} (sync {})",
        grouped(o.messages),
        o.workers,
        dir.display(),
        o.sync
    );
    let started = Instant::now();
    let kill_after = o.messages * o.kill_at_pct / 100;
    let first = consume(&o, &dir, Some(kill_after))?;
    outln!(
        "run 1:      the consumer acknowledged {} messages, then was killed with SIGKILL",
        grouped(first.acks)
    );
    let second = consume(&o, &dir, None)?;
    if !second.finished {
        return Err("the restarted consumer did not finish its stream".into());
    }
    outln!(
        "run 2:      restarted; {} orphan claims found at open (in flight at the kill); {} acknowledged, {} duplicates skipped",
        grouped(second.orphans),
        grouped(second.acks),
        grouped(second.dups)
    );
    let elapsed = started.elapsed();

    // Verify from the ledger, which every completion co-committed atomically.
    let engine = consumer::open(&dir, consumer::parse_sync(Some(&o.sync))?, 1000)
        .map_err(|e| e.to_string())?;
    let (mut once, mut lost, mut doubled) = (0u64, 0u64, 0u64);
    for id in 0..o.messages {
        let v = engine
            .read_state("ledger", &consumer::key_of(id))
            .map_err(|e| e.to_string())?;
        match v.as_deref() {
            Some([1]) => once += 1,
            None => lost += 1,
            Some(_) => doubled += 1,
        }
    }
    let stats = engine.stats();
    drop(engine);
    outln!(
        "throughput: {} messages in {:.2} s over both runs ({} per second)",
        grouped(o.messages),
        elapsed.as_secs_f64(),
        grouped((o.messages as f64 / elapsed.as_secs_f64()) as u64)
    );
    outln!(
        "check:      {} durable reads while verifying, ledger read for every message",
        grouped(stats.durable_reads)
    );
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if lost == 0 && doubled == 0 && once == o.messages && first.killed {
        outln!(
            "verified:   every one of {} messages took effect exactly once, across a SIGKILL and a restart",
            grouped(o.messages)
        );
        Ok(ExitCode::SUCCESS)
    } else {
        outln!(
            "FAILED:     {} exactly once, {} never applied, {} applied more than once",
            grouped(once),
            grouped(lost),
            grouped(doubled)
        );
        Ok(ExitCode::FAILURE)
    }
}
