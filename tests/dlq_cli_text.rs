//! `idem dlq`: text from the application and from `--exec` commands (reasons, notes,
//! actors) is printed on one line, its control characters escaped.

#![cfg(all(feature = "durable", not(idem_loom)))]

mod util;

use std::process::Command;

use idem::{Engine, NamespaceConfig};
use util::TempDir;

fn idem(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .output()
        .expect("the idem binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether `out` holds a control character other than its line ends.
fn raw_control(out: &str) -> bool {
    out.chars().any(|c| c.is_control() && c != '\n')
}

/// A reason over two lines with an escape sequence, from an actor whose name holds
/// one, and an `--exec` command whose stderr is the same: `show` prints each
/// transition on its line and the replay each note on its line, escaped, and no
/// escape sequence reaches the terminal. (Before, both were printed raw: the reason's
/// second line fell outside the history table, and ESC went to the terminal.)
#[test]
fn show_and_replay_print_reasons_notes_and_actors_on_one_line_escaped() {
    let tmp = TempDir::new();
    let db = tmp.path().join("db");
    {
        let engine = Engine::builder()
            .namespace("orders", NamespaceConfig::new())
            .durable(&db)
            .maintenance_interval(None)
            .build()
            .unwrap();
        let dlq = engine.dlq("orders").unwrap();
        dlq.as_actor("ops\u{1b}]0;owned\u{7}")
            .unwrap()
            .quarantine(
                b"ord-1",
                b"v2:a",
                "poison:json line one\nline two \u{1b}[2J",
            )
            .unwrap();
    }
    let db = db.to_str().unwrap();
    let (code, out, err) = idem(&["dlq", "show", db, "--namespace", "orders", "--id", "1"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!raw_control(&out), "{out:?}");
    assert!(
        out.contains("reason      poison:json line one\\nline two \\u{1b}[2J\n"),
        "{out}"
    );
    let row = out
        .lines()
        .find(|l| l.contains("quarantined") && l.contains("ops"))
        .unwrap_or_else(|| panic!("no history row in:\n{out}"));
    assert!(row.contains("ops\\u{1b}]0;owned\\u{7}"), "{row}");
    assert!(
        row.ends_with("poison:json line one\\nline two \\u{1b}[2J"),
        "{row}"
    );
    let (code, out, err) = idem(&[
        "dlq",
        "replay",
        db,
        "--namespace",
        "orders",
        "--exec",
        "printf 'boom: first\\nsecond\\033[2J' >&2; exit 3",
    ]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(!raw_control(&out), "{out:?}");
    assert!(
        out.lines()
            .any(|l| l.trim_start() == "#1  boom: first\\nsecond\\u{1b}[2J"),
        "{out}"
    );
    // Stored as it came: only its printing is escaped.
    let (code, out, err) = idem(&["dlq", "show", db, "--namespace", "orders", "--id", "1"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!raw_control(&out), "{out:?}");
    assert!(
        out.contains("reason      boom: first\\nsecond\\u{1b}[2J\n"),
        "{out}"
    );
}
