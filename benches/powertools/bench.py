"""W1 (fresh) and W2 (duplicate) of ../shared/WORKLOAD.md for AWS Powertools for Python's
idempotency utility, with its Redis persistence layer, against a redis-server on
loopback; beside it, plain `SET key 1 NX EX 3600` from redis-py on the same server.

    python bench.py --port PORT [--n 20000] [--runs 3] [--command "..."]

Run through run.sh, which makes the venv and starts and stops the server.

Key i is `ord-{i:016x}` (20 ASCII bytes); the keys are taken in the order of the
scramble i * 0x9E3779B97F4A7C15 (u64 wrapping), TTL 3600 s, one request at a time.

powertools: a function decorated with `idempotent_function` (RedisCachePersistenceLayer,
IdempotencyConfig(expires_after_seconds=3600), no local cache) that only counts its runs
and returns a small dict. W1 calls it once for each of the N fresh keys: Powertools
claims the key (SET NX of an INPROGRESS record), runs the function and stores its result
(SET of a COMPLETED record). W2 calls it again for every key: each call must return the
stored result without running the function. The count of runs must be N after W1 and
still N after W2, or the script fails.

redis-set: W1 sends `SET key 1 NX EX 3600` for each key (every answer must be OK), W2
sends it again (every answer must be nil: a duplicate).

Each run FLUSHALLs the server before each peer. Memory per key is the server's
used_memory (INFO memory) after W1 minus before it, divided by DBSIZE. Figures are the
median of the runs, with their min-max spread. Beside them, the Python process's CPU time
(time.process_time: user and system, so the kernel's loopback work on the client's side
is in it) a claim, median of the runs: what the client spends, apart from waiting on the
server.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import os
import platform
import statistics
import sys
import time
import warnings

import redis
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.persistence.redis import RedisCachePersistenceLayer

TTL = 3600
SCRAMBLE = 0x9E37_79B9_7F4A_7C15
MASK = (1 << 64) - 1
RESULT = {"status": "done"}

# How many times the idempotent function has run.
RUNS = 0


def handle(key: str) -> dict:
    """The message handler: does nothing but count its runs and return a small result.

    Module-level, so that Powertools names its records `test-func.__main__.handle#<md5>`
    (outside Lambda the function name is `test-func`), as an application's handler would be.
    """
    global RUNS
    RUNS += 1
    return RESULT


def keys(n: int) -> list[str]:
    """The N keys in insertion order: key `i * SCRAMBLE mod 2^64` for i in 0..n."""
    out = [f"ord-{(i * SCRAMBLE) & MASK:016x}" for i in range(n)]
    assert all(len(k) == 20 for k in out)
    return out


def used_memory(r: redis.Redis) -> int:
    return int(r.info("memory")["used_memory"])


def fresh(admin: redis.Redis) -> int:
    """Empties the server and returns its used_memory."""
    admin.flushall()
    if admin.dbsize() != 0:
        raise SystemExit("FLUSHALL left keys behind")
    return used_memory(admin)


def memory_per_key(admin: redis.Redis, before: int, n: int) -> tuple[float, int]:
    stored = admin.dbsize()
    if stored != n:
        raise SystemExit(f"expected {n} keys stored after W1, DBSIZE says {stored}")
    return (used_memory(admin) - before) / stored, stored


def run_powertools(port: int, admin: redis.Redis, ks: list[str]) -> dict:
    n = len(ks)
    layer = RedisCachePersistenceLayer(host="127.0.0.1", port=port, ssl=False)
    config = IdempotencyConfig(expires_after_seconds=TTL, use_local_cache=False)
    claim = idempotent_function(
        handle, data_keyword_argument="key", persistence_store=layer, config=config
    )
    runs = RUNS

    before = fresh(admin)
    layer.client.ping()  # connect before the clock starts

    t0, c0 = time.perf_counter(), time.process_time()
    for k in ks:
        got = claim(key=k)
        if got != RESULT:
            raise SystemExit(f"powertools W1: {k} returned {got!r}")
    w1, c1 = time.perf_counter() - t0, time.process_time() - c0
    if RUNS - runs != n:
        raise SystemExit(f"powertools W1: the function ran {RUNS - runs} times for {n} fresh keys")
    per_key, stored = memory_per_key(admin, before, n)
    sample_key = admin.randomkey()
    sample_value = admin.get(sample_key)

    t0, c0 = time.perf_counter(), time.process_time()
    for k in ks:
        got = claim(key=k)
        if got != RESULT:
            raise SystemExit(f"powertools W2: {k} returned {got!r}, not the stored result")
    w2, c2 = time.perf_counter() - t0, time.process_time() - c0
    if RUNS - runs != n:
        raise SystemExit(
            f"powertools W2: the function ran {RUNS - runs - n} more times over {n} duplicate keys"
        )
    layer.client.close()
    return {
        "w1": n / w1,
        "cpu1": c1 / n * 1e6,
        "cpu2": c2 / n * 1e6,
        "w2": n / w2,
        "mem": per_key,
        "stored": stored,
        "sample_key": sample_key,
        "sample_value": sample_value,
    }


def run_redis_set(port: int, admin: redis.Redis, ks: list[str]) -> dict:
    n = len(ks)
    r = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)
    before = fresh(admin)
    r.ping()

    t0, c0 = time.perf_counter(), time.process_time()
    for k in ks:
        if r.set(k, 1, nx=True, ex=TTL) is not True:
            raise SystemExit(f"redis-set W1: SET NX of fresh {k} was refused")
    w1, c1 = time.perf_counter() - t0, time.process_time() - c0
    per_key, stored = memory_per_key(admin, before, n)

    t0, c0 = time.perf_counter(), time.process_time()
    for k in ks:
        if r.set(k, 1, nx=True, ex=TTL) is not None:
            raise SystemExit(f"redis-set W2: SET NX of duplicate {k} was taken")
    w2, c2 = time.perf_counter() - t0, time.process_time() - c0
    r.close()
    return {"w1": n / w1, "w2": n / w2, "cpu1": c1 / n * 1e6, "cpu2": c2 / n * 1e6, "mem": per_key, "stored": stored}


def fmt_rate(xs: list[float]) -> str:
    return f"{statistics.median(xs):,.0f} ({min(xs):,.0f}-{max(xs):,.0f})"


def fmt_mem(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True, help="redis-server on 127.0.0.1")
    ap.add_argument("--n", type=int, default=20_000, help="keys timed per workload")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--command", default="", help="the command line to print with the table")
    args = ap.parse_args()

    # Outside Lambda there is no remaining time to give the in-progress record an expiry;
    # Powertools warns of it on every claim. The record still expires with its TTL.
    warnings.filterwarnings("ignore", message="Couldn't determine the remaining time left")
    # RedisCachePersistenceLayer is marked deprecated in favour of its alias CachePersistenceLayer.
    warnings.filterwarnings("ignore", category=DeprecationWarning)

    admin = redis.Redis(host="127.0.0.1", port=args.port, decode_responses=True)
    server = admin.info("server")
    allocator = admin.info("memory").get("mem_allocator", "?")
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    ks = keys(args.n)

    results: dict[str, list[dict]] = {"powertools": [], "redis-set": []}
    for run in range(args.runs):
        for name, fn in (("powertools", run_powertools), ("redis-set", run_redis_set)):
            res = fn(args.port, admin, ks)
            results[name].append(res)
            print(
                f"run {run + 1}/{args.runs} {name}: W1 {res['w1']:,.0f}/s, W2 {res['w2']:,.0f}/s, "
                f"{res['mem']:.1f} B/key over {res['stored']} keys, "
                f"client CPU {res['cpu1']:.1f} / {res['cpu2']:.1f} us a claim",
                file=sys.stderr,
                flush=True,
            )
    admin.flushall()

    versions = (
        f"Python {platform.python_version()}, "
        f"aws-lambda-powertools {importlib.metadata.version('aws-lambda-powertools')}, "
        f"redis-py {importlib.metadata.version('redis')}, "
        f"redis-server {server['redis_version']} ({allocator}), "
        f"{platform.system()} {platform.release()} {platform.machine()}"
    )
    pt = results["powertools"]
    rs = results["redis-set"]
    print()
    print(f"W1 (fresh) and W2 (duplicate), N = {args.n:,} keys timed, one request at a time, "
          f"median of {args.runs} runs (min-max), each on a fresh FLUSHALL; {started}, "
          f"load average {load} at the start ({os.cpu_count()} CPUs)")
    print()
    print("| peer | W1 claims/s | W2 claims/s | memory/key (used_memory) "
          "| client CPU a claim, W1 / W2 |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, rows in (
        ("AWS Powertools idempotency (RedisCachePersistenceLayer), loopback", pt),
        ("redis-py `SET NX EX`, loopback (reference)", rs),
    ):
        print(
            f"| {label} | {fmt_rate([r['w1'] for r in rows])} | "
            f"{fmt_rate([r['w2'] for r in rows])} | {fmt_mem([r['mem'] for r in rows])} B | "
            f"{statistics.median(r['cpu1'] for r in rows):.1f} / "
            f"{statistics.median(r['cpu2'] for r in rows):.1f} us |"
        )
    print()
    print(f"Versions: {versions}")
    print(f"Powertools record, e.g.: key `{pt[-1]['sample_key']}` ({len(pt[-1]['sample_key'])} B), "
          f"value `{pt[-1]['sample_value']}` ({len(pt[-1]['sample_value'])} B)")
    if args.command:
        print(f"Command: `{args.command}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
