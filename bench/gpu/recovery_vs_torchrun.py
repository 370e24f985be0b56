#!/usr/bin/env python3
"""Recovery side by side on one GPU host: elasticd (3 daemons on loopback ports acting as hosts,
one GPU each on two of them, the third a drained control-plane-only Raft voter) against torchrun
(two agents acting as hosts, one GPU each, c10d rendezvous, the store on agent A), training the
same small GPT with the same per-GPU batch and checkpoint interval.

Incidents, each timed from the kill to the first training step of the recovered run (the
arrival of that step's log line, polled every 20 ms, the same way for both systems; the
recovered run is elastic's next round, or a torchrun worker process that logged no step before
the kill):
  worker_crash     kill -9 of the rank-1 worker process
  node_loss        kill -9 of the host that does not hold the store (daemon, or agent + worker)
  store_node_loss  kill -9 of the host that holds the store (elastic: rank 0's daemon; torchrun:
                   the agent hosting the c10d store, + its worker)
  leader_node_loss (elastic) kill -9 of the GPU host that is the Raft leader (when the drained
                   voter leads, it is restarted first, so that a GPU host takes over)
  hang             (elastic) SIGSTOP of the rank-1 worker; the job has --hang-timeout 5s
After each node loss the host comes back (daemon restarted on its state dir; agent started
again) and the time until the job trains on 2 GPUs again is recorded. Steps lost = the last
step logged before the kill - the step the recovered run resumed from.
Elastic also checks: the killed daemon's worker dies with it, the loss falls, and after the
end no worker process and no GPU compute app of the job is left.

Usage: recovery_vs_torchrun.py elastic  --work DIR --gpus 0,1 --elasticd B --elasticctl B
                                         --trainer B --config conf/elasticd.toml
                                         [--worker python [--warm]] [--repeat N]
                                         [--daemon-set KEY=VALUE ...]
                                         [--goodput S --goodput-period S --goodput-down S]
       recovery_vs_torchrun.py torchrun --work DIR --gpus 0,1 --timeout S (0: the default)
                                         [--incidents worker_crash,...] [--auto-host]
       recovery_vs_torchrun.py summary RESULT.json...
--worker python runs bench/gpu/gpt_ddp.py (the torchrun-style DDP script torchrun runs here)
under elastic instead of elastic-trainer, unchanged; --warm submits it with warm = true (a
started interpreter per slot takes the next round). --repeat N runs the incident list N times.
Each run writes DIR/result.json and prints a short log."""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NO_NVLS = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
           "NVSHMEM_DISABLE_NVLS": "1"}
T0 = time.time()


HANG_TIMEOUT = "5s"  # the job's hang_timeout when the incidents include "hang" (the minimum)


def log(*parts):
    print(f"[{time.time() - T0:7.1f}s]", *parts, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# The time stamp elasticd starts each line of worker output with (spawner.log_timestamps).
LOG_STAMP = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")


class Tailer:
    """Follows every file matching the patterns; keeps (arrival time, file, JSON dict) for each
    complete JSON line, polled every 20 ms on a thread."""

    def __init__(self, patterns):
        self.patterns, self.offsets, self.partial = patterns, {}, {}
        self.lines, self.lock, self.stop = [], threading.Lock(), False
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        while not self.stop:
            for pattern in self.patterns:
                for path in glob.glob(pattern):
                    self.poll(path)
            time.sleep(0.02)

    def poll(self, path):
        try:
            with open(path, "rb") as f:
                f.seek(self.offsets.get(path, 0))
                data = f.read()
        except OSError:
            return
        if not data:
            return
        now = time.time()
        self.offsets[path] = self.offsets.get(path, 0) + len(data)
        text = self.partial.pop(path, b"") + data
        *complete, rest = text.split(b"\n")
        if rest:
            self.partial[path] = rest
        for raw in complete:
            raw = LOG_STAMP.sub(b"", raw, count=1)
            if not raw.startswith(b"{"):
                continue
            try:
                d = json.loads(raw)
            except ValueError:
                continue
            with self.lock:
                self.lines.append((now, path, d))

    def snapshot(self):
        with self.lock:
            return list(self.lines)

    def wait(self, predicate, limit, what):
        """Waits until predicate(lines) returns a value that is not None; returns it, or None
        after `limit` seconds."""
        deadline = time.time() + limit
        while time.time() < deadline:
            found = predicate(self.snapshot())
            if found is not None:
                return found
            time.sleep(0.02)
        log(f"timed out after {limit:.0f} s waiting for {what}")
        return None


def steps(lines, **match):
    return [(t, d) for (t, _, d) in lines
            if d.get("event") == "step" and all(d.get(k) == v for k, v in match.items())]


def alive(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(l.startswith("State:") and "Z" in l.split()[1] for l in f)
    except OSError:
        return False


def pids_with_env(pairs):
    found = []
    for path in glob.glob("/proc/[0-9]*/environ"):
        try:
            env = open(path, "rb").read().split(b"\0")
        except OSError:
            continue
        if all(f"{k}={v}".encode() in env for k, v in pairs.items()):
            found.append(int(path.split("/")[2]))
    return found


def env_of(pid):
    try:
        return dict(e.split("=", 1) for e in open(f"/proc/{pid}/environ", "rb").read().decode(
            errors="replace").split("\0") if "=" in e)
    except OSError:
        return {}


def gpu_apps():
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                              "--format=csv,noheader"], capture_output=True, text=True).stdout
    except OSError:
        return ["(no nvidia-smi)"]
    return [l.strip() for l in out.splitlines() if l.strip()]


