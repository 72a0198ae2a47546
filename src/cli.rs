//! Command dispatch and argument parsing (no dependencies: a handful of flags).

mod demo;
mod histogram;

use std::process::ExitCode;

const USAGE: &str = "\
idem: exactly-once claims for at-least-once message consumers

USAGE:
    idem demo [--messages N] [--workers N] [--redeliver PCT] [--fail PCT] [--quick]
        Runs a simulated consumer: a stream with redeliveries and concurrent
        duplicates, worker threads that claim before applying, and a check that
        every message took effect exactly once. Prints throughput, claim latency
        percentiles and memory per key.
    idem help
        Prints this text.
    idem version
        Prints the version.
";

/// Parses `args` and runs the command. Errors are usage errors.
pub(crate) fn run(args: &[String]) -> Result<ExitCode, String> {
    let Some((cmd, rest)) = args.split_first() else {
        print!("{USAGE}");
        return Ok(ExitCode::SUCCESS);
    };
    match cmd.as_str() {
        "demo" => demo::run(demo::Options::parse(rest)?),
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        "version" | "--version" | "-V" => {
            println!("idem {}", env!("CARGO_PKG_VERSION"));
            Ok(ExitCode::SUCCESS)
        }
        other => Err(format!("unknown command {other:?}")),
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
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
