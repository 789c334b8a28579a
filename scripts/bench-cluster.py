#!/usr/bin/env python3
"""A pool of many eldrd nodes on loopback (make bench-cluster).

For each NATS layout (one server, then a three-server cluster) and each
pool size (--nodes, default 2 4 8 16): starts the nodes, lets them see each
other, then routes --rate requests/s spread over all nodes for --seconds
(eldr loadgen at every node, each request held open for --hold more of its
node's requests, as a decode would, then completed). Reports per node, as
the median and the worst node:
  - NATS messages and bytes it received per request routed in the pool,
  - its CPU per 1,000 requests routed in the pool (idle CPU taken out):
    node n00 routes nothing, so its figure is what the pool alone costs a
    node; the others' figures add their own routing (the daemon spins a
    while after each engine record, for latency, which dominates at low
    per-node rates),
  - booking visibility: publish at the routing node -> counted here,
and the NATS servers' CPU per 1,000 requests.

Then the failure run (--kill-nodes, default 8, on the three-server cluster):
mid-run the NATS server a gateway (eldr loadgen --nats) is on, and then one
eldrd node, are killed (SIGKILL). Every surviving node's engine must get
every decision; once the dead node's lease (peer_timeout_ms) has passed and
every request is completed (or, a gateway route whose answer died with the
server, cancelled by the gateway), no node may count anything in flight.
Exits 1 if not.

Prints one JSON object; everything it starts is stopped at the end. On a
machine with fewer cores than processes the figures include the contention:
it says how many cores it ran on."""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from loopback import free_port, stop_all

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except OSError:
        return None


def wait_for(pred, budget_s, what):
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        if pred():
            return time.monotonic()
        time.sleep(0.05)
    raise RuntimeError(f"bench-cluster: {what} within {budget_s} s failed")


