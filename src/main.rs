//! The `idem` command line: `idem demo` runs a simulated at-least-once consumer on the
//! engine (by default with the durable tier, killed with SIGKILL part way and
//! restarted) and proves every message took effect exactly once.

mod cli;

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = Vec::new();
    for arg in std::env::args_os().skip(1) {
        match arg.into_string() {
            Ok(a) => args.push(a),
            Err(raw) => {
                // (A stderr that cannot be written loses the message: no panic.)
                let _ = writeln!(
                    std::io::stderr(),
                    "idem: an argument is not valid UTF-8: {}",
                    raw.to_string_lossy()
                );
                return ExitCode::from(2);
            }
        }
    }
    match cli::run(&args) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "idem: {e}\nrun `idem help` for usage");
            ExitCode::from(2)
        }
    }
}
