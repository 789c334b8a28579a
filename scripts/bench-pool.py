#!/usr/bin/env python3
"""Multi-node mode benchmarks on loopback (make bench-pool).

Starts a nats-server and two eldrd nodes (a, b) of one pool, then measures:
  1. a booking routed at a, counted by b's router (eldr bench pool), and the
     messages and bytes b received per request routed at a (--bookings
     compact|full: what the bookings carry);
  2. eldr table publish -> both nodes route with the new revision (five
     publishes, alternating two tables fitted on synthetic footprints);
  3. NATS stopped for --outage-s seconds under load at a: routing requests
     that fail (eldr loadgen), and how long after the server is back until
     both nodes are connected again and have heard from each other.
Prints one JSON object. Everything it starts is stopped at the end."""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from loopback import free_port, stop_all


def status(cli, instance):
    out = subprocess.run([cli, "status", "--instance", instance, "--json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return None
    return json.loads(out.stdout)


def wait_for(pred, budget_s, what):
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.01)
    raise SystemExit(f"bench-pool: {what} within {budget_s} s failed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--outage-s", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--bookings", choices=["compact", "full"], default="compact",
                    help="what the nodes' bookings carry ([pool] bookings)")
    args = ap.parse_args()
    cli = os.path.join(args.build, "tools", "eldr")
    eldrd = os.path.join(args.build, "sidecar", "eldrd")
    nats = shutil.which("nats-server") or "/usr/sbin/nats-server"
    tmp = tempfile.mkdtemp(prefix="eldr-bench-pool-")
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    tag = str(os.getpid())
    procs = []

    def start_nats():
        p = subprocess.Popen([nats, "-a", "127.0.0.1", "-p", str(port), "-js", "--store_dir",
                              os.path.join(tmp, "js")],
                             stdout=open(os.path.join(tmp, "nats.log"), "a"), stderr=subprocess.STDOUT)
        procs.append(p)
        return p

    def peer_of(s, name):
        c = (s or {}).get("pool", {})
        return next((p for p in c.get("peers", []) if p["name"] == name), None)

    # Two tables of the daemon's geometry: the nodes start on the first.
    tables = []
    for seed in (1, 2):
        out = os.path.join(tmp, f"synth{seed}")
        subprocess.run([cli, "synth", "--model", "qwen3-30b-a3b", "-n", "400", "--seed", str(seed),
                        "--out-dir", out], check=True, capture_output=True)
        table = os.path.join(tmp, f"table{seed}.eldr")
        subprocess.run([cli, "fit", "--prefill", os.path.join(out, "prefill.npy"), "-k", "8",
                        "-o", table, "--model", "qwen3-30b-a3b", "--seed", str(seed)],
                       check=True, capture_output=True)
        tables.append(table)
    config = os.path.join(tmp, "eldrd.toml")
    with open(config, "w") as f:
        f.write(f'[pool]\nbookings = "{args.bookings}"\n')
    server = start_nats()
    nodes = {}
    try:
        for name in ("a", "b"):
            inst = f"bench-{tag}-{name}"
            nodes[name] = inst
            procs.append(subprocess.Popen(
                [eldrd, "--config", config, "--instance", inst, "--table", tables[0], "--nats", url,
                 "--node", name,
                 "--pool", f"bench{tag}", "--log-level", "warn"],
                stdout=open(os.path.join(tmp, f"{name}.log"), "w"), stderr=subprocess.STDOUT))
        wait_for(lambda: peer_of(status(cli, nodes["a"]), "b") and peer_of(status(cli, nodes["b"]), "a"),
                 30, "the two nodes seeing each other")
        def wire(inst):
            return (status(cli, inst) or {}).get("pool", {}).get("nats", {})

        before = wire(nodes["b"])
        requests = 4096
        bench = subprocess.run([cli, "bench", "pool", "--from", nodes["a"], "--to", nodes["b"],
                                "--requests", str(requests), "--rate", str(args.rate),
                                "--json"],
                               capture_output=True, text=True, check=True)
        after = wire(nodes["b"])
        result = {"bookings": args.bookings, "booking": json.loads(bench.stdout)}
        # What each request routed at a cost b on the wire: its booking and
        # release, and its share of a's snapshots.
        result["received_at_b_per_request"] = {
            "messages": round((after["received"] - before["received"]) / requests, 2),
            "bytes": round((after["received_bytes"] - before["received_bytes"]) / requests, 1)}
        # Again with routing over NATS timed too (its requests also book at b).
        with_nats = subprocess.run([cli, "bench", "pool", "--from", nodes["a"], "--to", nodes["b"],
                                    "--requests", str(requests), "--rate", str(args.rate),
                                    "--nats", url, "--json"],
                                   capture_output=True, text=True, check=True)
        result["booking_with_nats_route"] = json.loads(with_nats.stdout)

        def revision(inst):
            c = (status(cli, inst) or {}).get("pool", {})
            return c.get("table_revision") or 0

        switch_ms = []
        for i in range(5):
            out = subprocess.run([cli, "table", "publish", "--nats", url, "--pool", f"bench{tag}",
                                  tables[(i + 1) % 2]], capture_output=True, text=True, check=True)
            t0 = time.monotonic()
            rev = int(out.stdout.split("revision ")[1].split()[0])
            wait_for(lambda: all(revision(nodes[n]) == rev for n in nodes), 10, "table switch")
            switch_ms.append(round((time.monotonic() - t0) * 1000, 1))
        result["table_publish_to_every_node_ms"] = switch_ms

        # Outage under load: loadgen at a for the outage and some seconds around it.
        total = int(args.rate * (args.outage_s + 6))
        load = subprocess.Popen([cli, "loadgen", "--instance", nodes["a"], "--requests", str(total),
                                 "--rate", str(args.rate), "--complete", "--json"],
                                stdout=subprocess.PIPE, text=True)
        time.sleep(2.0)
        server.send_signal(signal.SIGKILL)
        server.wait()
        time.sleep(args.outage_s)
        back = time.monotonic()
        server = start_nats()

        def resynced():
            sa, sb = status(cli, nodes["a"]), status(cli, nodes["b"])
            elapsed_ms = (time.monotonic() - back) * 1000
            pa, pb = peer_of(sa, "b"), peer_of(sb, "a")
            return (sa and sb and sa["pool"]["connected"] and sb["pool"]["connected"]
                    and pa and pb and pa["last_seen_age_ms"] < elapsed_ms
                    and pb["last_seen_age_ms"] < elapsed_ms)

        wait_for(resynced, 30, "re-sync after the outage")
        resync_ms = (time.monotonic() - back) * 1000
        out, _ = load.communicate(timeout=120)
        lg = json.loads(out.strip().splitlines()[-1])
        result["outage"] = {"outage_s": args.outage_s, "rate": args.rate, "requests": lg["requests"],
                            "failed": lg["failed"], "resync_ms": round(resync_ms, 1),
                            "route_p50_us": lg["p50_ns"] / 1e3, "route_p99_us": lg["p99_ns"] / 1e3}
        print(json.dumps(result))
    finally:
        stop_all(procs)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
