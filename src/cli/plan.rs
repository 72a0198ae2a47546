//! `idem plan`: what a configuration costs (memory, disk, and Redis for comparison)
//! before it is deployed.
//!
//! `idem plan --rate 500/s --ttl 24h [--retention 7d] [--fpr 0.01] [--result-bytes 64]`

use std::fmt;
use std::process::ExitCode;
use std::time::Duration;

use idem::{MemoryLimit, Plan, Sizing, SizingError, MAX_PREFILTER_FPR, MIN_PREFILTER_FPR};

use super::grouped;

/// A bad `idem plan` argument.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ArgError {
    /// A flag without its value.
    Missing(&'static str),
    /// A required flag that was not given.
    Required(&'static str),
    /// A flag this command does not know.
    Unknown(String),
    /// A flag given twice: one of its values would be dropped without a word.
    Twice(&'static str),
    /// A rate that is not `NUMBER/s`, `/m` or `/h`.
    Rate(String),
    /// A duration that is not a whole number followed by `s`, `m`, `h` or `d`.
    Duration(&'static str, String),
    /// A value that is not a number.
    Number(&'static str, String),
    /// A `--fpr` outside the range a namespace takes, as written.
    Fpr(String),
    /// The inputs parse but are out of range.
    Sizing(SizingError),
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::Missing(flag) => write!(f, "plan: {flag} needs a value"),
            ArgError::Required(flag) => write!(f, "plan: {flag} is required"),
            ArgError::Unknown(a) => write!(f, "plan: unknown option {a:?}"),
            ArgError::Twice(flag) => write!(f, "plan: {flag} is given twice"),
            ArgError::Rate(v) => write!(
                f,
                "plan: --rate {v:?} is not a rate: write a number of keys per second, minute or hour, like 500/s, 30000/m or 1.8e6/h"
            ),
            ArgError::Duration(flag, v) => match duration_fault(v) {
                DurationFault::Zero => write!(
                    f,
                    "plan: {flag} {v:?} is no time at all: give at least 1s"
                ),
                DurationFault::TooLong if *flag == "--ttl" => write!(
                    f,
                    "plan: --ttl {v:?} is longer than a namespace takes: a TTL is at most 2^30 ticks of the coarsest tick, 60 s ({MAX_TTL_SECS} s)"
                ),
                DurationFault::TooLong => write!(
                    f,
                    "plan: {flag} {v:?} is longer than a namespace takes: a retention is at most 2^50 ms (about 35,700 years)"
                ),
                DurationFault::Malformed => write!(
                    f,
                    "plan: {flag} {v:?} is not a duration: write a whole number with a unit s, m, h or d, like 90s, 30m, 24h or 7d"
                ),
            },
            ArgError::Number(flag, v) => write!(f, "plan: {flag} {v:?} is not a valid number"),
            ArgError::Fpr(v) => write!(
                f,
                "plan: --fpr {v:?} is out of range: a namespace's prefilter takes a false-positive rate of at least {MIN_PREFILTER_FPR:e} and at most {MAX_PREFILTER_FPR}"
            ),
            ArgError::Sizing(e) => write!(f, "plan: {e}"),
        }
    }
}

/// Parses `500/s`, `30000/m`, `1.8e6/h` (underscores allowed in the number) into keys
/// per second.
pub(crate) fn parse_rate(v: &str) -> Result<f64, ArgError> {
    let bad = || ArgError::Rate(v.to_owned());
    let (num, unit) = v.trim().split_once('/').ok_or_else(bad)?;
    let per_sec = match unit.trim() {
        "s" | "sec" => 1.0,
        "m" | "min" => 60.0,
        "h" | "hour" => 3600.0,
        _ => return Err(bad()),
    };
    let n: f64 = num.trim().replace('_', "").parse().map_err(|_| bad())?;
    if !(n.is_finite() && n > 0.0) {
        return Err(bad());
    }
    Ok(n / per_sec)
}

/// The longest TTL a namespace takes, in seconds: 2^30 ticks of the coarsest tick,
/// 60 s (what [`SizingError::TtlTooLong`] says).
const MAX_TTL_SECS: u64 = 60 << 30;

/// Why a value [`parse_duration`] refused is not a duration a namespace takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DurationFault {
    /// Written as a duration, but zero (`0s`, `0_0d`).
    Zero,
    /// Written as a duration, but too many seconds to count in 64 bits, far past the
    /// longest TTL or retention.
    TooLong,
    /// Not written as a whole number and a unit.
    Malformed,
}

/// Why [`parse_duration`] refused `v`: a well-formed duration of zero or of more
/// seconds than 64 bits count is said as such, not as something that is no duration.
fn duration_fault(v: &str) -> DurationFault {
    let t = v.trim();
    let Some(split) = t.find(|c: char| !c.is_ascii_digit() && c != '_') else {
        return DurationFault::Malformed;
    };
    let (num, unit) = t.split_at(split);
    let digits = num.replace('_', "");
    if digits.is_empty() || !["s", "m", "h", "d"].contains(&unit) {
        DurationFault::Malformed
    } else if digits.bytes().all(|b| b == b'0') {
        DurationFault::Zero
    } else {
        DurationFault::TooLong
    }
}

/// Parses `90s`, `30m`, `24h`, `7d` (a whole number of seconds, minutes, hours or days).
pub(crate) fn parse_duration(flag: &'static str, v: &str) -> Result<Duration, ArgError> {
    let bad = || ArgError::Duration(flag, v.to_owned());
    let t = v.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '_')
        .ok_or_else(bad)?;
    let (num, unit) = t.split_at(split);
    let secs_per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    let n: u64 = num.replace('_', "").parse().map_err(|_| bad())?;
    let secs = n.checked_mul(secs_per).ok_or_else(bad)?;
    if secs == 0 {
        return Err(bad());
    }
    Ok(Duration::from_secs(secs))
}