def model_flags(a):
    return ["--gpt-layers", str(a.layers), "--gpt-width", str(a.width), "--gpt-heads",
            str(a.heads), "--gpt-vocab", str(a.vocab), "--gpt-context", str(a.context),
            "--batch-size", str(a.batch)]


# ------------------------------------------------------------------------------------- elastic

class Elastic:
    def __init__(self, a):
        self.a, self.work = a, a.work
        self.names = ["h0", "h1", "h2"]
        self.gpus = {"h0": [a.gpu_list[0]], "h1": [a.gpu_list[1]], "h2": []}
        self.ports = {n: free_port() for n in self.names}
        self.procs = {}
        os.makedirs(f"{self.work}/ckpt", exist_ok=True)
        # CURVE is on by default: a key pair per daemon, every .pub in one allow-list.
        os.makedirs(f"{self.work}/public_keys", exist_ok=True)
        os.chmod(f"{self.work}/public_keys", 0o755)
        for n in self.names:
            if not os.path.exists(f"{self.work}/keys/{n}.key"):
                subprocess.run([a.elasticctl, "-c", "", "keygen", "--dir", f"{self.work}/keys",
                                "--name", n], check=True, capture_output=True)
            shutil.copyfile(f"{self.work}/keys/{n}.pub", f"{self.work}/public_keys/{n}.pub")

    def ctl(self, node, *args, check=True):
        cmd = [self.a.elasticctl, "-c", self.a.config, "--set",
               f"control.socket={self.work}/{node}/ctl.sock", *args]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {r.stdout.strip()} {r.stderr.strip()}")
        return r.stdout

    def ctl_json(self, node, *args):
        try:
            return json.loads(self.ctl(node, *args, "--json"))
        except Exception:
            return None

    def start(self, node):
        seeds = ",".join(f'"{o}@127.0.0.1:{self.ports[o]}"' for o in self.names if o != node)
        os.makedirs(f"{self.work}/{node}/state", exist_ok=True)
        gpus = "[" + ",".join(map(str, self.gpus[node])) + "]"
        if self.a.cpu_test:  # CI-style check of this script without GPUs: Gloo on CPU slots
            gpus = "[]"
        cmd = [self.a.elasticd, "-c", self.a.config,
               "--set", f"node.name={node}",
               "--set", f"node.state_dir={self.work}/{node}/state",
               "--set", f"node.gpus={gpus}",
               "--set", f"transport.bind=tcp://127.0.0.1:{self.ports[node]}",
               "--set", f"membership.seeds=[{seeds}]",
               "--set", f"transport.secret_key_file={self.work}/keys/{node}.key",
               "--set", f"transport.public_keys_dir={self.work}/public_keys",
               "--set", 'consensus.voters=["h0","h1","h2"]',
               "--set", f"control.socket={self.work}/{node}/ctl.sock",
               # three daemons on one loopback: each dashboard on a free port, not 8474
               "--set", "dashboard.listen=127.0.0.1:0",
               "--set", f"checkpoint.root={self.work}/ckpt"]
        if self.a.cpu_test:
            cmd += ["--set", "node.cpu_slots=1"]
        for setting in self.a.daemon_set:
            cmd += ["--set", setting]
        logf = open(f"{self.work}/{node}/elasticd.log", "a")
        self.procs[node] = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)

    def wait_ctl(self, what, pred, limit=60):
        deadline = time.time() + limit
        while time.time() < deadline:
            try:
                v = pred()
                if v:
                    return v
            except Exception:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"timed out waiting for {what}")

    def job(self, node=None):
        for n in ([node] if node else [n for n in self.names if self.procs.get(n)]):
            j = self.ctl_json(n, "status", self.job_id)
            if j:
                return j.get("job", j)
        return None

    def events(self):
        for n in [n for n in self.names if self.procs.get(n)]:
            e = self.ctl_json(n, "events", self.job_id)
            if e:
                return e.get("events", [])
        return []

    def worker(self, rank):
        """The running worker of `rank` in the newest round, from the daemons' status (a warm
        interpreter's /proc environ still shows the round it was started in)."""
        found = []
        for n in [n for n in self.names if self.procs.get(n)]:
            for w in (self.ctl_json(n, "status") or {}).get("workers", []):
                if (w.get("job") == self.job_id and w.get("rank") == rank and
                        w.get("state") == "running" and alive(w.get("pid", 0))):
                    found.append((w.get("round", 0), w["pid"], n))
        if not found:
            return None, None
        _, pid, node = max(found)
        return pid, node

    def run(self):
        a = self.a
        res = self.res = {"system": "elastic", "incidents": [], "grow": []}
        for n in self.names:
            self.start(n)
        self.wait_ctl("3 alive members", lambda: all(
            sum(m["state"] == "alive" for m in (self.ctl_json(n, "nodes") or {}).get("members", []))
            == 3 for n in self.names))
        leader = self.wait_ctl("a Raft leader", self.raft_leader)
        log(f"3 daemons up, Raft leader {leader}")
        self.wait_ctl("drain of h2", lambda: self.ctl("h0", "drain", "h2", "--reason",
                                                      "control-plane-only voter") is not None)
        res["topology"] = self.ctl_json("h0", "nodes", "--topology")
        if a.worker == "python":  # the torchrun-style script, unchanged
            # As a torchrun user runs it: its own checkpoint directory, which must exist.
            os.makedirs(f"{self.work}/ckpt/py", exist_ok=True)
            train = [sys.executable, f"{HERE}/gpt_ddp.py", "--mode", "recovery", *model_flags(a),
                     "--ckpt-dir", f"{self.work}/ckpt/py", "--ckpt-interval",
                     str(a.ckpt_interval), "--timeout", str(a.collective_timeout),
                     *(["--cpu"] if a.cpu_test else [])]
        else:
            train = [a.trainer, "--model", "gpt", "--dtype", "fp32" if a.cpu_test else "bf16",
                     "--device", "cpu" if a.cpu_test else "cuda",
                     *model_flags(a), "--checkpoint-interval", str(a.ckpt_interval),
                     "--log-interval", "1", "--no-eval", "--timeout", str(a.collective_timeout),
                     "--max-steps", "100000000", "--epochs", "1000", *a.trainer_extra.split()]
        submit = ["submit", "--name", "gpt", "--nodes", "1:2", "--restart-backoff", "0s",
                  "--max-restarts", "100", "--checkpoint-root", f"{self.work}/ckpt"]
        if "hang" in a.incidents.split(","):
            submit += ["--hang-timeout", HANG_TIMEOUT]
        if a.warm:
            submit.append("--warm")
        res["worker"], res["warm"], res["daemon_set"] = a.worker, a.warm, a.daemon_set
        res["trainer_extra"] = a.trainer_extra
        for k, v in NO_NVLS.items():
            submit += ["--env", f"{k}={v}"]
        reply = json.loads(self.ctl("h0", *submit, "--json", "--", *train))
        self.job_id = reply.get("job", reply).get("id")
        res["job"], res["submit"] = self.job_id, " ".join(submit + ["--"] + train)
        log(f"submitted job {self.job_id}")
        tail = Tailer([f"{self.work}/h*/state/logs/{self.job_id}/round-*/rank-*.log"])
        self.tail = tail
        first = tail.wait(lambda L: (steps(L, world_size=2) or [None])[0], 180, "training on 2 GPUs")
        if not first:
            raise RuntimeError("the job did not train on 2 GPUs")
        res["first_loss"] = first[1]["loss"]
        start_line = next((d for (_, _, d) in tail.snapshot() if d.get("event") == "start"), {})
        res["start_line"] = start_line
        self.settle(2)
        if a.goodput:
            res["goodput"] = self.goodput()
        for _ in range(0 if a.goodput else a.repeat):
            for kind in a.incidents.split(","):
                if a.warm:
                    self.wait_standbys_ready()
                res["incidents"].append(self.incident(kind, res))
                self.settle(2)
                # Incidents hours apart, not seconds: a warm job's new standbys finish warming
                # up (about 10 s on a GPU host) before the next one.
                time.sleep(a.settle_extra)
        L = tail.snapshot()
        res["last_loss"] = steps(L)[-1][1]["loss"]
        res["steps_per_s_2gpu"] = self.rate(L)
        res["ckpt_seconds"] = [d.get("seconds") for (_, _, d) in L
                               if d.get("event") == "checkpoint"][-5:]
        res["events"] = self.events()
        self.ctl("h0", "cancel", self.job_id, check=False)
        self.wait_ctl("the job cancelled", lambda: (self.job() or {}).get("state") in
                      ("cancelled", "succeeded", "failed"), 60)
        res["final_state"] = (self.job() or {}).get("state")
        try:
            self.wait_ctl("no worker left", lambda: not [p for p in pids_with_env(
                {"ELASTIC_JOB_ID": self.job_id}) if alive(p)], 30)
        except RuntimeError as e:
            log(str(e))
        res["workers_left_after_cancel"] = [p for p in pids_with_env({"ELASTIC_JOB_ID": self.job_id}) if alive(p)]
        apps = gpu_apps()
        res["gpu_apps_after_cancel"] = [x for x in apps if "elastic-trainer" in x]
        res["gpu_apps_all"] = apps
        log(f"job {res['final_state']}; workers left {res['workers_left_after_cancel']}; "
            f"elastic-trainer GPU apps left {res['gpu_apps_after_cancel']}")
        return res

    def samples_between(self, t0, t1):
        """Samples the job trained between t0 and t1 (the step lines' arrival times): each step
        counts world_size x batch once, at its last occurrence (a step redone after a
        re-formation counts once)."""
        last = {}
        for (t, d) in steps(self.tail.snapshot()):
            last[d["step"]] = (t, d["world_size"])
        return sum(w * self.a.batch for (t, w) in last.values() if t0 <= t < t1)

    def goodput(self):
        """A fault-free baseline, then a node loss every --goodput-period seconds for --goodput
        seconds (kill -9 of a GPU host's daemon, h1 and h0 in turn; started again
        --goodput-down seconds later): goodput = samples trained / (baseline samples/s x
        duration)."""
        a = self.a
        t0 = time.time()
        time.sleep(a.goodput_baseline)
        t1 = time.time()
        base = self.samples_between(t0, t1) / (t1 - t0)
        log(f"goodput: fault-free {base:.0f} samples/s over {t1 - t0:.0f} s")
        start = time.time()
        end = start + a.goodput
        losses, victims = [], ["h1", "h0"]
        k = 0
        while time.time() < end:
            at = start + (k + 1) * a.goodput_period
            if at >= end:
                break
            time.sleep(max(0.0, at - time.time()))
            node = victims[k % 2]
            self.procs[node].kill()
            self.procs[node].wait()
            self.procs[node] = None
            log(f"goodput: killed {node}'s daemon at +{time.time() - start:.0f} s")
            time.sleep(a.goodput_down)
            self.start(node)
            losses.append({"node": node, "at_s": at - start})
            k += 1
        time.sleep(max(0.0, end - time.time()))
        trained = self.samples_between(start, end)
        out = {"duration_s": a.goodput, "period_s": a.goodput_period, "down_s": a.goodput_down,
               "baseline_s": t1 - t0, "baseline_samples_per_s": base,
               "checkpoint_interval_steps": a.ckpt_interval, "losses": losses,
               "samples": trained, "fault_free_samples": base * a.goodput,
               "goodput": trained / (base * a.goodput) if base > 0 else None}
        ckpts = [t for (t, _, d) in self.tail.snapshot() if d.get("event") == "checkpoint"
                 and start <= t < end]
        out["checkpoints"] = len(ckpts)
        log(f"goodput: {out['goodput']:.3f} ({trained} of {base * a.goodput:.0f} samples, "
            f"{len(losses)} node losses, {len(ckpts)} checkpoints in {a.goodput:.0f} s)")
        return out

    def rate(self, L):
        s = steps(L, world_size=2)[-200:]
        if len(s) < 2:
            return None
        return (s[-1][1]["step"] - s[0][1]["step"]) / max(1e-9, s[-1][0] - s[0][0])

    def settle(self, world):
        """Trains on `world` GPUs past at least one checkpoint (in the current round or a later
        one: after a live shrink the job grows back by itself)."""
        L = self.tail.snapshot()
        rnd = steps(L)[-1][1]["round"]
        target = steps(L)[-1][1]["step"] + self.a.ckpt_interval + 10
        ok = self.tail.wait(lambda L: True if any(d["step"] >= target and d["round"] >= rnd
                                                  for (_, d) in steps(L, world_size=world))
                            else None, 120, f"step {target} on {world} GPUs")
        if not ok:
            raise RuntimeError(f"the job did not reach step {target} on {world} GPUs")

    def standbys_ready(self):
        """Every GPU host that runs a rank has a warm standby that said it is ready and has not
        been handed a round since (its log: "standby slot N: started pid P", then "[elastic
        warm] ready", then "pid P now runs ..." once used)."""
        nodes = {self.worker(r)[1] for r in (0, 1)}
        if None in nodes:
            return False
        for node in nodes:
            ready = False
            for path in glob.glob(f"{self.work}/{node}/state/logs/{self.job_id}/standby-*.log"):
                state = None
                with open(path, errors="replace") as f:
                    for line in f:
                        if "standby slot" in line and ": started pid" in line:
                            state = "started"
                        elif "[elastic warm] ready" in line and state == "started":
                            state = "ready"
                        elif " now runs " in line or "killed by signal" in line or " exited " in line:
                            state = None
                ready = ready or state == "ready"
            if not ready:
                return False
        return True

    def wait_standbys_ready(self):
        """Incidents come hours apart, not seconds: each waits until the warm standbys have
        finished warming up (about 10 s on a GPU host after each round), else it measures a
        cold start."""
        t0 = time.time()
        self.wait_ctl("warm standbys ready", lambda: self.standbys_ready() or None, limit=120)
        log(f"warm standbys ready ({time.time() - t0:.1f} s)")

    def raft_leader(self):
        for n in [n for n in self.names if self.procs.get(n)]:
            leader = ((self.ctl_json(n, "status") or {}).get("consensus", {}) or {}).get("leader")
            if leader:
                return leader
        return None

    def leader_on_gpu_host(self):
        """Makes a GPU host the Raft leader: while the drained voter h2 leads, restart it (a GPU
        host wins the election while it is down). Returns the leader."""
        for _ in range(5):
            leader = self.wait_ctl("a Raft leader", self.raft_leader)
            if leader != "h2":
                return leader
            self.procs["h2"].kill()
            self.procs["h2"].wait()
            self.procs["h2"] = None
            self.wait_ctl("a new Raft leader", lambda: self.raft_leader() not in (None, "h2"))
            self.start("h2")
            self.wait_ctl("h2 back", lambda: self.ctl_json("h2", "status") is not None)
        raise RuntimeError("the drained voter h2 keeps winning the election")

    def incident(self, kind, res):
        a = self.a
        L = self.tail.snapshot()
        old_round = steps(L)[-1][1]["round"]
        rank = 0 if kind == "store_node_loss" else 1
        if kind == "leader_node_loss":
            leader = self.leader_on_gpu_host()
            L = self.tail.snapshot()
            old_round = steps(L)[-1][1]["round"]
            rank = next(r for r in (0, 1) if self.worker(r)[1] == leader)
        pid, node = self.worker(rank)
        leader = self.raft_leader()
        out = {"kind": kind, "victim_rank": rank, "victim_node": node, "raft_leader": leader,
               "old_round": old_round}
        if kind == "worker_crash":
            t0 = time.time()
            os.kill(pid, signal.SIGKILL)
        elif kind == "hang":
            t0 = time.time()
            os.kill(pid, signal.SIGSTOP)
            # Its daemon ends it (SIGABRT, SIGCONT, SIGKILL); record when.
            self.stopped_pid = pid
        else:
            dpid = self.procs[node].pid
            t0 = time.time()
            os.kill(dpid, signal.SIGKILL)
            self.procs[node].wait()
            self.procs[node] = None
            died = None
            while time.time() < t0 + 10:
                if not alive(pid):
                    died = time.time() - t0
                    break
                time.sleep(0.01)
            out["worker_died_with_daemon_s"] = died
        what = {"worker_crash": "killed the worker", "hang": "stopped the worker"}.get(
            kind, "killed the daemon")
        log(f"{kind}: {what} of rank {rank} on {node} (Raft leader {leader})")
        # A node loss leaves 1 GPU; a worker crash 2 (restarted) or 1 (the survivor re-formed
        # in place without the crashed rank's node, which grows back once its rank is ready);
        # a hung rank 1 (its node is left out until its worker is gone).
        world = None if kind == "worker_crash" else 1
        match = {} if world is None else {"world_size": world}
        hit = self.tail.wait(lambda L: next(((t, d) for (t, d) in steps(L, **match)
                                             if d["round"] > old_round), None), a.limit,
                             f"recovery after {kind}")
        L = self.tail.snapshot()
        out["last_step_before"] = max(d["step"] for (_, d) in steps(L, round=old_round))
        if hit:
            new_round = hit[1]["round"]
            # "reform": re-formed in place, its step the agreed one (no checkpoint read).
            resume = next((d for (_, _, d) in L if d.get("event") in ("resume", "start", "reform")
                           and d.get("round") == new_round), {})
            out["reformed_in_place"] = resume.get("event") == "reform"
            out.update(recovered=True, first_step_s=hit[0] - t0, new_round=new_round,
                       world_after=hit[1]["world_size"], resume_step=resume.get("step"),
                       steps_lost=out["last_step_before"] - resume.get("step", 0))
            # gpt_ddp.py's start-up phases of the new round's rank 0 (seconds from the script's
            # first line), and when that first line ran (the hand-off, for a warm interpreter).
            startup = next((d for (_, _, d) in L if d.get("event") == "startup" and
                            d.get("round") == new_round), None)
            if startup:
                out["startup_phases"] = startup["phases"]
                out["script_started_s"] = startup["t"] - startup["phases"]["first_step"] - t0
            ev = [e for e in self.events() if e["at_ms"] / 1000 >= t0 - 0.05]
            if ev:
                out["detected_s"] = ev[0]["at_ms"] / 1000 - t0
                out["events"] = ev[:4]
            log(f"  recovered: first step {out['first_step_s']:.2f} s after the kill, world "
                f"{out['world_after']}, resumed from step {out.get('resume_step')}, steps lost "
                f"{out['steps_lost']}, detected {out.get('detected_s', float('nan')):.2f} s")
        else:
            out.update(recovered=False, waited_s=a.limit)
        if kind == "hang":
            ended = None
            while time.time() < t0 + a.limit:
                if not alive(pid):
                    ended = time.time() - t0
                    break
                time.sleep(0.05)
            out["stopped_worker_ended_s"] = ended
            if ended is None:
                os.kill(pid, signal.SIGKILL)
        if kind in ("worker_crash", "hang") and hit and hit[1]["world_size"] < 2:
            cur = hit[1]["round"]
            grow = self.tail.wait(lambda L: next(((t, d) for (t, d) in steps(L, world_size=2)
                                                  if d["round"] > cur), None), 120, "growth to 2")
            res["grow"].append(self.grow_record(kind, node, grow, None, cur))
        if kind not in ("worker_crash", "hang"):
            self.settle(1)
            t1 = time.time()
            self.start(node)
            cur = steps(self.tail.snapshot())[-1][1]["round"]
            grow = self.tail.wait(lambda L: next(((t, d) for (t, d) in steps(L, world_size=2)
                                                  if d["round"] > cur), None), 120, "growth to 2")
            g = self.grow_record(kind, node, grow, t1, cur)
            res["grow"].append(g)
            log(f"  {node} restarted: training on 2 GPUs again {g['first_step_on_2_s']} s later")
        return out

    def grow_record(self, kind, node, grow, t1, cur):
        """The growth back to 2 GPUs: from the restart (t1) to its first step, and the running
        rank's pause (its last step line of round `cur` -> its first of the grown round)."""
        g = {"after": kind, "node": node,
             "first_step_on_2_s": grow[0] - t1 if grow and t1 is not None else None}
        if grow:
            lines = self.tail.snapshot()
            before = [t for (t, d) in steps(lines, round=cur)]
            if before:
                g["pause_s"] = grow[0] - max(before)
            # The running rank's own account of the pause (its "reform" line of the grown round;
            # a joiner's says "joined"): intact switch or abort, and the time of each phase.
            reform = next((d for (_, _, d) in lines if d.get("event") == "reform"
                           and d.get("round") == grow[1]["round"] and not d.get("joined")), None)
            if reform:
                g["reform"] = {k: reform[k] for k in (
                    "intact", "safety_abort", "pending_s", "abandon_s", "switch_wait_s", "form_s",
                    "agree_s", "transfer_s") if k in reform}
        return g

    def shutdown(self):
        for p in self.procs.values():
            if p:
                p.terminate()
        for p in self.procs.values():
            if p:
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()


