//! The `idem` binary on bad input: a clear message and a non-zero status, nothing
//! changed, no panic and no hang. `idem plan` says a duration of zero, or of more
//! seconds than it can count, as what it is.

#![cfg(not(idem_loom))]

use std::process::{Command, Output};

fn idem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .output()
        .expect("the idem binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Before, both were "is not a duration: write a whole number with a unit", about
/// values that are a whole number with a unit.
#[test]
fn plan_says_a_duration_of_zero_or_of_too_many_seconds_is_that() {
    for (args, says) in [
        (
            ["--rate", "5/s", "--ttl", "0s"].as_slice(),
            "--ttl \"0s\" is no time at all",
        ),
        (
            &["--rate", "5/s", "--ttl", "1h", "--retention", "0d"],
            "--retention \"0d\" is no time at all",
        ),
        (
            &["--rate", "5/s", "--ttl", "99999999999999999999d"],
            "--ttl \"99999999999999999999d\" is longer than a namespace takes",
        ),
        (
            &[
                "--rate",
                "5/s",
                "--ttl",
                "1h",
                "--retention",
                "213503982334602d",
            ],
            "a retention is at most 2^50 ms",
        ),
    ] {
        let out = idem(&[&["plan"], args].concat());
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("is not a duration"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    // What is no duration is still said to be none.
    for bad in ["1e309", "0", "1.5h", "3w", ""] {
        let out = idem(&["plan", "--rate", "5/s", "--ttl", bad]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("is not a duration"), "{bad}: {err}");
    }
}