/// What `idem plan` was asked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Options {
    pub(crate) sizing: Sizing,
    /// The arguments as given, for the header.
    pub(crate) rate: String,
    pub(crate) ttl: String,
    pub(crate) retention: Option<String>,
}

impl Options {
    pub(crate) fn parse(args: &[String]) -> Result<Options, ArgError> {
        let (mut rate, mut ttl, mut retention) = (None, None, None);
        let (mut fpr, mut result_bytes) = (None, None);
        let mut it = args.iter();
        let mut given = Vec::new();
        while let Some(a) = it.next() {
            let flag: &'static str = match a.as_str() {
                "--rate" => "--rate",
                "--ttl" => "--ttl",
                "--retention" => "--retention",
                "--fpr" => "--fpr",
                "--result-bytes" => "--result-bytes",
                other => return Err(ArgError::Unknown(other.to_owned())),
            };
            if given.contains(&flag) {
                return Err(ArgError::Twice(flag));
            }
            given.push(flag);
            let v = it.next().ok_or(ArgError::Missing(flag))?;
            match flag {
                "--rate" => rate = Some((parse_rate(v)?, v.clone())),
                "--ttl" => ttl = Some((parse_duration(flag, v)?, v.clone())),
                "--retention" => retention = Some((parse_duration(flag, v)?, v.clone())),
                "--fpr" => {
                    let p = v
                        .trim()
                        .parse::<f64>()
                        .map_err(|_| ArgError::Number(flag, v.clone()))?;
                    // Refused as written: a rate too small for a float reads as 0.
                    if !(MIN_PREFILTER_FPR..=MAX_PREFILTER_FPR).contains(&p) {
                        return Err(ArgError::Fpr(v.clone()));
                    }
                    fpr = Some(p)
                }
                _ => {
                    result_bytes = Some(
                        v.trim()
                            .replace('_', "")
                            .parse::<usize>()
                            .map_err(|_| ArgError::Number(flag, v.clone()))?,
                    )
                }
            }
        }
        let (rate, rate_arg) = rate.ok_or(ArgError::Required("--rate"))?;
        let (ttl, ttl_arg) = ttl.ok_or(ArgError::Required("--ttl"))?;
        let mut sizing = Sizing::new(rate, ttl);
        if let Some((r, _)) = &retention {
            sizing = sizing.retention(*r);
        }
        if let Some(p) = fpr {
            sizing = sizing.false_positive_rate(p);
        }
        if let Some(b) = result_bytes {
            sizing = sizing.result_bytes(b);
        }
        // Out-of-range values are refused here, before anything is printed.
        sizing.plan().map_err(ArgError::Sizing)?;
        Ok(Options {
            sizing,
            rate: rate_arg,
            ttl: ttl_arg,
            retention: retention.map(|(_, a)| a),
        })
    }
}

/// Bytes in binary units with three significant figures: "1.41 GiB".
pub(crate) fn bytes(b: u64) -> String {
    idem::Plan::format_bytes(b)
}