# ------------------------------------------------------------------------------------ torchrun

class Torchrun:
    def __init__(self, a):
        self.a, self.work = a, a.work
        self.port = free_port()
        self.agents = {}
        os.makedirs(f"{self.work}/ckpt", exist_ok=True)

    def start(self, name):
        a = self.a
        gpu = a.gpu_list[0] if name == "A" else a.gpu_list[1]
        cmd = ["torchrun", "--nnodes=1:2", "--nproc-per-node=1", "--rdzv-backend=c10d",
               f"--rdzv-endpoint=127.0.0.1:{self.port}", f"--rdzv-id=bench-{self.port}",
               *([] if a.auto_host else [f"--rdzv-conf=is_host={1 if name == 'A' else 0}"]),
               "--max-restarts=100",
               "--monitor-interval=0.1", f"{HERE}/gpt_ddp.py", "--mode", "recovery",
               *model_flags(a), "--ckpt-dir", f"{self.work}/ckpt", "--ckpt-interval",
               str(a.ckpt_interval), "--timeout", str(a.timeout), "--jsonl-out",
               f"{self.work}/{name}.jsonl", "--pid-file", f"{self.work}/{name}.pid"]
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu), PYTHONUNBUFFERED="1", **NO_NVLS)
        logf = open(f"{self.work}/agent-{name}.log", "a")
        self.agents[name] = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT,
                                             start_new_session=True)
        self.cmd = " ".join(cmd)

    def worker(self, name):
        try:
            return int(open(f"{self.work}/{name}.pid").read())
        except (OSError, ValueError):
            return None

    def run(self):
        a = self.a
        res = self.res = {"system": "torchrun", "timeout_s": a.timeout or "default (600)",
                          "incidents": [], "grow": []}
        self.start("A")
        if a.auto_host:  # A binds the store port first; B then falls back to a client
            time.sleep(3)
        self.start("B")
        res["command"] = self.cmd
        tail = Tailer([f"{self.work}/A.jsonl", f"{self.work}/B.jsonl"])
        self.tail = tail
        first = tail.wait(lambda L: (steps(L, world_size=2) or [None])[0], 180, "training on 2 GPUs")
        if not first:
            raise RuntimeError("torchrun did not train on 2 GPUs")
        res["first_loss"] = first[1]["loss"]
        self.settle(2)
        kinds = a.incidents.split(",") * a.repeat
        for n, kind in enumerate(kinds):
            out = self.incident(kind, res)
            res["incidents"].append(out)
            if not out["recovered"]:
                break
            self.settle(2 if kind == "worker_crash" else 1)
            if kind == "node_loss" and n + 1 < len(kinds):
                t1 = time.time()
                self.start("B")
                grow = tail.wait(lambda L: next(((t, d) for (t, d) in steps(L, world_size=2)
                                                 if t > t1), None),
                                 180, "growth to 2")
                res["grow"].append({"after": kind, "first_step_on_2_s": grow[0] - t1 if grow else None})
                log(f"  B restarted: training on 2 GPUs again "
                    f"{res['grow'][-1]['first_step_on_2_s']} s later")
                if not grow:
                    break
                self.settle(2)
        L = tail.snapshot()
        res["last_loss"] = steps(L)[-1][1]["loss"] if steps(L) else None
        return res

    def settle(self, world):
        L = self.tail.snapshot()
        target = steps(L)[-1][1]["step"] + self.a.ckpt_interval + 10
        t = self.tail.wait(lambda L: True if any(d["step"] >= target for (_, d) in
                                                 steps(L, world_size=world)) else None,
                           120, f"step {target} on {world} GPUs")
        if not t:
            raise RuntimeError(f"torchrun did not reach step {target} on {world} GPUs")

    def incident(self, kind, res):
        a = self.a
        L = self.tail.snapshot()
        out = {"kind": kind}
        t0 = time.time()
        if kind == "worker_crash":
            os.kill(self.worker("B"), signal.SIGKILL)
            victim, world = "B worker", 2
        else:
            name = "B" if kind == "node_loss" else "A"
            wpid = self.worker(name)
            os.kill(self.agents[name].pid, signal.SIGKILL)
            if wpid:
                os.kill(wpid, signal.SIGKILL)
            self.agents[name].wait()
            victim, world = f"agent {name} + its worker", 1
        out["victim"] = victim
        log(f"torchrun {kind}: killed {victim}")
        limit = a.store_limit if kind == "store_node_loss" else a.limit
        survivor = "A" if kind == "node_loss" else ("B" if kind == "store_node_loss" else None)

        # Recovered = a step line from a worker process that logged no step before the kill
        # (rank 0 logs; every restart makes new worker processes).
        old_pids = {d.get("pid") for (t, d) in steps(L)}

        def recovered(L):
            return next(((t, d) for (t, d) in steps(L, world_size=world)
                         if t > t0 and d.get("pid") not in old_pids), None)
        hit = self.tail.wait(recovered, limit, f"torchrun recovery after {kind}")
        L = self.tail.snapshot()
        before = [d["step"] for (t, d) in steps(L) if t <= t0 + 0.05]
        out["last_step_before"] = max(before) if before else None
        if hit:
            resume = [d for (t, _, d) in L if t > t0 and d.get("event") in ("resume", "start")
                      and d.get("pid") == hit[1].get("pid")]
            rs = resume[0]["step"] if resume else 0
            out.update(recovered=True, first_step_s=hit[0] - t0, world_after=hit[1]["world_size"],
                       resume_step=rs, steps_lost=(out["last_step_before"] or 0) - rs)
            log(f"  recovered: first step {out['first_step_s']:.2f} s after the kill, world "
                f"{out['world_after']}, resumed from {rs}, steps lost {out['steps_lost']}")
        else:
            out.update(recovered=False, waited_s=limit)
            tailtxt = open(f"{self.work}/agent-{survivor or 'A'}.log", errors="replace").read()[-600:]
            out["survivor_log_tail"] = tailtxt
            log(f"  NOT recovered within {limit:.0f} s")
        return out

    def shutdown(self):
        for name, p in self.agents.items():
            for pid in (self.worker(name),):
                if pid and alive(pid) and env_of(pid).get("CUDA_VISIBLE_DEVICES") is not None:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)  # the session we created for this agent
                except OSError:
                    pass
                p.wait()


