//! `idem bench`: the comparison with the peers, in one run.
//!
//! W1 and W2 (memory-only idem against the hashbrown floor, dashmap, moka, Redis and
//! NATS JetStream's deduplication window, and a reference of the machine's own two-thread scaling) run in the workloads
//! harness, `benches/workloads.rs`: the peers are development dependencies, and the
//! harness counts heap bytes with a global allocator that the `idem` binary itself
//! should not carry. This command builds and runs it through
//! cargo in the source tree (release profile, without the durable feature, which
//! W1/W2 do not use), then, if the harness succeeded, runs W3, W4 and W5 in this
//! binary (`idem bench durable`) when it has the durable tier.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// The harness's peer names, from the file it takes them from.
#[path = "../../benches/workloads/peers.rs"]
mod workload_peers;

/// What `idem bench` was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Options {
    quick: bool,
    durable: bool,
    /// `--no-durable` was given (W3-W5 left out on purpose).
    no_durable: bool,
    workloads: bool,
    source: PathBuf,
    /// Passed to the workloads harness as they are.
    harness_args: Vec<String>,
}

/// Options of the workloads harness that take a value, passed through.
const HARNESS_VALUED: [&str; 11] = [
    "--n",
    "--threads",
    "--runs",
    "--peers",
    "--moka-max-n",
    "--redis-max-n",
    "--redis-sample",
    "--jetstream-max-n",
    "--jetstream-sample",
    "--w2-passes",
    "--w2-shuffled-max-n",
];

/// The most threads a `--threads` item asks for. The harness starts that many
/// threads for each measurement, and a spawn the system refuses ends it with a
/// panic (tens of thousands are past most systems' limits), after cargo built it.
const MAX_THREADS: usize = 1024;

/// Checks a value for the workloads harness here, so that a bad one is a usage
/// error before anything runs (the harness itself would stop with a panic, after
/// cargo built it). `--n` and `--threads` take comma-separated lists; `--peers`
/// the names of the harness's peers (which it checks the same way, from the same
/// list); every other option one number (`_` allowed as a
/// digit separator but in `--runs` and `--w2-passes`), at least 1 for `--runs`,
/// `--threads` and `--w2-passes`; each `--n` from 1 to `MAX_KEYS_LIMIT` (a
/// namespace's largest `max_keys`, which the harness sets to it); each `--threads`
/// at most [`MAX_THREADS`].
fn check_harness_value(flag: &str, v: &str) -> Result<(), String> {
    if flag == "--peers" {
        if v.split(',').any(|p| p.trim().is_empty()) {
            return Err(format!(
                "bench: {flag} needs comma-separated peer names, not {v:?}"
            ));
        }
        return workload_peers::parse(v)
            .map(drop)
            .map_err(|why| format!("bench: {why}"));
    }
    let items: Vec<&str> = if matches!(flag, "--n" | "--threads") {
        v.split(',').map(str::trim).collect()
    } else {
        vec![v]
    };
    // (A sample of 0 would read as "the default" in the harness.)
    let positive = matches!(
        flag,
        "--runs" | "--threads" | "--w2-passes" | "--redis-sample" | "--jetstream-sample"
    );
    // The harness reads these two as plain numbers, without `_` separators.
    let plain = matches!(flag, "--runs" | "--w2-passes");
    for item in items {
        let digits = if plain {
            item.to_owned()
        } else {
            item.replace('_', "")
        };
        match digits.parse::<usize>() {
            Ok(0) if positive => return Err(format!("bench: {flag} must be at least 1")),
            Ok(n) if flag == "--n" && !(1..=idem::MAX_KEYS_LIMIT).contains(&n) => {
                return Err(format!(
                    "bench: each --n must be from 1 to {} (a namespace's largest max_keys), not {item}",
                    idem::MAX_KEYS_LIMIT
                ))
            }
            Ok(n) if flag == "--threads" && n > MAX_THREADS => {
                return Err(format!(
                    "bench: each --threads is at most {MAX_THREADS}, not {item}"
                ))
            }
            Ok(_) => {}
            Err(_) => {
                return Err(format!(
                    "bench: {flag} needs {}, not {v:?}",
                    if matches!(flag, "--n" | "--threads") {
                        "a comma-separated list of whole numbers"
                    } else {
                        "a whole number"
                    }
                ))
            }
        }
    }
    Ok(())
}

