#!/usr/bin/env python3
"""Warm interpreters on a GPU host, without the daemons: what a warm hand-off costs an unmodified
DDP script (bench/gpu/gpt_ddp.py) with a given standby bootstrap, and how long a killed CUDA
worker takes to be seen dead.

For each bootstrap source (a C++ file holding kWarmBootstrap as R"PY(...)PY", e.g. this tree's
daemon/node/warm_standbys.cc and an older copy) and each repetition:
  1. two standbys start as elasticd starts them: `python3 -c BOOTSTRAP`, the hand-off pipe on
     fd 3, one GPU each (CUDA_VISIBLE_DEVICES), and report "[elastic warm] ready";
  2. both are handed rank 0 and 1 of a 2-rank NCCL job running gpt_ddp.py --mode recovery at
     the same instant (the hand-off format of encode_handoff);
  3. rank 0's start-up phases and the time from the hand-off to its first step line are kept;
  4. after 20 steps rank 1 is killed with SIGKILL: the time until its stdout pipe reads EOF and
     until its pidfd is readable (when the daemon learns of the exit) is kept, then rank 0's.
Prints one JSON object per run and a summary table (median, min-max).

  warm_probe.py --bootstrap NEW.cc --bootstrap OLD.cc --repeat 3 --gpus 0,1 --out DIR
"""
import argparse
import json
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def bootstrap_of(path):
    text = open(path).read()
    m = re.search(r'kWarmBootstrap = R"PY\((.*?)\)PY"', text, re.S)
    if not m:
        sys.exit(f"{path}: no kWarmBootstrap R\"PY(...)PY\" string")
    return m.group(1)


def handoff(target, args, env, cwd):
    fields = ["elastic-warm-1", "script", target, cwd, str(len(args)), *args, str(len(env)),
              *[f"{k}={v}" for k, v in sorted(env.items())]]
    return "\0".join(fields).encode()


class Standby:
    def __init__(self, boot, gpu, log_path, base_env):
        self.read_fd, self.write_fd = os.pipe()
        env = dict(base_env, CUDA_VISIBLE_DEVICES=str(gpu))
        self.env = env
        self.err = open(log_path, "w")
        self.log_path = log_path
        # bash puts the pipe on fd 3 and execs the interpreter (same pid), as the spawner does.
        fd = self.read_fd
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "{sys.executable}" -c "$0"' + ("" if fd == 3 else f" 3<&{fd} {fd}<&-"),
             boot],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.err, env=env,
            pass_fds=(fd,))
        os.close(self.read_fd)
        self.lines = []  # (time, text)
        self.eof_at = None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in self.proc.stdout:
            self.lines.append((time.time(), raw.decode(errors="replace").rstrip("\n")))
        self.eof_at = time.time()

    def wait_ready(self, limit):
        deadline = time.time() + limit
        while time.time() < deadline:
            with open(self.log_path) as f:
                text = f.read()
            if "[elastic warm] ready" in text:
                return time.time()
            if self.proc.poll() is not None:
                raise RuntimeError(f"standby exited: {text[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError("standby not ready in time")

    def hand(self, data):
        os.write(self.write_fd, data)
        os.close(self.write_fd)

    def kill_and_time(self):
        pidfd = os.pidfd_open(self.proc.pid)
        t0 = time.time()
        os.kill(self.proc.pid, signal.SIGKILL)
        select.select([pidfd], [], [], 30)
        dead = time.time() - t0
        os.close(pidfd)
        self.proc.wait()
        self.reader.join(10)
        eof = (self.eof_at - t0) if self.eof_at else None
        return dead, eof


def events(lines):
    out = []
    for t, text in lines:
        if text.startswith("{"):
            try:
                out.append((t, json.loads(text)))
            except ValueError:
                pass
    return out


def one_run(boot, label, rep, a, port):
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "USER", "LANG")}
    base.update(PYTHONUNBUFFERED="1", NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
                NVSHMEM_DISABLE_NVLS="1", OMP_NUM_THREADS="4")
    gpus = a.gpus.split(",")
    work = os.path.join(a.out, f"{label}-{rep}")
    os.makedirs(work, exist_ok=True)
    t_start = time.time()
    sb = [Standby(boot, gpus[r], os.path.join(work, f"standby-{r}.log"), base) for r in range(2)]
    ready = [s.wait_ready(120) - t_start for s in sb]
    time.sleep(a.settle)  # the standbys idle as they would between incidents
    args = ["--mode", "recovery", "--gpt-layers", "4", "--gpt-width", "512", "--gpt-heads", "8",
            "--gpt-vocab", "8192", "--gpt-context", "256", "--batch-size", "16",
            "--max-steps", "100000", "--ckpt-dir", work, "--ckpt-interval", "100000"]
    datas = []
    for r in range(2):
        env = dict(sb[r].env, RANK=str(r), LOCAL_RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="1",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), ELASTIC_ROUND=str(rep + 1))
        datas.append(handoff(os.path.join(HERE, "gpt_ddp.py"), args, env, work))
    t_go = time.time()
    for s, d in zip(sb, datas):
        s.hand(d)
    deadline = time.time() + 120
    startup = first = None
    while time.time() < deadline:
        ev = events(sb[0].lines)
        startup = next((d for _, d in ev if d.get("event") == "startup"), None)
        steps = [(t, d) for t, d in ev if d.get("event") == "step"]
        if startup and first is None and steps:
            first = steps[0][0] - t_go
        if startup and len(steps) >= 20:
            break
        if any(s.proc.poll() is not None for s in sb):
            break
        time.sleep(0.02)
    res = {"bootstrap": label, "rep": rep, "ready_s": ready, "first_step_s": first,
           "phases": startup["phases"] if startup else None}
    res["rank1_dead_s"], res["rank1_eof_s"] = sb[1].kill_and_time()
    res["rank0_dead_s"], res["rank0_eof_s"] = sb[0].kill_and_time()
    for s in sb:
        s.err.close()
    print(json.dumps(res), flush=True)
    return res