class Cluster:
    """NATS servers and eldrd nodes of one run; stop() ends them all."""

    def __init__(self, args, tmp, table, tag):
        self.args, self.tmp, self.table, self.tag = args, tmp, table, tag
        self.cli = os.path.join(args.build, "tools", "eldr")
        self.eldrd = os.path.join(args.build, "sidecar", "eldrd")
        self.nats_bin = shutil.which("nats-server") or "/usr/sbin/nats-server"
        self.servers = []  # (Popen, client URL, monitoring port)
        self.nodes = {}    # name -> (Popen, instance)
        self.others = []
        self.pool = f"bc{os.getpid()}{tag}"

    def start_nats(self, count):
        ports = [(free_port(), free_port(), free_port()) for _ in range(count)]
        for i, (port, cport, mport) in enumerate(ports):
            cmd = [self.nats_bin, "-a", "127.0.0.1", "-p", str(port), "-m", str(mport), "-js",
                   "--store_dir", os.path.join(self.tmp, f"js{self.tag}-{i}"), "-n", f"s{i}"]
            if count > 1:
                routes = ",".join(f"nats://127.0.0.1:{c}" for _, c, _ in ports)
                cmd += ["--cluster_name", f"eldr{self.tag}", "--cluster",
                        f"nats://127.0.0.1:{cport}", "--routes", routes]
            log = open(os.path.join(self.tmp, f"nats{self.tag}-{i}.log"), "w")
            self.servers.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT),
                                 f"nats://127.0.0.1:{port}", mport))
        for _, url, _ in self.servers:
            port = int(url.rsplit(":", 1)[1])
            wait_for(lambda: self._listening(port), 10, f"nats-server at {url}")

    @staticmethod
    def _listening(port):
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    def urls(self):
        return ",".join(url for _, url, _ in self.servers)

    def clients_named(self, mport, name):
        """Connections named `name` at the server of monitoring port mport."""
        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/connz?limit=1024", timeout=5) as r:
            return sum(1 for c in json.load(r).get("connections", []) if c.get("name") == name)

    def start_nodes(self, count):
        for i in range(count):
            name = f"n{i:02d}"
            inst = f"bc-{os.getpid()}-{self.tag}-{name}"
            log = open(os.path.join(self.tmp, f"{self.tag}-{name}.log"), "w")
            p = subprocess.Popen([self.eldrd, "--instance", inst, "--table", self.table,
                                  "--nats", self.urls(), "--node", name,
                                  "--pool", self.pool, "--log-level", "warn"],
                                 stdout=log, stderr=subprocess.STDOUT)
            self.nodes[name] = (p, inst)
        names = set(self.nodes)

        def all_see_all():
            for name in names:
                s = self.status(name)
                if not s or not s["pool"].get("connected"):
                    return False
                seen = {p["name"] for p in s["pool"].get("peers", [])
                        if p["last_seen_age_ms"] < 2000}
                if seen != names - {name}:
                    return False
            return True

        wait_for(all_see_all, 60, f"{count} nodes seeing each other")

    def status(self, name):
        out = subprocess.run([self.cli, "status", "--instance", self.nodes[name][1], "--json"],
                             capture_output=True, text=True)
        if out.returncode != 0:
            return None
        s = json.loads(out.stdout)
        return s if isinstance(s.get("pool"), dict) else None

    def loadgen(self, name, requests, rate, hold):
        return subprocess.Popen([self.cli, "loadgen", "--instance", self.nodes[name][1],
                                 "--requests", str(requests), "--rate", f"{rate:.3f}",
                                 "--complete", "--hold", str(hold), "--json",
                                 "--seed", str(hash(name) & 0xffff)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def stop(self):
        stop_all([p for p, _ in self.nodes.values()] + [s[0] for s in self.servers] + self.others)


def held(status):
    """What a node still counts in flight: peers' bookings, twins, and workers' in-flight."""
    pool = status["pool"]
    return {"peer_bookings": pool.get("peer_bookings", 0), "twins": pool.get("twins", 0),
            "inflight": sum(w.get("inflight", 0) for w in status.get("workers", []))}


def finish_loadgens(gens, budget_s):
    out = {}
    for name, p in gens.items():
        stdout, stderr = p.communicate(timeout=budget_s)
        lines = stdout.strip().splitlines()
        out[name] = json.loads(lines[-1]) if lines else {"error": stderr.strip()[-300:]}
    return out


def spread(values):
    values = [v for v in values if v is not None]
    return {"median": round(statistics.median(values), 3), "max": round(max(values), 3)}


def measure(args, tmp, table, servers, nodes):
    c = Cluster(args, tmp, table, f"s{servers}n{nodes}")
    try:
        c.start_nats(servers)
        c.start_nodes(nodes)
        pids = {n: p.pid for n, (p, _) in c.nodes.items()}
        nats_pids = [s[0].pid for s in c.servers]
        # Idle CPU first: what the nodes spend with no traffic (snapshots,
        # timers), taken out of the per-request figure below.
        idle_s = 2.0
        cpu0 = {n: cpu_s(pid) for n, pid in pids.items()}
        time.sleep(idle_s)
        idle_rate = {n: (cpu_s(pid) - cpu0[n]) / idle_s for n, pid in pids.items()}
        before = {n: c.status(n)["pool"]["nats"] for n in c.nodes}
        cpu0 = {n: cpu_s(pid) for n, pid in pids.items()}
        nats_cpu0 = sum(cpu_s(pid) for pid in nats_pids)
        t0 = time.monotonic()
        # n00 routes nothing: its CPU is what the pool alone costs a node.
        routers = sorted(c.nodes)[1:]
        per_node = max(1, int(args.rate * args.seconds / len(routers)))
        gens = {n: c.loadgen(n, per_node, args.rate / len(routers), args.hold) for n in routers}
        results = finish_loadgens(gens, args.seconds * 4 + 60)
        total = sum(r.get("routed", 0) for r in results.values())
        # Every node has applied every release once none holds a booking.
        wait_for(lambda: all(held(c.status(n))["peer_bookings"] == 0 for n in c.nodes), 10,
                 "every release applied")
        elapsed = time.monotonic() - t0
        after = {n: c.status(n) for n in c.nodes}
        cpu1 = {n: cpu_s(pid) for n, pid in pids.items()}
        nats_cpu = sum(cpu_s(pid) for pid in nats_pids) - nats_cpu0
        failed = sum(r.get("failed", 0) + sum(r.get("errors", {}).values())
                     for r in results.values())
        msgs, byts, cpu, p50, p99 = [], [], {}, [], []
        for n in c.nodes:
            w = after[n]["pool"]["nats"]
            msgs.append((w["received"] - before[n]["received"]) / total)
            byts.append((w["received_bytes"] - before[n]["received_bytes"]) / total)
            busy = cpu1[n] - cpu0[n] - idle_rate[n] * elapsed
            cpu[n] = max(0.0, busy) / total * 1000 * 1000  # ms per 1,000 requests
            d = after[n]["pool"].get("booking_delay_ms", {})
            p50.append(d.get("p50"))
            p99.append(d.get("p99"))
        servers_used = sorted({after[n]["pool"].get("server", "") for n in c.nodes})
        return {"nats_servers": servers, "nodes": nodes, "requests": total,
                "rate": round(total / max(r.get("seconds", args.seconds) for r in results.values())),
                "failed": failed,
                "received_per_request": {"messages": spread(msgs), "bytes": spread(byts)},
                "listener_cpu_ms_per_1000_requests": round(cpu["n00"], 1),
                "router_cpu_ms_per_1000_requests": spread([cpu[n] for n in routers]),
                "node_idle_cpu_percent": spread([r * 100 for r in idle_rate.values()]),
                "nats_cpu_ms_per_1000_requests": round(nats_cpu / total * 1e6, 1),
                "booking_visible_ms": {"p50": spread(p50), "p99": spread(p99)},
                "servers_in_use": len(servers_used)}
    finally:
        c.stop()


def kill_run(args, tmp, table):
    """Three NATS servers, --kill-nodes nodes; kill a server, then a node, under load."""
    nodes = args.kill_nodes
    c = Cluster(args, tmp, table, "kill")
    events = {}
    try:
        c.start_nats(3)
        c.start_nodes(nodes)
        seconds = args.kill_seconds
        per_node = int(args.rate * seconds / nodes)
        gens = {n: c.loadgen(n, per_node, args.rate / nodes, args.hold) for n in c.nodes}
        # A gateway routes over NATS too (eldr_pool_route), at a tenth of the rate.
        gw_requests = int(args.rate / 10 * seconds)
        gateway = subprocess.Popen(
            [c.cli, "loadgen", "--nats", c.urls(), "--pool", c.pool, "--requests",
             str(gw_requests), "--rate", str(args.rate / 10), "--complete", "--hold",
             str(args.hold), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        c.others.append(gateway)
        t0 = time.monotonic()
        # The gateway's server goes (else the one most nodes use), so that it must move.
        using = {}
        for n in c.nodes:
            using.setdefault(c.status(n)["pool"].get("server", ""), []).append(n)
        with_gw = []

        def gateway_seen():
            with_gw[:] = [u for _, u, m in c.servers if c.clients_named(m, "eldr pool client")]
            return bool(with_gw)

        try:
            wait_for(gateway_seen, 5, "the gateway connected")
        except RuntimeError:
            pass  # then the server most nodes use
        url = with_gw[0] if with_gw else max(using, key=lambda u: len(using[u]))
        victim_server = next(p for p, u, _ in c.servers if u == url)
        events["gateway_on_that_server"] = bool(with_gw)
        time.sleep(max(0.0, seconds * 0.3 - (time.monotonic() - t0)))
        victim_server.send_signal(signal.SIGKILL)
        events["nats_server_killed_s"] = round(time.monotonic() - t0, 2)
        events["nodes_on_that_server"] = len(using.get(url, []))
        moved = using.get(url, [])
        back = wait_for(lambda: all((c.status(n) or {}).get("pool", {}).get("connected")
                                    and c.status(n)["pool"].get("server") != url for n in moved),
                        30, "the nodes of the killed server reconnected elsewhere")
        events["its_nodes_reconnected_after_ms"] = round(
            (back - t0 - events["nats_server_killed_s"]) * 1000)
        time.sleep(max(0.0, seconds * 0.5 - (time.monotonic() - t0)))
        dead = sorted(c.nodes)[-1]
        dead_proc = c.nodes[dead][0]
        # Its requests in flight now are the ones the others must release.
        dead_held = {n: next((p["bookings"] for p in c.status(n)["pool"]["peers"]
                              if p["name"] == dead), 0) for n in c.nodes if n != dead}
        dead_proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        events["eldrd_killed_s"] = round(killed_at - t0, 2)
        events["dead_node"] = dead
        events["its_bookings_held_at_peers_when_killed"] = spread(list(dead_held.values()))
        gens[dead].kill()
        gens[dead].communicate()
        del gens[dead]
        survivors = [n for n in c.nodes if n != dead]
        # The dead node's bookings go at its lease's end, not before.
        released = wait_for(lambda: all(
            not any(p["name"] == dead and p["bookings"] > 0 for p in c.status(n)["pool"]["peers"])
            for n in survivors), 30, "the dead node's bookings released")
        events["dead_bookings_released_after_ms"] = round((released - killed_at) * 1000)
        gens["gateway"] = gateway
        results = finish_loadgens(gens, seconds * 4 + 60)
        # The engines route at their own node: every decision must come. The
        # gateway's route is a request/reply over NATS: one whose answer died
        # with its server is unanswered (the gateway gets an error at its
        # timeout) and cancelled by the gateway where it was routed.
        lost = {n: r for n, r in results.items() if n != "gateway" and (
            "error" in r or r.get("failed", 0) or r.get("errors")
            or r.get("routed") != r.get("requests"))}
        gw = results["gateway"]
        events["gateway"] = {k: gw.get(k) for k in ("requests", "routed", "failed", "p99_ns",
                                                    "completes_to_gone_nodes", "error")
                             if k in gw}
        events["decisions"] = sum(r.get("routed", 0) for r in results.values())
        events["decisions_lost"] = sum(r.get("requests", per_node) - r.get("routed", 0)
                                       for n, r in results.items() if n != "gateway")
        events["gateway_routes_unanswered"] = gw_requests - gw.get("routed", 0)

        # All completed or cancelled: once releases and snapshots have gone
        # round (a snapshot repairs a lost release), no node holds or counts
        # anything.
        def settled():
            st = [c.status(n) for n in survivors]
            return all(s and held(s)["inflight"] == 0 and not any(
                w.get("inflight_local", 0) for w in s.get("workers", [])) for s in st)

        try:
            wait_for(settled, 15, "no leftover in-flight counts")
            events["leaked"] = 0
            cancelled = [c.status(n)["pool"].get("gateway_routes", {}) for n in survivors]
            events["gateway_routes_cancelled"] = sum(
                g.get("cancelled", 0) + g.get("refused", 0) for g in cancelled)
        except RuntimeError:
            events["leaked"] = {n: held(c.status(n)) for n in survivors}
        events["ok"] = not lost and events["leaked"] == 0 and "error" not in gw
        if lost:
            events["lost_at"] = lost
        return events
    finally:
        c.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--nodes", type=int, nargs="*", default=[2, 4, 8, 16],
                    help="pool sizes to measure (none: the failure run only)")
    ap.add_argument("--servers", type=int, nargs="+", default=[1, 3], choices=[1, 3])
    ap.add_argument("--rate", type=float, default=1000.0, help="requests/s across the pool")
    ap.add_argument("--seconds", type=float, default=6.0, help="load per measurement")
    ap.add_argument("--hold", type=int, default=16,
                    help="requests each node keeps open (its decode batch), completed later")
    ap.add_argument("--kill-nodes", type=int, default=8, help="pool size of the failure run; 0: none")
    ap.add_argument("--kill-seconds", type=float, default=10.0, help="load of the failure run")
    args = ap.parse_args()
    cli = os.path.join(args.build, "tools", "eldr")
    tmp = tempfile.mkdtemp(prefix="eldr-bench-cluster-")
    try:
        synth = os.path.join(tmp, "synth")
        subprocess.run([cli, "synth", "--model", "qwen3-30b-a3b", "-n", "400", "--seed", "1",
                        "--out-dir", synth], check=True, capture_output=True)
        table = os.path.join(tmp, "table.eldr")
        subprocess.run([cli, "fit", "--prefill", os.path.join(synth, "prefill.npy"), "-k", "8",
                        "-o", table, "--model", "qwen3-30b-a3b", "--seed", "1"],
                       check=True, capture_output=True)
        result = {"cores": os.cpu_count(), "rate": args.rate, "seconds": args.seconds,
                  "hold": args.hold, "runs": []}
        for servers in args.servers:
            for nodes in args.nodes:
                run = measure(args, tmp, table, servers, nodes)
                print(json.dumps(run), file=sys.stderr, flush=True)
                result["runs"].append(run)
        ok = all(r["failed"] == 0 for r in result["runs"])
        if args.kill_nodes:
            result["kills"] = kill_run(args, tmp, table)
            ok = ok and result["kills"]["ok"]
        print(json.dumps(result))
        return 0 if ok else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
