//! Command dispatch and argument parsing (no dependencies: a handful of flags).

/// `print!` for the commands: see [`emit`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::emit(format_args!($($arg)*))
    };
}

/// `println!` for the commands: see [`emit`].
macro_rules! outln {
    () => {
        $crate::cli::emit(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::emit(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprint!` for the commands: progress and error lines on stderr. A stderr that
/// cannot be written (a closed pipe) loses them; `eprint!` would panic.
macro_rules! err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = std::io::stderr().write_fmt(format_args!($($arg)*));
    }};
}

/// `eprintln!` for the commands: see [`err!`].
macro_rules! errln {
    () => {
        err!("\n")
    };
    ($($arg:tt)*) => {
        err!("{}\n", format_args!($($arg)*))
    };
}

mod bench;
#[cfg(feature = "durable")]
mod bench_durable;
#[cfg(feature = "durable")]
mod consumer;
mod demo;
#[cfg(feature = "durable")]
mod dlq;
#[cfg(feature = "durable")]
mod durable_demo;
mod histogram;
#[cfg(feature = "durable")]
mod inspect;
mod plan;

use std::process::ExitCode;

const USAGE: &str = "\
idem: exactly-once claims for at-least-once message consumers

USAGE:
    idem demo [--dir DIR] [--messages N] [--workers N] [--sync always|never|periodic:MS]
              [--kill-at PCT] [--quick]
        The durable demo: a consumer process (worker threads claiming before
        applying, each side effect co-committed with its completion) is killed with
        SIGKILL part way through its stream, restarted on the same database, and the
        ledger is checked: every message took effect exactly once. Reports the
        orphan claims found at restart, which must include every claim held in
        flight at the kill. DIR must be new or empty (the demo never deletes
        anything in a directory it did not make); without --dir a
        temporary directory is used and removed. Exits 1 if the check fails, the
        consumer fails, or the consumer finished before it could be killed (no
        crash tested).
    idem demo --memory [--messages N] [--workers N] [--redeliver PCT] [--fail PCT] [--quick]
        The in-memory demo: redeliveries, back-to-back duplicates and failing workers
        against the hot tier alone; prints throughput, claim latency percentiles
        and bytes per key.
    idem inspect DIR [--namespace N (--key K | --key-hex H)]
        Shows a durable database: its namespaces with their done, expired and
        in-flight keys, its size on disk, and the state of one key (--key-hex: a
        key of any bytes, in hexadecimal). Read-only; works while an engine is
        serving from the database. A DIR that starts with `-` goes after `--`.
    idem dlq list DIR --namespace N [--state S]... [--class C] [--id ID]... [--all] [--limit N]
    idem dlq show DIR --namespace N --id ID
    idem dlq replay DIR --namespace N --dry-run [--schema-cmd CMD] [selection]
    idem dlq replay DIR --namespace N --exec CMD [--schema-cmd CMD] [--actor A] [selection]
    idem dlq archive DIR --namespace N --id ID... --note TEXT [--actor A]
    idem dlq health DIR --namespace N
        The dead-letter store of a namespace: a table of its messages, one
        message with its history, a replay (by default of every quarantined
        message) through the schema check and the namespace's claim state, with
        a progress bar, an archive, and its health (depth, oldest age, replay
        success rate, arrival rate against a baseline). A replay runs CMD with
        `sh -c`, the payload on stdin and the key in IDEM_KEY (its bytes; left
        unset for a key with a NUL byte) and IDEM_KEY_HEX: exit 0 applied it,
        126 or 127 (not found, not runnable) is no verdict (the message is left
        as it was and the replay stops, exit 1), anything else is a failure
        (stderr is the reason; the message goes back to quarantine, the replay
        goes on, and exits 3 at its end). --schema-cmd gets the
        payload on stdin: exit 0 and no output is compatible, exit 0 with output
        replaces the payload, any other exit is incompatible (stderr is the
        reason), except 126, 127, 129-192 (a signal in what the shell ran) or a
        signal: then the command gave no verdict
        and the replay stops before archiving anything for it. States:
        quarantined, under-review, replayed, archived. replay --exec and archive
        open the database as the application does, and list on stderr the claims
        left in flight by an earlier process that their open took over.
    idem bench [--quick] [--no-durable | --durable-only] [--source DIR]
               [--n LIST] [--threads LIST] [--runs N] [--peers LIST]
               [--moka-max-n N] [--redis-max-n N] [--redis-sample N]
               [--jetstream-max-n N] [--jetstream-sample N] [--w2-passes K]
               [--w2-shuffled | --w2-one-order] [--w2-shuffled-max-n N]
        The comparison with the peers, in one run, as markdown tables with ratios
        to idem: W1/W2 against a hashbrown floor, dashmap, moka, Redis (when
        redis-server is installed) and NATS JetStream's deduplication window (when
        nats-server is), beside the machine's own two-thread scaling,
        W2 both in W1's order and (at N <= 1000000 unless --w2-shuffled-max-n)
        shuffled (--w2-one-order: W1's order only; --w2-shuffled: shuffled only),
        through cargo and the workloads harness of the source tree DIR (default:
        where this binary was built from), then W3, W4 and W5 (--durable-only:
        those alone, without W1/W2's options; not run if the harness fails).
        --quick runs in under a minute.
    idem bench durable [--quick] [--w3] [--w4] [--w5] [--keys N] [--w3-rounds N]
                       [--prefilter-fpr F]
        Measures the mixed stream's claim latency per tier (W3; memory-only and
        the default durable tier --w3-rounds times each, default 3, shown by the
        run of median p99; every durable tier's prefilter at rate F when given),
        durable completion per sync policy beside RocksDB
        used directly (W4), and restart with N completed keys (W5), printing
        markdown tables.
    idem bench durable --disk [--quick] [--keys N] [--result-bytes N]
        Disk bytes per completed key after flush and compaction.
    idem plan --rate RATE --ttl DURATION [--retention DURATION] [--fpr P]
              [--result-bytes N]
        Prints what a namespace costs at a peak rate (500/s, 30000/m, 1.8e6/h) and
        TTL (90s, 30m, 24h, 7d): resident keys, hot-tier memory, prefilter memory,
        durable disk, and Redis's memory for the same keys; warns when the hot tier
        would not fit in the memory available (the machine's, or its cgroup's limit
        where lower). Retention defaults to 7 x TTL, the prefilter's false-positive
        rate to 0.01, stored results to none.
    idem help
        Prints this text.
    idem version
        Prints the version.
";

/// Parses `args` and runs the command. Errors are usage errors (status 2, with the
/// usage hint); a command that fails while it runs reports it itself and returns
/// status 1.
pub(crate) fn run(args: &[String]) -> Result<ExitCode, String> {
    let Some((cmd, rest)) = args.split_first() else {
        // No command is a usage error, as an unknown one is: the usage goes to
        // stderr, and the status says nothing ran.
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), "{USAGE}");
        return Ok(ExitCode::from(2));
    };
    match cmd.as_str() {
        "demo" => demo_command(rest),
        "plan" => plan::run(rest),
        #[cfg(feature = "durable")]
        "inspect" => inspect::run(rest),
        #[cfg(feature = "durable")]
        "bench" if rest.first().map(String::as_str) == Some("durable") => {
            bench_durable::run(&rest[1..])
        }
        "bench" => bench::run(rest),
        #[cfg(feature = "durable")]
        "dlq" => dlq::run(rest),
        #[cfg(feature = "durable")]
        "__dlq_replay" => dlq::crash_replay(rest),
        #[cfg(feature = "durable")]
        "__consumer" => consumer::run(consumer::Options::parse(rest)?),
        "help" | "--help" | "-h" | "version" | "--version" | "-V" if !rest.is_empty() => {
            Err(format!("{cmd} takes no arguments, not {:?}", rest[0]))
        }
        "help" | "--help" | "-h" => {
            out!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        "version" | "--version" | "-V" => {
            outln!("idem {}", env!("CARGO_PKG_VERSION"));
            Ok(ExitCode::SUCCESS)
        }
        other => Err(format!("unknown command {other:?}")),
    }
}

/// `idem demo`: on the durable tier by default, in memory with `--memory` (or when
/// this build has no durable tier).
fn demo_command(args: &[String]) -> Result<ExitCode, String> {
    let memory = match args.iter().filter(|a| *a == "--memory").count() {
        0 => false,
        1 => true,
        _ => return Err("demo: --memory is given twice".into()),
    };
    let rest: Vec<String> = args.iter().filter(|a| *a != "--memory").cloned().collect();
    #[cfg(feature = "durable")]
    if !memory {
        return durable_demo::run(durable_demo::Options::parse(&rest)?);
    }
    let _ = memory;
    demo::run(demo::Options::parse(&rest)?)
}

/// The options a command has been given so far, so that one given twice is refused:
/// of its two values one would be dropped without a word (`--dir /data/a --dir
/// /tmp/b`, `--sync always --sync never`).
#[derive(Default)]
pub(crate) struct Given(std::collections::HashSet<String>);

impl Given {
    /// Notes option `flag` of command `cmd` (give an alias as its long name, so that
    /// `-n` and `--messages` are one option); an error if it was given before.
    pub(crate) fn once(&mut self, cmd: &str, flag: &str) -> Result<(), String> {
        if self.0.insert(flag.to_owned()) {
            Ok(())
        } else {
            Err(format!("{cmd}: {flag} is given twice"))
        }
    }

    /// Whether option `flag` was given (as its long name).
    pub(crate) fn has(&self, flag: &str) -> bool {
        self.0.contains(flag)
    }
}

/// Reads the value after a flag as a number.
pub(crate) fn number<T: std::str::FromStr>(
    flag: &str,
    value: Option<&String>,
) -> Result<T, String> {
    let v = value.ok_or_else(|| format!("{flag} needs a value"))?;
    v.replace('_', "")
        .parse()
        .map_err(|_| format!("{flag}: {v:?} is not a valid number"))
}

/// 1234567 -> "1,234,567".
pub(crate) fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Writes a command's output to stdout. Output into a pipe whose reader has gone
/// (`idem dlq list ... | head -3`) ends the program at once, quietly, with status 141:
/// what a shell reports for a filter that SIGPIPE ended. (Rust runs programs with
/// SIGPIPE ignored, so that a write into a closed pipe fails instead of ending the
/// process, which `idem dlq replay` needs when a command exits without reading its
/// input; `println!` would panic here instead.) Any other failure to write is
/// reported on stderr, with status 1.
pub(crate) fn emit(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().write_fmt(args) {
        // `exit` runs no destructor: the temporary directories go first.
        for dir in EARLY_EXIT_REMOVES.lock().drain(..) {
            let _ = std::fs::remove_dir_all(dir);
        }
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        errln!("idem: writing the output failed: {e}");
        std::process::exit(1);
    }
}

/// A demo's message count: `--quick`'s (`quick`), the one `--messages` gave, or
/// `default`. Both options at once are a usage error (the later used to win).
pub(crate) fn stream_length(
    quick: Option<u64>,
    messages: Option<u64>,
    default: u64,
) -> Result<u64, String> {
    match (quick, messages) {
        (Some(_), Some(_)) => Err("demo: --quick and --messages exclude each other".into()),
        (q, m) => Ok(q.or(m).unwrap_or(default)),
    }
}

/// Temporary directories to remove if [`emit`] ends the program.
static EARLY_EXIT_REMOVES: parking_lot::Mutex<Vec<std::path::PathBuf>> =
    parking_lot::Mutex::new(Vec::new());

/// Adds `dir` to (or, `add` false, takes it off) the directories removed if the
/// program ends early in [`emit`] (`idem demo | head -3`).
#[cfg_attr(not(feature = "durable"), allow(dead_code))] // (the durable demo's)
pub(crate) fn remove_on_early_exit(dir: &std::path::Path, add: bool) {
    let mut dirs = EARLY_EXIT_REMOVES.lock();
    dirs.retain(|d| d != dir);
    if add {
        dirs.push(dir.to_path_buf());
    }
}