STORE_RACE = r"""
import os, socket, sys, time
import torch.distributed as dist
role, port, start_at, wait = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1"
time.sleep(max(0.0, start_at - time.time()))  # torch is imported: both start on the clock
t0 = time.time()
if role == "server":
    s = dist.TCPStore("127.0.0.1", port, 2, True, wait_for_workers=False)
    s.wait(["done"])
else:
    if wait:  # until the server accepts a connection
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.005)
    s = dist.TCPStore("127.0.0.1", port, 2, False)
    print("%.3f" % (time.time() - t0), flush=True)
    s.set("done", "1")
"""


def store_race(a):
    """Rank 1's TCPStore client starts `lead` seconds before rank 0's server: how long its
    constructor takes from the client's start (the retry after a refused connect included), with
    and without first waiting until the port accepts a connection."""
    rows = []
    port = 29800
    for wait in (False, True):
        for lead in (0.0, 0.05, 0.2):
            for rep in range(a.repeat):
                port += 1
                start_at = time.time() + 8  # after both imported torch
                server = subprocess.Popen([sys.executable, "-c", STORE_RACE, "server", str(port),
                                           str(start_at + lead), "0"], stderr=subprocess.PIPE)
                client = subprocess.run([sys.executable, "-c", STORE_RACE, "client", str(port),
                                         str(start_at), "1" if wait else "0"],
                                        capture_output=True, text=True, timeout=60)
                server.wait(30)
                err = server.stderr.read().decode(errors="replace").strip()
                took = float(client.stdout.strip() or "nan")
                rows.append({"wait": wait, "lead": lead, "client_s": took,
                             "server_stderr": err[-300:]})
                print(json.dumps(rows[-1]), flush=True)
    print("\n| client waits for the port | server starts after the client | client's TCPStore() "
          "until connected (s) |")
    print("|---|---|---|")
    for wait in (False, True):
        for lead in (0.0, 0.05, 0.2):
            vals = [r["client_s"] for r in rows if r["wait"] == wait and r["lead"] == lead]
            print(f"| {wait} | {lead} s | {statistics.median(vals):.3f} "
                  f"({min(vals):.3f}-{max(vals):.3f}) |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--store-race", action="store_true",
                    help="only the TCPStore connect race (no GPU needed)")
    ap.add_argument("--bootstrap", action="append", default=[])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gpus", default="0,1")
    ap.add_argument("--settle", type=float, default=2.0)
    ap.add_argument("--out", default="/tmp/warm_probe")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.store_race:
        store_race(a)
        return
    if not a.bootstrap:
        sys.exit("--bootstrap is required (or --store-race)")
    boots = [(os.path.basename(os.path.dirname(p)) or p, bootstrap_of(p)) for p in a.bootstrap]
    results = []
    port = 29700
    for rep in range(a.repeat):
        for i, (label, boot) in enumerate(boots):  # interleaved: drift hits both alike
            port += 1
            results.append(one_run(boot, f"b{i}-{label}", rep, a, port))
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)

    def cell(vals):
        vals = [v for v in vals if v is not None]
        if not vals:
            return "-"
        return f"{statistics.median(vals):.2f} ({min(vals):.2f}-{max(vals):.2f})"
    keys = ["init_process_group", "model_on_device", "ddp", "first_step"]
    print("\n| bootstrap | hand-off -> first step | " + " | ".join(keys) +
          " | killed rank 1: pidfd / EOF | killed rank 0: pidfd |")
    print("|" + "---|" * (len(keys) + 4))
    for i, (label, _) in enumerate(boots):
        rs = [r for r in results if r["bootstrap"] == f"b{i}-{label}"]
        ph = [r["phases"] or {} for r in rs]
        print(f"| b{i}-{label} | {cell([r['first_step_s'] for r in rs])} | " +
              " | ".join(cell([p.get(k) for p in ph]) for k in keys) +
              f" | {cell([r['rank1_dead_s'] for r in rs])} / {cell([r['rank1_eof_s'] for r in rs])}"
              f" | {cell([r['rank0_dead_s'] for r in rs])} |")


if __name__ == "__main__":
    main()
