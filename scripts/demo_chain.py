#!/usr/bin/env python3
"""The whole serving chain, as `make demo` ends it.

eldrd (embedded default table) + emulated prefill and decode engines
(examples/python-engine) + the Go gateway (examples/go-gateway) + a load
generator sending /v1/completions. Prints the decode worker eldr chose per
request domain and the similarity of each choice, then stops everything.

The prefill engine speaks a stock engine's protocol (--flavor sglang, the
default, or vllm): it returns the routed experts and pushes nothing, and the
Go gateway builds each footprint from its answer. --flavor eldr has the
engine push the footprint itself. A last pass is a gateway in Python (this
script) against a vLLM-flavored prefill engine: eldr.footprint_from_vllm on
its answer, Client.route, then the chosen decode worker.

Both orders of a PD gateway: the table eldrd serves is fitted here, with a
footprint predictor fitted on synthetic prompts (each domain's requests use
the domain's words), so the Go gateway runs twice: prefill-first (prefill,
footprint, route, decode) and decode-first (route by the prompt's text before
prefill, as llm-d and SGLang's PD router do, then prefill and decode on that
pair, and the prefill's real footprint handed back to eldr to learn from).
--decode-first-router table runs the decode-first gateway on an embedded
router over the same table file instead of eldrd.

    .deps/venv/bin/python scripts/demo_chain.py [BUILD_DIR] [--requests N] [--flavor F]
"""
import argparse
import collections
import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Chain:
    def __init__(self, build, workdir):
        self.build = build
        self.workdir = workdir
        self.procs = []

    def start(self, name, args, ready=None, env=None):
        log = open(os.path.join(self.workdir, name + ".log"), "w")
        proc = subprocess.Popen(args, stdout=subprocess.PIPE if ready else log, stderr=log,
                                text=True, env=env)
        self.procs.append((name, proc))
        if ready:
            deadline = time.time() + 60
            while time.time() < deadline:
                line = proc.stdout.readline()
                if not line:
                    break
                if line.startswith(ready):
                    return line.split()[-1]
            raise RuntimeError(f"{name} did not start (log: {log.name})")
        return None

    def stop(self):
        for name, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            print(f"   {name} stopped, exit {proc.returncode}")


def wait_http(url, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} never answered")


# Synthetic prompts: a domain's requests use its own words, all share a
# system prompt and filler words.
SYLLABLES = ("ka", "lo", "mi", "ra", "tu", "ve", "zo", "ni", "sa", "po", "de", "fu")


def domain_words(domain):
    stem = "".join(c for c in domain.lower() if c.isalpha())[:6] or "x"
    return [stem + a + b for a in SYLLABLES[:4] for b in SYLLABLES[4:7]]


def prompt_text(domain, variant):
    words = domain_words(domain)
    picked = " ".join(words[(variant * 5 + 3 * i) % len(words)] for i in range(8))
    return f"You are a helpful assistant. Answer the question. {picked} please {variant}"


def write_prompts(path, labels):
    """One synthetic prompt per calibration request, as `eldr fit --prompts`
    reads them (JSON lines, line i the prompt of footprint i)."""
    with open(path, "w") as f:
        for i, label in enumerate(labels):
            f.write(json.dumps({"text": prompt_text(label, i)}) + "\n")


def report(order, results, labels, secs):
    """The decode worker per domain and the mean similarity (decode-first:
    also the prediction's confidence, and how many real footprints eldr got)."""
    per = collections.defaultdict(collections.Counter)
    sims = collections.defaultdict(list)
    confs = collections.defaultdict(list)
    for row, reply in results:
        per[labels[row]][reply["worker"]] += 1
        sims[labels[row]].append(reply["similarity"])
        confs[labels[row]].append(reply.get("confidence", 1.0))
    print(f"== {order}: {len(results)} completions in {secs:.1f} s; decode worker per domain "
          "(requests), mean similarity" + (" and confidence:" if order == "decode-first" else ":"))
    for domain in sorted(per):
        workers = ", ".join(f"w{w}:{n}" for w, n in sorted(per[domain].items()))
        mean = sum(sims[domain]) / len(sims[domain])
        conf = (f"  conf {sum(confs[domain]) / len(confs[domain]):.2f}"
                if order == "decode-first" else "")
        print(f"   {domain:<10} sim {mean:.3f}{conf}   {workers}")
    by_eldr = sum(1 for _, r in results if r.get("routed_by") == "eldr")
    learned = sum(1 for _, r in results if r.get("learned"))
    print(f"   routed by eldr: {by_eldr}/{len(results)}" +
          (f"; real footprints handed back to learn from: {learned}"
           if order == "decode-first" else ""))