# ------------------------------------------------------------------------------------- summary

def summary(paths):
    rows = []
    for path in paths:
        try:
            r = json.load(open(path))
        except (OSError, ValueError):
            print(f"(no result in {path})")
            continue
        if r["system"] == "elastic":
            name = "elastic" + ({"python": ", Python DDP script"}.get(r.get("worker"), "") +
                                (", warm" if r.get("warm") else "") +
                                (f", {r['trainer_extra']}" if r.get("trainer_extra") else "") +
                                "".join(f", {s}" for s in r.get("daemon_set", [])
                                        if "store_port" not in s))
        else:
            name = f"torchrun, timeout {r['timeout_s']}"
        if "error" in r:
            print(f"{name}: ERROR {r['error']}")
        for i in r.get("incidents", []):
            if i.get("startup_phases"):
                p = i["startup_phases"]
                print(f"{name} {i['kind']}: script started {i['script_started_s']:.2f} s after the "
                      "kill; then " + ", ".join(f"{k} {v:.2f}" for k, v in p.items()))
            if i.get("recovered"):
                rows.append((name, i["kind"], f"{i['first_step_s']:.2f}", str(i.get("steps_lost")),
                             str(i.get("world_after")), f"{i['detected_s']:.2f}" if "detected_s" in i else "-"))
            else:
                rows.append((name, i["kind"], f"not within {i.get('waited_s', 0):.0f}", "-", "-", "-"))
        for g in r.get("grow", []):
            v = g.get("first_step_on_2_s")
            if v is not None or "pause_s" not in g:
                rows.append((name, f"grow back after {g['after']}", f"{v:.2f}" if v else "no", "-",
                             "2", "-"))
            if "pause_s" in g:
                rows.append((name, f"running rank's pause when growing after {g['after']}",
                             f"{g['pause_s']:.2f}", "-", "2", "-"))
        if r.get("goodput"):
            g = r["goodput"]
            print(f"{name} goodput: {g['goodput']:.3f} over {g['duration_s']:.0f} s, a node loss "
                  f"every {g['period_s']:.0f} s (down {g['down_s']:.0f} s), checkpoint every "
                  f"{g['checkpoint_interval_steps']} steps ({g['checkpoints']} written); "
                  f"fault-free {g['baseline_samples_per_s']:.0f} samples/s over "
                  f"{g['baseline_s']:.0f} s")
        if r["system"] == "elastic":
            print(f"elastic: loss {r.get('first_loss')} -> {r.get('last_loss')}; worker died with its "
                  f"daemon: {[i.get('worker_died_with_daemon_s') for i in r.get('incidents', [])]}; "
                  f"workers left {r.get('workers_left_after_cancel')}; trainer GPU apps left "
                  f"{r.get('gpu_apps_after_cancel')}; {r.get('steps_per_s_2gpu')} steps/s on 2 GPUs")
        else:
            print(f"{name}: loss {r.get('first_loss')} -> {r.get('last_loss')}")
    by_kind = {}
    for row in rows:
        try:
            by_kind.setdefault((row[0], row[1]), []).append(float(row[2]))
        except ValueError:
            pass
    print("\n| system | event | runs | first step after (s): median | min-max |")
    print("|---|---|---|---|---|")
    for (name, kind), v in by_kind.items():
        v = sorted(v)
        med = v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
        print(f"| {name} | {kind} | {len(v)} | {med:.2f} | {v[0]:.2f}-{v[-1]:.2f} |")
    print("\n| system | event | first step after (s) | steps lost | world after | detected (s) |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("system", choices=["elastic", "torchrun", "summary"])
    ap.add_argument("results", nargs="*")
    ap.add_argument("--work", default="/tmp/gpubench")
    ap.add_argument("--gpus", default="0,1")
    ap.add_argument("--elasticd")
    ap.add_argument("--elasticctl")
    ap.add_argument("--trainer")
    ap.add_argument("--config")
    ap.add_argument("--timeout", type=float, default=60, help="torchrun collective timeout, 0: default")
    ap.add_argument("--collective-timeout", type=float, default=60, help="elastic-trainer --timeout")
    ap.add_argument("--incidents", default="worker_crash,node_loss,store_node_loss")
    ap.add_argument("--limit", type=float, default=300, help="seconds to wait for a recovery")
    ap.add_argument("--store-limit", type=float, default=150)
    ap.add_argument("--ckpt-interval", type=int, default=100)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--auto-host", action="store_true",
                    help="torchrun: no is_host in --rdzv-conf (the store goes to the first agent)")
    ap.add_argument("--cpu-test", action="store_true", help="elastic on CPU (script check)")
    ap.add_argument("--worker", choices=["trainer", "python"], default="trainer",
                    help="elastic: elastic-trainer, or gpt_ddp.py (the torchrun script) unchanged")
    ap.add_argument("--warm", action="store_true", help="elastic: submit with --warm")
    ap.add_argument("--trainer-extra", default="",
                    help="elastic: more elastic-trainer flags (e.g. --no-live)")
    ap.add_argument("--repeat", type=int, default=1, help="run the incident list N times")
    ap.add_argument("--goodput", type=float, default=0,
                    help="elastic: instead of the incidents, train this many seconds with a node "
                         "loss every --goodput-period s and report the goodput")
    ap.add_argument("--goodput-period", type=float, default=300)
    ap.add_argument("--goodput-down", type=float, default=10,
                    help="seconds a lost node's daemon stays down")
    ap.add_argument("--goodput-baseline", type=float, default=60,
                    help="seconds of fault-free training measured first")
    ap.add_argument("--settle-extra", type=float, default=0,
                    help="elastic: seconds to wait after each recovery settled")
    ap.add_argument("--daemon-set", action="append", default=[],
                    help="elastic: KEY=VALUE for every elasticd (repeatable)")
    a = ap.parse_args()
    if a.system == "summary":
        return summary(a.results)
    a.gpu_list = [int(g) for g in a.gpus.split(",")]
    os.makedirs(a.work, exist_ok=True)
    runner = Elastic(a) if a.system == "elastic" else Torchrun(a)
    try:
        res = runner.run()
    except Exception as e:  # the result file says what broke; the logs stay in --work
        log(f"ERROR: {e}")
        res = dict(getattr(runner, "res", {}), system=a.system, error=str(e))
        res.setdefault("timeout_s", a.timeout)
    finally:
        runner.shutdown()
    res["model"] = " ".join(model_flags(a)) + f" ckpt every {a.ckpt_interval}"
    json.dump(res, open(f"{a.work}/result.json", "w"), indent=1)
    log(f"wrote {a.work}/result.json")


if __name__ == "__main__":
    main()
