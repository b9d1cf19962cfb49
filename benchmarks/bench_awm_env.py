"""AWM environment: episode reset and tool-call throughput, warm sandboxed worker vs one server per episode.

Ours: one sandbox worker (bubblewrap) holds the scenario's booted FastAPI server; an episode's reset
copies the pristine database back in, and a tool call goes straight into the ASGI app (no HTTP). The
baseline is what the AWM reference launcher does per episode: copy the database, write the server
script, start ``python server.py`` under uvicorn on a free port, wait for the port, then call the
endpoints over HTTP (the reference adds MCP on top; ``fastapi-mcp`` 0.4.0 needs ``mcp<2``, which this
environment does not have, so the baseline is plain HTTP and therefore a lower bound on its cost).
Both use the generated ``music_streaming`` scenario (25 tools), in the same run.

Run: ``python benchmarks/bench_awm_env.py [--episodes 50] [--calls 400] [--baseline-episodes 3]``.
Goal: >= 200 tool calls/s per core and reset <= 20 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from data_prep.awm_generate import generate
from infra.agents.awm.release import load_release
from infra.agents.awm.sandboxed import rewrite_server_code
from infra.agents.awm.server import AwmServerPool

CALLS = [
    ("list_tracks", {"limit": 5, "order_by": "play_count", "descending": True}),
    ("get_track", {"item_id": 3}),
    ("update_track", {"item_id": 3, "play_count": 7}),
    ("create_playlist", {"name": "Bench Mix", "mood": "calm"}),
]
HTTP = {
    "list": ("GET", "/tracks"),
    "get": ("GET", "/tracks/{item_id}"),
    "update": ("PATCH", "/tracks/{item_id}"),
}


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def bench_ours(scenario, episodes: int, calls: int) -> dict[str, float]:
    pool = AwmServerPool(1)
    start = time.perf_counter()
    lease = pool.acquire(scenario)
    boot = time.perf_counter() - start
    resets = []
    for _ in range(episodes):
        pool.release(lease)
        t = time.perf_counter()
        lease = pool.acquire(scenario)
        resets.append(time.perf_counter() - t)
    args = [(n, json.dumps(a)) for n, a in CALLS]
    t, wall = _cpu(), time.perf_counter()
    for i in range(calls):
        name, arguments = args[i % len(args)]
        assert lease.call_tool(name, arguments)["status"] < 400
    wall = time.perf_counter() - wall
    pool.release(lease)
    pool.close()
    resets.sort()
    return {
        "boot_s": boot,
        "reset_ms_p50": 1e3 * resets[len(resets) // 2],
        "reset_ms_max": 1e3 * resets[-1],
        "calls_per_s": calls / wall,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_baseline(scenario, episodes: int, calls: int) -> dict[str, float]:
    resets, rates = [], []
    with tempfile.TemporaryDirectory(prefix="awm-bench-") as tmp:
        for e in range(episodes):
            t = time.perf_counter()
            db = Path(tmp, f"work{e}.db")
            db.write_bytes(scenario.database())
            script = Path(tmp, f"server{e}.py")
            script.write_text(rewrite_server_code(scenario.full_code, str(db)))
            port = _free_port()
            env = {**os.environ, "HOST": "127.0.0.1", "PORT": str(port)}
            proc = subprocess.Popen(
                [sys.executable, str(script)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                while True:
                    try:
                        socket.create_connection(("127.0.0.1", port), timeout=0.05).close()
                        break
                    except OSError:
                        if proc.poll() is not None or time.perf_counter() - t > 60:
                            raise RuntimeError("baseline server did not start") from None
                        time.sleep(0.01)
                resets.append(time.perf_counter() - t)
                with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
                    w = time.perf_counter()
                    for i in range(calls):
                        name, a = CALLS[i % len(CALLS)]
                        if name == "create_playlist":
                            r = client.post("/playlists", json=a)
                        elif name == "update_track":
                            r = client.patch("/tracks/3", json={"play_count": 7})
                        elif name == "get_track":
                            r = client.get("/tracks/3")
                        else:
                            r = client.get("/tracks", params=a)
                        assert r.status_code < 400, r.text
                    rates.append(calls / (time.perf_counter() - w))
            finally:
                proc.kill()
                proc.wait()
    resets.sort()
    return {"reset_ms_p50": 1e3 * resets[len(resets) // 2], "calls_per_s": sum(rates) / len(rates)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--baseline-episodes", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="awm-bench-release-") as tmp:
        generate(Path(tmp), seed=0, tasks=2, domains=["music_streaming"])
        scenario = load_release(tmp)["music_streaming"]
    ours = bench_ours(scenario, args.episodes, args.calls)
    base = bench_baseline(scenario, args.baseline_episodes, max(args.calls // 4, 40))
    print(
        f"ours: first boot of the scenario in a worker {ours['boot_s']:.2f} s; reset p50 "
        f"{ours['reset_ms_p50']:.2f} ms (max {ours['reset_ms_max']:.2f}); "
        f"{ours['calls_per_s']:.0f} tool calls/s "
        "(one worker, calls in sequence: host thread and sandbox process take turns on one core)"
    )
    print(
        f"baseline (server process per episode, HTTP): reset p50 {base['reset_ms_p50']:.0f} ms; "
        f"{base['calls_per_s']:.0f} tool calls/s"
    )
    print(
        f"ratios: reset {base['reset_ms_p50'] / ours['reset_ms_p50']:.0f}x faster, "
        f"tool calls {ours['calls_per_s'] / base['calls_per_s']:.1f}x"
    )
    print(
        f"goals: >= 200 calls/s per core: {'met' if ours['calls_per_s'] >= 200 else 'NOT met'}; "
        f"reset <= 20 ms: {'met' if ours['reset_ms_p50'] <= 20 else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