def python_gateway(chain, py, engines, instance, trace, decode, labels, env, requests):
    """A gateway in Python against a stock vLLM prefill engine: the footprint
    from choices[0].routed_experts, eldr's decision, the decode worker."""
    if requests <= 0:
        return
    sys.path.insert(0, env["PYTHONPATH"])
    import zlib
    import eldr
    vllm = chain.start("prefill-vllm", [py, os.path.join(engines, "prefill_server.py"),
                                        "--trace", trace, "--flavor", "vllm", "--top-k", "8"],
                       "READY", env)
    print(f"== Python gateway: {requests} requests to a vLLM-flavored prefill {vllm}")

    def post(url, body):
        req = urllib.request.Request(url, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.load(r)

    per = collections.defaultdict(collections.Counter)
    with eldr.Client(instance) as client:
        for i in range(requests):
            rid = f"py-req-{i}"
            answer = post(vllm + "/v1/completions", {"model": "emulated-moe", "request_id": rid,
                                                      "prompt": list(range(64)), "max_tokens": 1})
            footprint = eldr.footprint_from_vllm(answer["choices"][0]["routed_experts"],
                                                 num_experts=128,
                                                 prompt_tokens=answer["usage"]["prompt_tokens"])
            decision = client.route(rid, footprint, 5000)
            out = post(decode + "/v1/decode", {"request_id": rid, "worker": decision.worker,
                                               "max_tokens": 4})
            if out["worker"] != decision.worker:
                sys.exit(f"demo_chain: decode answered from worker {out['worker']}")
            per[labels[zlib.crc32(rid.encode()) % len(labels)]][decision.worker] += 1
    for domain in sorted(per):
        workers = ", ".join(f"w{w}:{n}" for w, n in sorted(per[domain].items()))
        print(f"   {domain:<10} {workers}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build", nargs="?", default="build")
    parser.add_argument("--requests", type=int, default=240)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--flavor", choices=("sglang", "vllm", "eldr"), default="sglang",
                        help="the prefill engine's protocol (the Go gateway follows it)")
    parser.add_argument("--python-requests", type=int, default=32,
                        help="requests of the Python-gateway pass against a vLLM engine")
    parser.add_argument("--decode-first-router", choices=("eldrd", "table"), default="eldrd",
                        help="decode-first pass: route through eldrd, or an embedded router "
                             "in the gateway over the same table (-table)")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    eldrd = os.path.join(build, "sidecar", "eldrd")
    eldr = os.path.join(build, "tools", "eldr")
    gateway = os.path.join(build, "examples", "go-gateway", "go-gateway")
    for binary in (eldrd, eldr, gateway):
        if not os.access(binary, os.X_OK):
            sys.exit(f"demo_chain: {binary} is not built (make build)")
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"))
    instance = f"chain-{os.getpid()}"
    py = sys.executable  # the Python with NumPy that runs this demo (make demo: the venv)
    engines = os.path.join(ROOT, "examples", "python-engine")

    with tempfile.TemporaryDirectory() as workdir:
        chain = Chain(build, workdir)
        try:
            # Requests drawn from the same synthetic model as the daemon's
            # embedded default table, with their domain labels.
            subprocess.run([eldr, "synth", "--requests", str(args.requests), "--seed", "7",
                            "--out-dir", workdir], check=True, stdout=subprocess.DEVNULL)
            trace = os.path.join(workdir, "prefill.npy")
            with open(os.path.join(workdir, "labels.txt")) as f:
                labels = [line.strip() for line in f]

            # The table eldrd serves: fitted on a calibration set of the same
            # synthetic model, then given a predictor from synthetic prompts.
            cal = os.path.join(workdir, "cal")
            subprocess.run([eldr, "synth", "--requests", "1000", "--seed", "11",
                            "--out-dir", cal], check=True, stdout=subprocess.DEVNULL)
            with open(os.path.join(cal, "labels.txt")) as f:
                cal_labels = [line.strip() for line in f]
            prompts = os.path.join(cal, "prompts.jsonl")
            write_prompts(prompts, cal_labels)
            table = os.path.join(workdir, "table.eldr")
            subprocess.run([eldr, "fit", "--prefill", os.path.join(cal, "prefill.npy"),
                            "--prompts", prompts, "--workers", "8", "--model", "qwen3-30b-a3b",
                            "--out", table], check=True, stdout=subprocess.DEVNULL)
            fitted = len(cal_labels)
            metrics_port = free_port()
            print(f"== eldrd --instance {instance} (a table fitted on 1000 synthetic requests, "
                  f"with a predictor fitted on {fitted} synthetic prompts)")
            chain.start("eldrd", [eldrd, "--instance", instance, "--table", table,
                                  "--metrics-port", str(metrics_port)])
            wait_http(f"http://127.0.0.1:{metrics_port}/metrics")
            decode = chain.start("decode", [py, os.path.join(engines, "decode_server.py"),
                                            "--instance", instance, "--workers", "8",
                                            "--us-per-token", "200"], "READY", env)
            # The daemon's embedded default: Qwen3-30B-A3B geometry (48 x 128, top-8).
            model = ["-experts", "128", "-hidden-layers", "48", "-top-k", "8"]
            prefill = chain.start("prefill", [py, os.path.join(engines, "prefill_server.py"),
                                              "--instance", instance, "--trace", trace,
                                              "--flavor", args.flavor, "--top-k", "8"],
                                  "READY", env)
            path = {"eldr": "/v1/prefill", "sglang": "/generate",
                    "vllm": "/v1/completions"}[args.flavor]
            print(f"== engines: prefill ({args.flavor}) {prefill}, 8 decode workers {decode}")
            gw_port, df_port = free_port(), free_port()
            common = ["-prefill", prefill + path, "-decode", decode + "/v1/decode",
                      "-flavor", args.flavor] + model
            chain.start("gateway", [gateway, "-listen", f"127.0.0.1:{gw_port}",
                                    "-instance", instance, "-order", "prefill-first"] + common)
            eldr_of_df = (["-instance", instance] if args.decode_first_router == "eldrd"
                          else ["-instance", "", "-table", table])
            chain.start("gateway-decode-first", [gateway, "-listen", f"127.0.0.1:{df_port}",
                                                 "-order", "decode-first"] + eldr_of_df + common)
            wait_http(f"http://127.0.0.1:{gw_port}/healthz")
            wait_http(f"http://127.0.0.1:{df_port}/healthz")
            print(f"== Go gateways: prefill-first on 127.0.0.1:{gw_port}, decode-first on "
                  f"127.0.0.1:{df_port} ({args.decode_first_router}); {args.requests} requests "
                  f"each, {args.concurrency} at a time")

            # The prefill engine serves trace row crc32(request_id) mod N, so
            # ask for ids whose row is known: the request's domain is its label.
            import zlib

            def ids_by_row(prefix):
                ids, i = {}, 0
                while len(ids) < args.requests:
                    rid = f"{prefix}-{i}"
                    ids.setdefault(zlib.crc32(rid.encode()) % len(labels), rid)
                    i += 1
                return sorted(ids.items())

            def send(port, order, item):
                row, rid = item
                request = {"request_id": rid, "max_tokens": 16}
                if order == "decode-first":  # the prompt's text: what eldr routes from
                    request["prompt"] = prompt_text(labels[row], 100000 + row)
                else:
                    request["prompt_tokens"] = 64
                req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                             json.dumps(request).encode(),
                                             {"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=30) as r:
                    return row, json.load(r)

            for port, order, prefix in ((gw_port, "prefill-first", "req"),
                                        (df_port, "decode-first", "df")):
                items = ids_by_row(prefix)
                t0 = time.time()
                with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
                    results = list(pool.map(lambda item: send(port, order, item), items))
                secs = time.time() - t0
                report(order, results, labels, secs)
                by_eldr = sum(1 for _, r in results if r.get("routed_by") == "eldr")
                if by_eldr != len(results):
                    sys.exit(f"demo_chain: {order}: some requests were not routed by eldr")
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics") as r:
                for line in r.read().decode().splitlines():
                    if line.startswith(("eldr_decision_latency_seconds_count",
                                        "eldr_decision_latency_seconds_sum", "eldr_clients")):
                        print("   " + line)
            python_gateway(chain, py, engines, instance, trace, decode, labels, env,
                           args.python_requests)
        finally:
            print("== stopping")
            chain.stop()


if __name__ == "__main__":
    main()
