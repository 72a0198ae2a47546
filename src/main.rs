//! The `idem` command line: `idem demo` runs a simulated at-least-once consumer on the
//! engine and proves every message took effect exactly once.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match cli::run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("idem: {e}");
            eprintln!("run `idem help` for usage");
            ExitCode::from(2)
        }
    }
}