/// 43200000 -> "43_200_000", as a Rust literal.
fn underscored(n: u64) -> String {
    grouped(n).replace(',', "_")
}

/// A duration in the largest whole unit that divides it: "7d", "36h", "90s".
fn short(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// The plan as printed by `idem plan`.
pub(crate) fn render(o: &Options, plan: &Plan, memory: Option<MemoryLimit>) -> String {
    let mut out = String::new();
    let retention = match &o.retention {
        Some(r) => r.clone(),
        None => format!("{} (7 x TTL)", short(plan.retention)),
    };
    let result = if plan.result_bytes == 0 {
        "no stored result".to_owned()
    } else {
        format!("a {}-byte result per key", plan.result_bytes)
    };
    out += &format!(
        "idem plan: peak {} ({} keys/s), TTL {}, retention {}, prefilter fpr {}, {}\n\n",
        o.rate,
        per_second(plan.rate_per_sec),
        o.ttl,
        retention,
        plan.false_positive_rate,
        result
    );
    let journal_why = journal_basis(plan.namespaces_needed());
    let rows = [
        (
            "hot tier (memory)",
            grouped(plan.resident_keys),
            "rate x TTL",
            format!("{:.1} B", plan.hot_bytes_per_key),
            bytes(plan.hot_bytes),
        ),
        (
            "prefilter (memory)",
            grouped(plan.retained_keys),
            "rate x retention",
            format!("{:.2} bits", plan.prefilter_bits_per_key),
            bytes(plan.prefilter_bytes),
        ),
        (
            "durable tier (disk)",
            grouped(plan.retained_keys),
            "rate x retention",
            format!("{:.1} B", plan.durable_bytes_per_key),
            bytes(plan.durable_bytes),
        ),
        (
            "claim-marker journal (disk)",
            "-".to_owned(),
            journal_why.as_str(),
            "-".to_owned(),
            bytes(plan.journal_bytes_total()),
        ),
        (
            "Redis SET NX EX (memory)",
            grouped(plan.resident_keys),
            "rate x TTL",
            format!("{:.1} B", plan.redis_bytes_per_key),
            bytes(plan.redis_bytes),
        ),
    ];
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let w1 = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    let w2 = rows.iter().map(|r| r.2.len()).max().unwrap_or(0);
    let w3 = rows.iter().map(|r| r.3.len()).max().unwrap_or(0);
    out += &format!(
        "{:<w0$}  {:>w1$}  {:<w2$}  {:>w3$}  {}\n",
        "", "keys", "", "per key", "total"
    );
    for (what, keys, why, per, total) in &rows {
        out += &format!("{what:<w0$}  {keys:>w1$}  {why:<w2$}  {per:>w3$}  {total}\n");
    }
    // Past the most keys one namespace holds, the snippet sizes each namespace of an
    // even split, so that the engine accepts its `max_keys`.
    let namespaces = plan.namespaces_needed();
    let each = if namespaces == 1 {
        String::new()
    } else {
        format!(
            " (each of {} namespaces, the keys split evenly)",
            grouped(namespaces)
        )
    };
    out += &format!(
        "\nconfigure{each}: NamespaceConfig::new()\n    .ttl(Duration::from_secs({}))\n    .retention(Duration::from_secs({}))\n    .max_keys({})\n",
        plan.ttl.as_secs(),
        plan.retention.as_secs(),
        underscored(plan.max_keys_per_namespace())
    );
    // What else the figures assume and the defaults would not give. The prefilter's
    // default size rounds retention up to whole TTLs: a day and a half of retention
    // on a day's TTL would take the filters of two days' keys.
    let defaults = idem::NamespaceConfig::new()
        .ttl(Duration::from_secs(plan.ttl.as_secs()))
        .retention(Duration::from_secs(plan.retention.as_secs()))
        .max_keys(usize::try_from(plan.max_keys_per_namespace()).unwrap_or(usize::MAX));
    let expected = plan.expected_keys_per_namespace();
    if defaults.get_expected_keys() as u64 != expected {
        out += &format!("    .expected_keys({})\n", underscored(expected));
    }
    if plan.false_positive_rate != idem::DEFAULT_PREFILTER_FPR {
        out += &format!("    .prefilter_fpr({})\n", plan.false_positive_rate);
    }
    if plan.result_bytes > idem::DEFAULT_MAX_RESULT_LEN {
        out += &format!(
            "    .max_result_len({})\n",
            underscored(plan.result_bytes as u64)
        );
    }
    out += "\nnotes:\n";
    out += "- per-key figures were measured by the benchmark harness (BENCHMARKS.md); Stats::bytes_per_key() reports the live hot-tier figure\n";
    out += "- the prefilter figure is its generational sizing: 5 Bloom filters of 1/4 of the keys, each at fpr/5, and the ones kept a minute past their end, on average 60 s / (retention / 4) more; for the minute after each quarter of the retention ends, up to one filter more than that average (a fifth more at a retention of hours or days): the memory to provide (the textbook single filter would take -ln(fpr)/ln(2)^2 bits per key but could never drop expired keys)\n";
    out += &format!(
        "- the hot-tier figure is a fixed window's, keys claimed without a payload: a sliding window (extend_on_duplicate) adds {:.1} B a key, claim_with_payload {:.1} B\n",
        plan.sliding_bytes_per_key, plan.payload_bytes_per_key
    );
    out += "- the durable figure counts compacted SST files, not the write-ahead log or unflushed memtables\n";
    out += "- max_keys is the completed keys at peak (rate x TTL): a memory-only namespace also holds its claims in flight, so give it rate x the longest handling time more (a durable one makes room by evicting completed keys its store answers for)\n";
    out += "- the hot tier takes (and writes) the figure above when the engine is built, so a burst of new keys after a start allocates nothing and first touches no page; .preallocate(false) takes it as keys arrive instead, holding only what the keys present need, at the price of that work during the burst\n";
    if plan.result_bytes > 0 {
        out += "- Redis with a stored result: its bytes are added to the measured per-key figure, a lower bound\n";
    }
    if let Some(m) = memory {
        let share = plan.hot_bytes as f64 / m.available() as f64 * 100.0;
        out += &match m.limit {
            None => format!(
                "- this machine has {} of memory; the hot tier would take {share:.1} % of it\n",
                bytes(m.machine)
            ),
            Some(limit) => format!(
                "- this process's cgroup may use {} of memory (the machine has {}); the hot tier would take {share:.1} % of it\n",
                bytes(limit),
                bytes(m.machine)
            ),
        };
    }
    let warnings = plan.warnings(memory.map(|m| m.available()));
    if !warnings.is_empty() {
        out += "\n";
        for w in warnings {
            out += &format!("warning: {w}\n");
        }
    }
    out
}

/// How the journal row's figure is made: one file a namespace, of a fixed size.
fn journal_basis(namespaces: u64) -> String {
    if namespaces == 1 {
        "fixed: journal_slots x 64 B".to_owned()
    } else {
        format!("fixed: {} x journal_slots x 64 B", grouped(namespaces))
    }
}

/// Runs `idem plan`.
pub(crate) fn run(args: &[String]) -> Result<ExitCode, String> {
    let o = Options::parse(args).map_err(|e| e.to_string())?;
    let plan = o.sizing.plan().map_err(|e| format!("plan: {e}"))?;
    out!("{}", render(&o, &plan, MemoryLimit::of_this_process()));
    Ok(ExitCode::SUCCESS)
}

/// A rate in keys per second for the plan's first line: one decimal from 1/s up,
/// below that three significant digits (100/h is 0.0278/s, not 0.0), and below one
/// a million, an exponent.
fn per_second(rate: f64) -> String {
    if rate >= 1.0 || rate <= 0.0 || !rate.is_finite() {
        return format!("{rate:.1}");
    }
    if rate < 1e-6 {
        return format!("{rate:.2e}");
    }
    let digits = (2.0 - rate.log10().floor()) as usize;
    format!("{rate:.digits$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_low_rate_shows_in_significant_digits() {
        assert_eq!(per_second(500.0), "500.0");
        assert_eq!(per_second(1.0), "1.0");
        assert_eq!(per_second(0.5), "0.500");
        assert_eq!(per_second(0.1), "0.100");
        assert_eq!(per_second(0.01), "0.0100");
        assert_eq!(per_second(100.0 / 3600.0), "0.0278");
        assert_eq!(per_second(1.0 / 86_400.0), "0.0000116");
        assert_eq!(per_second(1e-300), "1.00e-300");
    }

    #[test]
    fn rates_per_second_minute_and_hour() {
        assert_eq!(parse_rate("500/s"), Ok(500.0));
        assert_eq!(parse_rate("30000/m"), Ok(500.0));
        assert_eq!(parse_rate("1_800_000/h"), Ok(500.0));
        assert_eq!(parse_rate("1.8e6/h"), Ok(500.0));
        assert_eq!(parse_rate("0.5/s"), Ok(0.5));
        for bad in [
            "500", "500/x", "/s", "abc/s", "0/s", "-5/s", "inf/s", "NaN/s", "",
        ] {
            assert_eq!(
                parse_rate(bad),
                Err(ArgError::Rate(bad.to_owned())),
                "{bad}"
            );
        }
    }

    #[test]
    fn durations_in_seconds_minutes_hours_days() {
        let d = |v| parse_duration("--ttl", v);
        assert_eq!(d("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(d("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(d("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(d("7d"), Ok(Duration::from_secs(604_800)));
        for bad in [
            "24",
            "h",
            "0h",
            "1.5h",
            "-1h",
            "24 h",
            "3w",
            "99999999999999999999d",
        ] {
            assert_eq!(
                d(bad),
                Err(ArgError::Duration("--ttl", bad.to_owned())),
                "{bad}"
            );
        }
        // u64 seconds overflow is an error, not a wrap or a panic; the largest
        // duration that fits is refused as a TTL no namespace accepts.
        assert!(d("213503982334602d").is_err());
        let max = Duration::from_secs(213_503_982_334_601 * 86_400);
        assert_eq!(
            Options::parse(&args(&["--rate", "1/s", "--ttl", "213503982334601d"])),
            Err(ArgError::Sizing(SizingError::TtlTooLong(max)))
        );
    }

    #[test]
    fn a_well_formed_duration_of_zero_or_too_many_seconds_is_said_so() {
        let msg = |flag, v: &str| parse_duration(flag, v).unwrap_err().to_string();
        for zero in ["0s", "0d", "0_0h", " 0m "] {
            let m = msg("--ttl", zero);
            assert!(m.contains("is no time at all"), "{m}");
        }
        assert!(msg("--retention", "0s").contains("--retention \"0s\" is no time at all"));
        for long in [
            "99999999999999999999d",
            "213503982334602d",
            "18446744073709551616s",
        ] {
            let m = msg("--ttl", long);
            assert!(m.contains("is longer than a namespace takes"), "{m}");
            assert!(m.contains(&format!("({MAX_TTL_SECS} s)")), "{m}");
            let m = msg("--retention", long);
            assert!(m.contains("a retention is at most 2^50 ms"), "{m}");
        }
        for bad in ["24", "h", "1.5h", "-1h", "24 h", "3w", "_s", "1e309", ""] {
            let m = msg("--ttl", bad);
            assert!(m.contains("is not a duration"), "{bad}: {m}");
        }
        // The limit the message gives is the one the sizing holds.
        let ttl = |secs| Sizing::new(1.0, Duration::from_secs(secs)).plan();
        assert!(ttl(MAX_TTL_SECS).is_ok());
        assert!(matches!(
            ttl(MAX_TTL_SECS + 1),
            Err(SizingError::TtlTooLong(_))
        ));
    }

    #[test]
    fn options_defaults_and_errors() {
        let o = Options::parse(&args(&["--rate", "500/s", "--ttl", "24h"])).unwrap();
        let p = o.sizing.plan().unwrap();
        assert_eq!(p.retention, Duration::from_secs(7 * 86_400));
        assert_eq!(p.false_positive_rate, 0.01);
        assert_eq!(p.result_bytes, 0);
        let o = Options::parse(&args(&[
            "--ttl",
            "1h",
            "--rate",
            "10/s",
            "--retention",
            "2d",
            "--fpr",
            "0.001",
            "--result-bytes",
            "64",
        ]))
        .unwrap();
        let p = o.sizing.plan().unwrap();
        assert_eq!(
            (p.resident_keys, p.retained_keys, p.result_bytes),
            (36_000, 1_728_000, 64)
        );
        assert_eq!(p.false_positive_rate, 0.001);

        let e = |v: &[&str]| Options::parse(&args(v)).unwrap_err();
        assert_eq!(e(&["--ttl", "1h"]), ArgError::Required("--rate"));
        assert_eq!(e(&["--rate", "1/s"]), ArgError::Required("--ttl"));
        assert_eq!(e(&["--rate"]), ArgError::Missing("--rate"));
        assert_eq!(e(&["--bogus"]), ArgError::Unknown("--bogus".into()));
        // Before, the later value won without a word.
        assert_eq!(
            e(&["--rate", "1/s", "--ttl", "1h", "--rate", "2/s"]),
            ArgError::Twice("--rate")
        );
        assert_eq!(
            e(&["--rate", "1/s", "--ttl", "1h", "--fpr", "x"]),
            ArgError::Number("--fpr", "x".into())
        );
        assert_eq!(
            e(&["--rate", "1/s", "--ttl", "1h", "--result-bytes", "-1"]),
            ArgError::Number("--result-bytes", "-1".into())
        );
        assert_eq!(
            e(&["--rate", "1/s", "--ttl", "1h", "--fpr", "1.5"]),
            ArgError::Fpr("1.5".into())
        );
        assert_eq!(
            e(&["--rate", "1/s", "--ttl", "2d", "--retention", "1d"]),
            ArgError::Sizing(SizingError::RetentionShorterThanTtl)
        );
        // The engine's ranges: fpr at most 0.5, retention at most 2^50 ms (13,031,248.9
        // days).
        assert!(Options::parse(&args(&["--rate", "1/s", "--ttl", "1h", "--fpr", "0.5"])).is_ok());
        assert_eq!(
            e(&["--rate", "1/s", "--ttl", "1h", "--fpr", "0.6"]),
            ArgError::Fpr("0.6".into())
        );
        assert!(Options::parse(&args(&[
            "--rate",
            "1/s",
            "--ttl",
            "1h",
            "--retention",
            "13031248d"
        ]))
        .is_ok());
        assert_eq!(
            e(&["--rate", "1/s", "--ttl", "1h", "--retention", "13031249d"]),
            ArgError::Sizing(SizingError::RetentionTooLong(Duration::from_secs(
                13_031_249 * 86_400
            )))
        );
        // Figures too large to print and rates too small to size are refused, in
        // words, before anything is printed.
        let huge = e(&["--rate", "1e30/s", "--ttl", "24h"]);
        assert_eq!(
            huge,
            ArgError::Sizing(SizingError::TooLarge {
                figure: "resident keys (rate x TTL)"
            })
        );
        assert!(huge.to_string().contains("too large to plan"), "{huge}");
        // A rate below the smallest a namespace takes, or one that reads as 0 (too
        // small for a float), is refused as written.
        assert!(Options::parse(&args(&["--rate", "1/s", "--ttl", "1h", "--fpr", "1e-18"])).is_ok());
        for tiny in ["9.9e-19", "4e-324", "1e-400", "0", "NaN"] {
            let err = e(&["--rate", "1/s", "--ttl", "1h", "--fpr", tiny]);
            assert_eq!(err, ArgError::Fpr(tiny.into()));
            assert!(err.to_string().contains(&format!("{tiny:?}")), "{err}");
            assert!(err.to_string().contains("at least 1e-18"), "{err}");
        }
        // Every message names the flag and says what to write.
        assert!(e(&["--rate", "5", "--ttl", "1h"])
            .to_string()
            .contains("500/s"));
        assert!(e(&["--rate", "5/s", "--ttl", "1"])
            .to_string()
            .contains("24h"));
    }

    fn machine_of(bytes: u64) -> MemoryLimit {
        MemoryLimit {
            machine: bytes,
            limit: None,
        }
    }

    #[test]
    fn a_cgroups_limit_below_the_machines_memory_is_what_the_plan_is_checked_against() {
        // A limit below the machine's memory is what the plan is checked against.
        let o = Options::parse(&args(&["--rate", "500/s", "--ttl", "24h"])).unwrap();
        let p = o.sizing.plan().unwrap();
        let limited = MemoryLimit {
            machine: 64 << 30,
            limit: Some(1 << 30),
        };
        let text = render(&o, &p, Some(limited));
        let line = format!(
            "- this process's cgroup may use {} of memory (the machine has {})",
            bytes(1 << 30),
            bytes(64 << 30)
        );
        assert!(text.contains(&line), "{text}");
        assert!(text.contains("warning: the hot tier needs"), "{text}");
        assert!(!render(&o, &p, Some(machine_of(64 << 30))).contains("warning:"));
    }

    #[test]
    fn render_shows_every_figure_and_warns_past_memory() {
        let o = Options::parse(&args(&["--rate", "500/s", "--ttl", "24h"])).unwrap();
        let p = o.sizing.plan().unwrap();
        let text = render(&o, &p, Some(machine_of(64 << 30)));
        assert!(text.contains("43,200,000"), "{text}");
        assert!(text.contains("302,400,000"), "{text}");
        assert!(text.contains(&bytes(p.hot_bytes)), "{text}");
        assert!(text.contains(&bytes(p.prefilter_bytes)), "{text}");
        assert!(text.contains(&bytes(p.durable_bytes)), "{text}");
        assert!(text.contains("claim-marker journal (disk)"), "{text}");
        assert!(text.contains(&bytes(p.journal_bytes)), "{text}");
        assert!(text.contains(&bytes(p.redis_bytes)), "{text}");
        assert!(text.contains(".max_keys(43_200_000)"), "{text}");
        // The hot tier's figure says what it leaves out.
        assert!(
            text.contains("a sliding window (extend_on_duplicate) adds 8.1 B a key"),
            "{text}"
        );
        assert!(
            text.contains(".retention(Duration::from_secs(604800))"),
            "{text}"
        );
        assert!(!text.contains("warning:"), "{text}");
        let small = render(&o, &p, Some(machine_of(1 << 30)));
        assert!(small.contains("warning: the hot tier needs"), "{small}");
    }

    #[test]
    fn the_notes_say_when_the_hot_tier_takes_its_memory() {
        let o = Options::parse(&args(&["--rate", "10/s", "--ttl", "1h"])).unwrap();
        let text = render(&o, &o.sizing.plan().unwrap(), None);
        let note = text
            .lines()
            .find(|l| l.contains(".preallocate(false)"))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(note.starts_with(
            "- the hot tier takes (and writes) the figure above when the engine is built"
        ));
        assert!(note.contains("as keys arrive"), "{note}");
    }

    #[test]
    fn the_snippet_sets_what_the_figures_assume_beyond_the_defaults() {
        let plain = Options::parse(&args(&["--rate", "10/s", "--ttl", "1h"])).unwrap();
        let text = render(&plain, &plain.sizing.plan().unwrap(), None);
        assert!(!text.contains(".prefilter_fpr("), "{text}");
        assert!(!text.contains(".max_result_len("), "{text}");
        let o = Options::parse(&args(&[
            "--rate",
            "10/s",
            "--ttl",
            "1h",
            "--fpr",
            "0.001",
            "--result-bytes",
            "100000",
        ]))
        .unwrap();
        let text = render(&o, &o.sizing.plan().unwrap(), None);
        // A result over the default limit would be refused at completion.
        assert!(text.contains("    .max_result_len(100_000)\n"), "{text}");
        assert!(text.contains("    .prefilter_fpr(0.001)\n"), "{text}");
        // At the default limit, nothing to set.
        let at = Options::parse(&args(&[
            "--rate",
            "10/s",
            "--ttl",
            "1h",
            "--result-bytes",
            "65536",
        ]))
        .unwrap();
        let text = render(&at, &at.sizing.plan().unwrap(), None);
        assert!(!text.contains(".max_result_len("), "{text}");
    }

    #[test]
    fn the_snippet_sizes_the_prefilter_for_the_planned_keys_where_the_default_would_not() {
        // Retention a whole number of TTLs: the default is the plan's figure.
        let whole = Options::parse(&args(&[
            "--rate",
            "500/s",
            "--ttl",
            "24h",
            "--retention",
            "48h",
        ]))
        .unwrap();
        let p = whole.sizing.plan().unwrap();
        let default = idem::NamespaceConfig::new()
            .ttl(p.ttl)
            .retention(p.retention)
            .max_keys(p.max_keys_per_namespace() as usize);
        assert_eq!(default.get_expected_keys() as u64, p.retained_keys);
        assert!(!render(&whole, &p, None).contains(".expected_keys("));
        // A day and a half on a day's TTL: the default rounds up to two days' keys.
        let o = Options::parse(&args(&[
            "--rate",
            "500/s",
            "--ttl",
            "24h",
            "--retention",
            "36h",
        ]))
        .unwrap();
        let p = o.sizing.plan().unwrap();
        assert_eq!(p.retained_keys, 500 * 36 * 3600);
        let text = render(&o, &p, None);
        assert!(text.contains("    .expected_keys(64_800_000)\n"), "{text}");
        // Split over namespaces, each is sized for its share.
        let big = Options::parse(&args(&[
            "--rate",
            "2147483648/s",
            "--ttl",
            "1s",
            "--retention",
            "3s",
        ]))
        .unwrap();
        let p = big.sizing.plan().unwrap();
        assert_eq!(p.namespaces_needed(), 2);
        let default = idem::NamespaceConfig::new()
            .ttl(p.ttl)
            .retention(p.retention)
            .max_keys(p.max_keys_per_namespace() as usize);
        assert_eq!(
            p.expected_keys_per_namespace(),
            default.get_expected_keys() as u64
        );
        assert!(!render(&big, &p, None).contains(".expected_keys("));
    }

    #[test]
    fn past_one_namespace_the_snippet_sizes_each_of_an_even_split() {
        // 2^31 resident keys: one more than a namespace holds.
        let o = Options::parse(&args(&["--rate", "2147483648/s", "--ttl", "1s"])).unwrap();
        let p = o.sizing.plan().unwrap();
        assert_eq!(p.resident_keys, 1 << 31);
        let text = render(&o, &p, None);
        assert!(
            text.contains(
                "configure (each of 2 namespaces, the keys split evenly): NamespaceConfig::new()"
            ),
            "{text}"
        );
        assert!(text.contains(".max_keys(1_073_741_824)\n"), "{text}");
        // A journal file a namespace: two of them. (Its column as wide as the
        // prefilter's "127.04 bits": a retention of 7 s keeps 34 generations more
        // than five on average, a minute past their end.)
        assert_eq!(p.journal_bytes_total(), 2 * p.journal_bytes);
        assert!(
            text.contains(&format!(
                "fixed: 2 x journal_slots x 64 B            -  {}\n",
                bytes(2 * p.journal_bytes)
            )),
            "{text}"
        );
        assert!(!text.contains(".max_keys(2_147_483_648)"), "{text}");
        assert!(text.contains("warning: 2147483648 resident keys"), "{text}");
    }

    /// The README's worked example, `idem plan --rate 500/s --ttl 24h`, is what the
    /// command prints: everything but the line on this machine's memory compares
    /// exactly, and that line has the form the command prints.
    #[test]
    fn the_readme_example_is_the_printed_plan() {
        const README: &str = include_str!("../../README.md");
        const COMMAND: &str = "$ idem plan --rate 500/s --ttl 24h\n";
        const MACHINE: &str = "- this machine has ";
        let start = README.find(COMMAND).expect("the README shows the example") + COMMAND.len();
        let block = &README[start..];
        let block = &block[..block.find("```").expect("the example's block ends")];
        let machine: Vec<&str> = block.lines().filter(|l| l.starts_with(MACHINE)).collect();
        assert_eq!(machine.len(), 1, "{block}");
        let without_machine: String = block
            .lines()
            .filter(|l| !l.starts_with(MACHINE))
            .map(|l| format!("{l}\n"))
            .collect();

        let o = Options::parse(&args(&["--rate", "500/s", "--ttl", "24h"])).unwrap();
        let p = o.sizing.plan().unwrap();
        assert_eq!(render(&o, &p, None), without_machine);
        // With a memory given, the only line added is the machine's, in the README's
        // form, at the README's place (the end).
        let with_memory = render(&o, &p, Some(machine_of(64 << 30)));
        let printed = with_memory
            .strip_prefix(without_machine.as_str())
            .expect("the machine line comes last");
        let (readme_line, printed_line) = (machine[0], printed.trim_end_matches('\n'));
        let form = |l: &str| -> Option<(String, String)> {
            let (memory, share) = l
                .strip_prefix(MACHINE)?
                .strip_suffix(" % of it")?
                .split_once(" of memory; the hot tier would take ")?;
            Some((memory.to_owned(), share.to_owned()))
        };
        assert!(form(printed_line).is_some(), "{printed_line}");
        let (memory, share) = form(readme_line).expect("the README's machine line");
        // Its share is the hot tier's over its memory, as the command works it out.
        let unit = [("GiB", 1u64 << 30), ("TiB", 1 << 40), ("MiB", 1 << 20)]
            .into_iter()
            .find_map(|(u, m)| {
                Some((
                    memory.strip_suffix(&format!(" {u}"))?.parse::<f64>().ok()?,
                    m,
                ))
            })
            .expect("a memory in MiB, GiB or TiB");
        let m = (unit.0 * unit.1 as f64) as u64;
        assert_eq!(bytes(m), memory);
        assert_eq!(
            share,
            format!("{:.1}", p.hot_bytes as f64 / m as f64 * 100.0),
            "{readme_line}"
        );
    }

    #[test]
    fn bytes_and_short_durations() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.50 KiB");
        assert_eq!(bytes(5 << 30), "5.00 GiB");
        assert_eq!(short(Duration::from_secs(7 * 86_400)), "7d");
        assert_eq!(short(Duration::from_secs(36 * 3600)), "36h");
        assert_eq!(short(Duration::from_secs(90)), "90s");
    }
}