impl Options {
    pub(crate) fn parse(args: &[String]) -> Result<Options, String> {
        let mut o = Options {
            quick: false,
            durable: cfg!(feature = "durable"),
            no_durable: false,
            workloads: true,
            source: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
            harness_args: Vec::new(),
        };
        let mut it = args.iter();
        let mut given = crate::cli::Given::default();
        // The first option given that only W1/W2 use (the harness's, `--source`).
        let mut w1_w2_only = None;
        // The values, checked once every option is known: an option given twice is
        // said so whatever its first value (`--n 0 --n 5`).
        let mut values = Vec::new();
        while let Some(a) = it.next() {
            given.once("bench", a)?;
            if !matches!(a.as_str(), "--quick" | "--no-durable" | "--durable-only") {
                w1_w2_only.get_or_insert_with(|| a.clone());
            }
            match a.as_str() {
                "--quick" => {
                    o.quick = true;
                    // First: the harness sets the quick sizes where it meets the
                    // flag, over any `--n` or `--runs` given before it.
                    o.harness_args.insert(0, a.clone());
                }
                "--w2-shuffled" | "--w2-one-order" => o.harness_args.push(a.clone()),
                "--no-durable" => {
                    o.durable = false;
                    o.no_durable = true;
                }
                "--durable-only" => o.workloads = false,
                "--source" => {
                    o.source = it.next().ok_or("bench: --source needs a directory")?.into()
                }
                flag if HARNESS_VALUED.contains(&flag) => {
                    let v = it.next().ok_or(format!("bench: {flag} needs a value"))?;
                    values.push((flag, v));
                    o.harness_args.push(a.clone());
                    o.harness_args.push(v.clone());
                }
                other => return Err(format!("bench: unknown option {other:?}")),
            }
        }
        for (flag, v) in values {
            check_harness_value(flag, v)?;
        }
        if !o.workloads && o.no_durable {
            return Err("bench: --durable-only and --no-durable exclude each other".into());
        }
        if !o.workloads && !o.durable {
            return Err("bench: --durable-only needs a build with the durable tier".into());
        }
        // W2's orders: the harness runs shuffled only when given both, and bounds
        // the second order alone with `--w2-shuffled-max-n`.
        let has = |flag: &str| given.has(flag);
        if has("--w2-shuffled") && has("--w2-one-order") {
            return Err("bench: --w2-shuffled and --w2-one-order exclude each other".into());
        }
        if let Some(order) = ["--w2-shuffled", "--w2-one-order"]
            .into_iter()
            .find(|f| has(f) && has("--w2-shuffled-max-n"))
        {
            return Err(format!(
                "bench: --w2-shuffled-max-n bounds W2's second order, which {order} leaves out"
            ));
        }
        // Dropped without a word, it would leave the run other than asked.
        if let (false, Some(flag)) = (o.workloads, w1_w2_only) {
            return Err(format!(
                "bench: {flag} applies to W1/W2, which --durable-only leaves out"
            ));
        }
        Ok(o)
    }

    /// What the report says when W3-W5 cannot run because this binary lacks the
    /// durable tier (and they were not left out with `--no-durable`), so that a
    /// report without them says why instead of just ending after W2.
    fn durable_skip_notice(&self, built_with_durable: bool) -> Option<&'static str> {
        (!built_with_durable && !self.no_durable).then_some(
            "> W3-W5 were not run: this `idem` binary was built without the durable tier \
             (cargo feature `durable`). Build it with the default features to run them.",
        )
    }

    /// The cargo command line that runs the workloads harness.
    fn cargo_args(&self) -> Vec<String> {
        let mut v: Vec<String> = [
            "bench",
            "--no-default-features",
            "--bench",
            "workloads",
            "--",
        ]
        .map(String::from)
        .to_vec();
        v.extend(self.harness_args.iter().cloned());
        v
    }
}

