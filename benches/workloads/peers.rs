//! The peers of the workloads harness, by the names `--peers` takes: the harness
//! (`benches/workloads.rs`) measures them, and `idem bench` (`src/cli/bench.rs`)
//! checks `--peers` against them before cargo builds the harness. Both include this
//! file.

/// The peers a run measures when `--peers` is not given, in its order.
pub const PEERS: [&str; 12] = [
    "idem",
    "idem-aff",
    "idem-grow",
    "idem-b64",
    "floor",
    "dashmap",
    "moka",
    "redis",
    "redis-p64",
    "jetstream",
    "jetstream-p64",
    "machine",
];

/// Peers a child measures besides [`PEERS`] (only when asked for by name).
pub const EXTRA_PEERS: [&str; 5] = ["idem-r64", "idem-claim", "cas", "cas12", "cas12m"];

/// `--peers`'s value: comma-separated names, trimmed, or the message for the first
/// that is no peer's.
pub fn parse(v: &str) -> Result<Vec<String>, String> {
    let peers: Vec<String> = v.split(',').map(|p| p.trim().to_owned()).collect();
    match peers
        .iter()
        .find(|p| !PEERS.contains(&p.as_str()) && !EXTRA_PEERS.contains(&p.as_str()))
    {
        Some(bad) => Err(format!(
            "--peers: unknown peer {bad:?}; the peers are {}",
            PEERS
                .iter()
                .chain(&EXTRA_PEERS)
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        )),
        None => Ok(peers),
    }
}