/// Runs `idem bench`.
pub(crate) fn run(args: &[String]) -> Result<ExitCode, String> {
    let o = Options::parse(args)?;
    let start = std::time::Instant::now();
    if o.workloads {
        if !o.source.join("benches/workloads.rs").is_file() {
            return Err(format!(
                "bench: the workloads harness is not at {}; give the source tree with --source DIR (or use --durable-only)",
                o.source.join("benches/workloads.rs").display()
            ));
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        errln!("idem bench: cargo {}", o.cargo_args().join(" "));
        match Command::new(&cargo)
            .args(o.cargo_args())
            .current_dir(&o.source)
            .status()
        {
            Ok(status) if status.success() => {}
            // Its report is cut short or marks a failure: the run ends there, with
            // no W3-W5 after a W1/W2 that did not come out whole.
            Ok(status) => {
                errln!("idem bench: the workloads harness failed ({status}); W3-W5 not run");
                return Ok(ExitCode::FAILURE);
            }
            // A failure to run, not a usage error: status 1, no usage text.
            Err(e) => {
                errln!("idem bench: cannot run cargo ({e}); W1/W2 need a Rust toolchain");
                return Ok(ExitCode::FAILURE);
            }
        }
        outln!();
    }
    if let Some(notice) = o.durable_skip_notice(cfg!(feature = "durable")) {
        errln!("idem bench: {notice}");
        outln!("{notice}");
    }
    // A correctness failure in W3-W5 (not a missed target) fails the run.
    #[cfg(feature = "durable")]
    let ok = !o.durable || {
        let mut d = Vec::new();
        if o.quick {
            d.push("--quick".to_owned());
        }
        super::bench_durable::run(&d)? == ExitCode::SUCCESS
    };
    #[cfg(not(feature = "durable"))]
    let ok = true;
    // The full run is to stay within 15 minutes on 2 cores (the harness's build
    // included: it is part of what a user waits for).
    let secs = start.elapsed().as_secs();
    outln!(
        "Wall time of this `idem bench`: {} min {} s.",
        secs / 60,
        secs % 60
    );
    errln!("idem bench: done in {} min {} s", secs / 60, secs % 60);
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_bad_harness_value_is_a_usage_error_before_anything_runs() {
        for (flag, bad) in [
            ("--runs", "abc"),
            ("--runs", "0"),
            ("--runs", "1_0"),
            ("--w2-passes", "2_0"),
            ("--n", "1000000,x"),
            ("--n", "1000,0"),
            ("--n", "2147483648"),
            ("--threads", "1,0"),
            // Each a thread of the harness: past what the system gives, its spawn
            // panicked (after cargo had built it).
            ("--threads", "2,100000"),
            ("--threads", "18446744073709551615"),
            ("--w2-passes", "0"),
            ("--moka-max-n", "-5"),
            ("--redis-sample", "1e6"),
            ("--peers", "idem,,redis"),
        ] {
            let err = Options::parse(&args(&[flag, bad])).unwrap_err();
            assert!(err.contains(flag), "{flag} {bad}: {err}");
        }
        assert!(Options::parse(&args(&["--threads", "1,1024"])).is_ok());
        let o = Options::parse(&args(&["--n", "1_000_000, 2000", "--redis-max-n", "0"])).unwrap();
        assert!(o
            .cargo_args()
            .join(" ")
            .ends_with("--n 1_000_000, 2000 --redis-max-n 0"));
    }

    #[test]
    fn an_unknown_peer_is_a_usage_error_before_cargo_builds_the_harness() {
        // Before, only the harness refused it, after cargo had built it.
        for bad in ["bogus", "idem,redsi", "idem, floor ,Moka"] {
            let err = Options::parse(&args(&["--peers", bad])).unwrap_err();
            assert!(
                err.contains("--peers") && err.contains("unknown peer"),
                "{bad}: {err}"
            );
            // The names it takes, listed.
            assert!(err.contains("dashmap") && err.contains("cas12m"), "{err}");
        }
        // Every name the harness takes, the default set's and those measured only
        // when named, trimmed as the harness trims them.
        let all = workload_peers::PEERS
            .iter()
            .chain(&workload_peers::EXTRA_PEERS)
            .copied()
            .collect::<Vec<_>>()
            .join(" , ");
        assert!(Options::parse(&args(&["--peers", &all])).is_ok(), "{all}");
    }

    #[test]
    fn harness_options_pass_through_to_cargo() {
        let o =
            Options::parse(&args(&["--quick", "--peers", "idem,redis", "--runs", "5"])).unwrap();
        assert!(o.quick);
        assert_eq!(
            o.cargo_args().join(" "),
            "bench --no-default-features --bench workloads -- --quick --peers idem,redis --runs 5"
        );
        let o = Options::parse(&args(&[
            "--n",
            "1000000",
            "--w2-passes",
            "10",
            "--w2-shuffled",
        ]))
        .unwrap();
        assert_eq!(
            o.cargo_args().join(" "),
            "bench --no-default-features --bench workloads -- --n 1000000 --w2-passes 10 --w2-shuffled"
        );
        // `--quick` goes first, so that the sizes given with it are the ones run.
        let o = Options::parse(&args(&["--n", "5000", "--runs", "2", "--quick"])).unwrap();
        assert_eq!(
            o.cargo_args().join(" "),
            "bench --no-default-features --bench workloads -- --quick --n 5000 --runs 2"
        );
        let o = Options::parse(&args(&["--w2-one-order"])).unwrap();
        assert_eq!(
            o.cargo_args().join(" "),
            "bench --no-default-features --bench workloads -- --w2-one-order"
        );
        let o = Options::parse(&args(&["--w2-shuffled-max-n", "10000000"])).unwrap();
        assert_eq!(
            o.cargo_args().join(" "),
            "bench --no-default-features --bench workloads -- --w2-shuffled-max-n 10000000"
        );
        let o = Options::parse(&args(&[
            "--jetstream-max-n",
            "100000",
            "--jetstream-sample",
            "500",
        ]))
        .unwrap();
        assert_eq!(
            o.cargo_args().join(" "),
            "bench --no-default-features --bench workloads -- --jetstream-max-n 100000 --jetstream-sample 500"
        );
        let o = Options::parse(&args(&["--no-durable"])).unwrap();
        assert!(!o.durable && o.workloads);
    }

    #[test]
    fn a_binary_without_the_durable_tier_says_why_w3_to_w5_are_missing() {
        let o = Options::parse(&args(&["--quick"])).unwrap();
        let notice = o.durable_skip_notice(false).expect("a notice");
        assert!(
            notice.contains("W3-W5") && notice.contains("`durable`"),
            "{notice}"
        );
        assert_eq!(o.durable_skip_notice(true), None, "they run");
        let o = Options::parse(&args(&["--no-durable"])).unwrap();
        assert_eq!(o.durable_skip_notice(false), None, "left out on purpose");
    }

    #[test]
    fn durable_only_and_no_durable_together_are_said_to_exclude_each_other() {
        // Before, the error said `--durable-only` needs a build with the durable
        // tier, in a build that has it.
        for pair in [
            ["--durable-only", "--no-durable"],
            ["--no-durable", "--durable-only"],
        ] {
            let err = Options::parse(&args(&pair)).unwrap_err();
            assert!(err.contains("exclude each other"), "{pair:?}: {err}");
            assert!(!err.contains("needs a build"), "{pair:?}: {err}");
        }
    }

    // (Without the durable tier, `--durable-only` is refused for that first.)
    #[cfg(feature = "durable")]
    #[test]
    fn options_of_w1_w2_with_durable_only_are_refused() {
        // Before, each was dropped without a word: `--durable-only` runs no W1/W2.
        for opt in [
            &["--n", "1000"][..],
            &["--runs", "2"],
            &["--peers", "idem"],
            &["--w2-shuffled"],
            &["--w2-one-order"],
            &["--source", "/tmp"],
        ] {
            for durable_first in [true, false] {
                let mut v = opt.to_vec();
                if durable_first {
                    v.insert(0, "--durable-only");
                } else {
                    v.push("--durable-only");
                }
                let err = Options::parse(&args(&v)).unwrap_err();
                assert!(
                    err.contains(opt[0]) && err.contains("--durable-only"),
                    "{v:?}: {err}"
                );
            }
        }
        // `--quick` applies to W3-W5 too.
        let o = Options::parse(&args(&["--durable-only", "--quick"])).unwrap();
        assert!(o.quick && !o.workloads);
    }

    #[test]
    fn w2_order_options_that_exclude_each_other_are_refused() {
        // Before, the harness ran W2 shuffled only and dropped `--w2-one-order`, and
        // dropped `--w2-shuffled-max-n` beside either (it bounds the second order).
        for pair in [
            ["--w2-shuffled", "--w2-one-order"],
            ["--w2-one-order", "--w2-shuffled"],
        ] {
            let err = Options::parse(&args(&pair)).unwrap_err();
            assert!(err.contains("exclude each other"), "{pair:?}: {err}");
        }
        for order in ["--w2-shuffled", "--w2-one-order"] {
            for v in [
                [order, "--w2-shuffled-max-n", "1000"],
                ["--w2-shuffled-max-n", "1000", order],
            ] {
                let err = Options::parse(&args(&v)).unwrap_err();
                assert!(
                    err.contains("--w2-shuffled-max-n") && err.contains(order),
                    "{v:?}: {err}"
                );
            }
        }
    }

    #[test]
    fn bad_options_are_refused() {
        assert!(Options::parse(&args(&["--bogus"]))
            .unwrap_err()
            .contains("--bogus"));
        assert!(Options::parse(&args(&["--runs"]))
            .unwrap_err()
            .contains("--runs needs a value"));
        assert!(Options::parse(&args(&["--source"])).is_err());
        assert!(Options::parse(&args(&["--durable-only", "--no-durable"])).is_err());
        for flag in ["--redis-sample", "--jetstream-sample"] {
            assert!(Options::parse(&args(&[flag, "0"]))
                .unwrap_err()
                .contains("must be at least 1"));
            assert!(Options::parse(&args(&[flag, "1_000"])).is_ok());
        }
    }
}
