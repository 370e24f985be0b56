#!/bin/bash
# Runs the GPU benchmarks of issue 7 ON the GPU host, in few calls (each phase fits one 10-minute
# command). Needs what bench/gpu/build-for-device.sh prepared here: .device/bin/{elasticd,
# elasticctl}, .device/lib (their shared libraries that the host lacks) and .device/deps
# (header-only packages for the trainer build). Results go to $OUT (default /tmp/gpubench/out).
#
#   bench/gpu/run-on-device.sh setup        build elastic-trainer against the host's LibTorch;
#                                           check the carried daemon runs and sees the GPUs
#   bench/gpu/run-on-device.sh throughput   bench/gpu/throughput.sh on 1, 2, 4 GPUs
#   bench/gpu/run-on-device.sh recovery     elastic on GPUs 0,1 and torchrun (60 s timeout) on
#                                           2,3, in parallel; torchrun with the default timeout
#                                           (its node loss needs > 10 min) starts detached on
#                                           GPUs 1,0 (sharing the elastic GPUs: any slowdown
#                                           counts against elastic) and is collected by
#   bench/gpu/run-on-device.sh collect      waits (up to 9.5 min) for that run; prints all tables
#   bench/gpu/run-on-device.sh torchrun_only  the torchrun half of `recovery` alone (both timeouts)
#   bench/gpu/run-on-device.sh recovery_elastic  the elastic half of `recovery` alone
#   bench/gpu/run-on-device.sh profile      Kineto traces of trainer and DDP steps, summarised
#   bench/gpu/run-on-device.sh recovery_python        gpt_ddp.py under elastic, cold vs warm
#   bench/gpu/run-on-device.sh recovery_python_ready  warm, standbys ready: default vs 1.5 s lease
#   bench/gpu/run-on-device.sh recovery_python_lease  warm with a 1.5 s lease, beside torchrun
#   bench/gpu/run-on-device.sh recovery_python_warm2  warm, default config, GPUs 0,1 only
#   bench/gpu/run-on-device.sh checkpoint_stall  one checkpoint's stall of the training thread,
#                                           GPT-2 small fp32 on GPU 0, this tree's trainer
#                                           beside the one in .device/old-src (a `git archive`
#                                           of an earlier commit, if present)
# Several phases may be named in one call. NVLink multicast stays off everywhere.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${OUT:-/tmp/gpubench/out}
mkdir -p "$out"
work=/tmp/gpubench
mkdir -p "$work"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=$root/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
bin=$root/.device/bin
trainer=$root/build/gpu/trainer/elastic-trainer
py=$root/bench/gpu/recovery_vs_torchrun.py
ngpu=$(nvidia-smi -L | wc -l)

setup() {
  {
    date -u '+%Y-%m-%d %H:%M UTC'
    nvidia-smi --query-gpu=index,name,memory.total,driver_version,pci.bus_id --format=csv,noheader
    nvidia-smi topo -m | head -8
    python3 -c 'import torch;print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
    echo "cpus $(nproc); $(. /etc/os-release; echo "$PRETTY_NAME"); kernel $(uname -r)"
    echo "-- carried daemon: missing libraries (none expected):"
    ldd "$bin/elasticd" "$bin/elasticctl" | grep 'not found' || echo "none"
    "$bin/elasticd" --version
  } 2>&1 | tee "$out/setup.log"
  if ! "$root/bench/gpu/build-trainer.sh" "$root/build/gpu" >"$work/build-trainer.log" 2>&1; then
    tail -40 "$work/build-trainer.log" | tee -a "$out/setup.log"
    return 1
  fi
  tail -1 "$work/build-trainer.log" | tee -a "$out/setup.log"
  # The daemon's view of the GPUs (hwloc), from a throwaway one-node daemon.
  local d=$work/smoke
  rm -rf "$d"; mkdir -p "$d/state"
  "$bin/elasticd" -c conf/elasticd.toml --set node.name=smoke --set node.state_dir="$d/state" \
    --set transport.bind=tcp://127.0.0.1:7999 --set control.socket="$d/ctl.sock" \
    --set transport.curve=false >"$d/elasticd.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do [ -S "$d/ctl.sock" ] && break; sleep 0.1; done
  sleep 1
  "$bin/elasticctl" -c conf/elasticd.toml --set control.socket="$d/ctl.sock" nodes --topology \
    2>&1 | head -30 | tee -a "$out/setup.log"
  kill -TERM "$pid"; wait "$pid"
  grep -i 'gpu\|hwloc\|topolog\|error\|warn' "$d/elasticd.log" | head -10 | tee -a "$out/setup.log"
}

checkpoint_stall() {
  local builds=("$root/build/gpu")
  if [ -d "$root/.device/old-src" ]; then
    # build-trainer.sh builds the tree it lives in: run the old tree's own copy, with this
    # tree's header-only dependencies.
    mkdir -p "$root/.device/old-src/.device"
    ln -sfn "$root/.device/deps" "$root/.device/old-src/.device/deps"
    (cd "$root/.device/old-src" && bash bench/gpu/build-trainer.sh "$work/old-build") \
      >"$work/build-old.log" 2>&1 || tail -30 "$work/build-old.log" | tee -a "$out/checkpoint-stall.md"
    [ -x "$work/old-build/trainer/elastic-trainer" ] && builds=("$work/old-build" "${builds[@]}")
  fi
  CUDA_VISIBLE_DEVICES=0 GPU=1 INTERVAL=${INTERVAL:-10} CHECKPOINTS=${CHECKPOINTS:-6} \
    TMPDIR=$work bash "$root/bench/checkpoint-stall.sh" "${builds[@]}" 2>"$work/stall.err" |
    tee -a "$out/checkpoint-stall.md"
  tail -20 "$work/stall.err" >>"$out/checkpoint-stall.md"
}

throughput() {
  GPUS="1 2 4" bash "$root/bench/gpu/throughput.sh" "$trainer" "$out" 2>"$work/throughput.err" |
    tee "$out/throughput.md"
  tail -5 "$work/throughput.err"
  grep -v '^{' "$out/throughput-raw.log" | grep -iv 'warning\|^\s*$\|W1126\|\*\*\*\*' | tail -20 >"$out/throughput-stderr-tail.log" || true
  rm -f "$out/throughput-raw.log"
}

recovery() {
  local e_gpus=0,1 t_gpus=2,3
  [ "$ngpu" -ge 4 ] || t_gpus=0,1
  rm -rf "$work/elastic" "$work/tr60"
  if ! [ -f "$work/trdefault/started" ]; then
    rm -rf "$work/trdefault"; mkdir -p "$work/trdefault"; touch "$work/trdefault/started"
    setsid nohup python3 "$py" torchrun --work "$work/trdefault" --gpus 1,0 --timeout 0 \
      --incidents worker_crash,node_loss --limit 900 >"$work/trdefault.log" 2>&1 < /dev/null &
  fi
  python3 "$py" torchrun --work "$work/tr60" --gpus "$t_gpus" --timeout 60 --limit 300 \
    --store-limit 150 >"$work/tr60.log" 2>&1 &
  local tr=$!
  python3 "$py" elastic --work "$work/elastic" --gpus "$e_gpus" --elasticd "$bin/elasticd" \
    --elasticctl "$bin/elasticctl" --trainer "$trainer" --config "$root/conf/elasticd.toml" \
    2>&1 | tee "$work/elastic.log"
  echo "-- elastic done; waiting for torchrun (60 s timeout)"
  wait "$tr"
  cat "$work/tr60.log"
  cp "$work/elastic/result.json" "$out/elastic-result.json"
  cp "$work/tr60/result.json" "$out/torchrun60-result.json"
  pack
  python3 "$py" summary "$work/elastic/result.json" "$work/tr60/result.json" | tee "$out/recovery.md"
}

profile() {  # Kineto traces of 3 steps after a 10-step warm-up: trainer (old and new compute
             # path) and DDP on 1 GPU; trainer (overlap on/off) and DDP on all GPUs. Summaries in
             # $out/profile.md, rank 0's traces gzipped under $out/traces.
  local p=$work/profile
  rm -rf "$p"; mkdir -p "$p" "$out/traces"
  local common=(--model gpt --dtype bf16 --device cuda --batch-size 8 --max-steps 13
                --warmup-steps 10 --no-eval --log-interval 1000 --profile-steps 3)
  local ddp=("$root/bench/gpu/gpt_ddp.py" --mode throughput --batch-size 8 --warmup 10
             --profile-steps 3)
  local n=$ngpu
  [ "$n" -gt 4 ] && n=4
  "$trainer" --standalone 1 "${common[@]}" --no-fused-adam --sync-every-step --profile "$p/trainer1-old" >/dev/null 2>>"$p/err.log"
  "$trainer" --standalone 1 "${common[@]}" --profile "$p/trainer1" >/dev/null 2>>"$p/err.log"
  torchrun --standalone --nproc-per-node 1 "${ddp[@]}" --profile "$p/ddp1" >/dev/null 2>>"$p/err.log"
  if [ "$n" -ge 2 ]; then
    "$trainer" --standalone "$n" "${common[@]}" --profile "$p/trainer$n" >/dev/null 2>>"$p/err.log"
    "$trainer" --standalone "$n" "${common[@]}" --no-overlap --profile "$p/trainer$n-no-overlap" >/dev/null 2>>"$p/err.log"
    torchrun --standalone --nproc-per-node "$n" "${ddp[@]}" --profile "$p/ddp$n" >/dev/null 2>>"$p/err.log"
  fi
  grep -iv 'warning\|^\s*$\|W1126\|\*\*\*\*' "$p/err.log" | tail -15
  : >"$out/profile.md"
  for t in "$p"/*.rank0.json; do
    local label; label=$(basename "$t" .rank0.json)
    python3 "$root/bench/gpu/trace_summary.py" "$t" --steps 3 --label "$label" | tee -a "$out/profile.md"
    gzip -c "$t" >"$out/traces/$label.rank0.json.gz"
  done
}

recovery_elastic() {  # the elastic half of `recovery` alone (GPUs 0,1), nothing else running;
                      # ELASTIC_CONF: the daemons' config (default conf/elasticd.toml); REPEAT:
                      # the incident list this many times; TRAINER_EXTRA: more trainer flags
                      # (--no-live: the stop-and-restart path); INCIDENTS: the incident list
                      # (default worker_crash,node_loss,store_node_loss; also leader_node_loss,
                      # hang)
  rm -rf "$work/elastic"
  python3 "$py" elastic --work "$work/elastic" --gpus 0,1 --elasticd "$bin/elasticd" \
    --incidents "${INCIDENTS:-worker_crash,node_loss,store_node_loss}" \
    --elasticctl "$bin/elasticctl" --trainer "$trainer" --config "${ELASTIC_CONF:-$root/conf/elasticd.toml}" \
    --repeat "${REPEAT:-1}" ${TRAINER_EXTRA:+"--trainer-extra=$TRAINER_EXTRA"} \
    2>&1 | tee "$work/elastic.log" | tail -40
  cp "$work/elastic/result.json" "$out/elastic-result.json"
  pack
  python3 "$py" summary "$work/elastic/result.json" | tee "$out/recovery-elastic.md"
}

torchrun_only() {  # the torchrun half of `recovery` again (GPUs 2,3; the default timeout on 0,1)
  rm -rf "$work/tr60" "$work/trdefault"; mkdir -p "$work/trdefault"; touch "$work/trdefault/started"
  setsid nohup python3 "$py" torchrun --work "$work/trdefault" --gpus 0,1 --timeout 0 \
    --incidents worker_crash,node_loss --limit 900 >"$work/trdefault.log" 2>&1 < /dev/null &
  python3 "$py" torchrun --work "$work/tr60" --gpus 2,3 --timeout 60 --limit 300 \
    --store-limit 120 2>&1 | tee "$work/tr60.log"
  cp "$work/tr60/result.json" "$out/torchrun60-result.json"
  cat "$work/trdefault.log"
  pack
  python3 "$py" summary "$work/tr60/result.json" | tee "$out/recovery-torchrun60.md"
}

# One elastic run of gpt_ddp.py: py_elastic WORKDIR GPUS PORT_BASE [more recovery_vs_torchrun.py
# flags]; each run gets its own 100 store ports from PORT_BASE (runs side by side never share).
py_elastic() {
  local dir=$1 gpus=$2 port=$3
  shift 3
  rm -rf "$work/$dir"
  python3 "$py" elastic --work "$work/$dir" --gpus "$gpus" --elasticd "$bin/elasticd" \
    --elasticctl "$bin/elasticctl" --config "$root/conf/elasticd.toml" --worker python \
    --limit 60 --incidents "${INCIDENTS:-worker_crash,node_loss,store_node_loss}" \
    --daemon-set rendezvous.store_port_min="$port" \
    --daemon-set rendezvous.store_port_max="$((port + 99))" "$@" >"$work/$dir.log" 2>&1
}

# Issue 16: the torchrun-style DDP script (gpt_ddp.py) under elastic, unchanged, RUNS (3)
# separate runs of each (a fresh job each: a node whose workers failed twice is quarantined for
# the job), two runs side by side on GPUs 0,1 and 2,3:
#   recovery_python        started cold vs warm
#   recovery_python_ready  warm with the default lease vs rendezvous.lease_duration=1500ms, the
#                          standbys ready before each incident (SETTLE s after each recovery)
#   recovery_python_lease  warm with the 1.5 s lease, incidents back to back, beside torchrun
#                          (60 s timeout, the same script, RUNS worker crashes)
#   recovery_python_warm2  (a 2-GPU host) warm, default config, standbys ready, GPUs 0,1 only
recovery_python() {
  local files=()
  for i in $(seq "${RUNS:-3}"); do
    py_elastic "pycold$i" 0,1 29500 &
    local cold=$!
    py_elastic "pywarm$i" 2,3 29600 --warm
    wait "$cold"
    tail -n 12 "$work/pycold$i.log" "$work/pywarm$i.log"
    cp "$work/pycold$i/result.json" "$out/py-cold-$i.json"
    cp "$work/pywarm$i/result.json" "$out/py-warm-$i.json"
    files+=("$work/pycold$i/result.json" "$work/pywarm$i/result.json")
  done
  python3 "$py" summary "${files[@]}" | tee "$out/recovery-python.md"
}

recovery_python_ready() {
  local files=()
  for i in $(seq "${RUNS:-3}"); do
    py_elastic "pyready$i" 0,1 29500 --warm --settle-extra "${SETTLE:-15}" &
    local a=$!
    py_elastic "pyreadyfast$i" 2,3 29600 --warm --settle-extra "${SETTLE:-15}" \
      --daemon-set rendezvous.lease_duration=1500ms
    wait "$a"
    files+=("$work/pyready$i/result.json" "$work/pyreadyfast$i/result.json")
  done
  python3 "$py" summary "${files[@]}" | tee "$out/recovery-python-ready.md"
  grep -h "elastic warm\] ready" "$work"/pyready1/h*/state/logs/*/standby-slot-*.log \
    "$work"/pyready1/h*/state/logs/*/*/standby-slot-*.log 2>/dev/null | head -4
  tar -C "$work" -czf "$out/ready-results.tgz" $(cd "$work" && ls pyready*/result.json)
}

# On a 2-GPU host: RUNS warm runs of the script on GPUs 0,1 with the default config (the
# standbys ready SETTLE s after each recovery), INCIDENTS (default worker_crash,node_loss);
# DAEMON_SET: one more daemon setting (e.g. rendezvous.lease_duration=1500ms).
recovery_python_warm2() {
  local files=()
  for i in $(seq "${RUNS:-3}"); do
    INCIDENTS=${INCIDENTS:-worker_crash,node_loss} py_elastic "pywarm2-$i" 0,1 29500 --warm \
      --settle-extra "${SETTLE:-15}" ${DAEMON_SET:+--daemon-set "$DAEMON_SET"}
    tail -n 4 "$work/pywarm2-$i.log"
    cp "$work/pywarm2-$i/result.json" "$out/py-warm2-$i.json"
    files+=("$work/pywarm2-$i/result.json")
  done
  python3 "$py" summary "${files[@]}" | tee "$out/recovery-python-warm2.md"
  grep -h "elastic warm\] ready" "$work"/pywarm2-1/h*/state/logs/*/standby-slot-*.log \
    "$work"/pywarm2-1/h*/state/logs/*/*/standby-slot-*.log 2>/dev/null | head -4 || true
  # The daemons' logs and every worker and standby log (what each daemon and standby did when).
  (cd "$work" && tar -czf "$out/python-warm2-logs.tgz" --exclude='*.pt' --exclude='*.tmp' \
    pywarm2-*/h*/elasticd.log pywarm2-*/h*/state/logs 2>/dev/null) || true
}

recovery_python_lease() {
  local files=()
  rm -rf "$work/trpy"
  python3 "$py" torchrun --work "$work/trpy" --gpus 2,3 --timeout 60 --limit 120 \
    --incidents worker_crash --repeat "${RUNS:-3}" >"$work/trpy.log" 2>&1 &
  local tr=$!
  for i in $(seq "${RUNS:-3}"); do
    py_elastic "pyfast$i" 0,1 29500 --warm --daemon-set rendezvous.lease_duration=1500ms
    tail -n 12 "$work/pyfast$i.log"
    cp "$work/pyfast$i/result.json" "$out/py-warm-lease-$i.json"
    files+=("$work/pyfast$i/result.json")
  done
  wait "$tr"
  tail -n 12 "$work/trpy.log"
  cp "$work/trpy/result.json" "$out/torchrun-py-result.json"
  python3 "$py" summary "${files[@]}" "$work/trpy/result.json" | tee "$out/recovery-python-lease.md"
}

pack() {  # short logs: daemon logs' interesting lines, agent logs' tails, our logs
  local p=$work/pack
  rm -rf "$p"; mkdir -p "$p"
  for f in "$work"/elastic/h*/elasticd.log; do
    [ -f "$f" ] || continue
    h=$(basename "$(dirname "$f")")
    grep -E 'round|lost|stopping|started|exit|drain|leader|error|warn' "$f" | tail -80 >"$p/elasticd-$h.log"
  done
  # The trainers' re-formation lines (phases of each live re-formation) and hang reports.
  grep -H -E '"event":"(reform|reformed_step|stall)"|is hung' \
    "$work"/elastic/h*/state/logs/*/round-*/rank-*.log 2>/dev/null | tail -400 >"$p/reform-lines.log"
  for f in "$work"/tr60/agent-*.log "$work"/trdefault/agent-*.log; do
    [ -f "$f" ] || continue
    grep -v '^{' "$f" | tail -60 >"$p/$(basename "$(dirname "$f")")-$(basename "$f")"
  done
  cp "$work"/*.log "$p/" 2>/dev/null
  tar -C "$p" -czf "$out/logs.tgz" .
}

collect() {
  if ! [ -f "$work/trdefault/started" ]; then
    echo "collect: no torchrun default-timeout run on this machine (a fresh machine: it was lost)"
  fi
  local deadline=$(( $(date +%s) + ${COLLECT_WAIT:-570} ))
  while [ -f "$work/trdefault/started" ] && ! [ -f "$work/trdefault/result.json" ] &&
        [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
  cat "$work/trdefault.log"
  [ -f "$work/trdefault/result.json" ] && cp "$work/trdefault/result.json" "$out/torchrun-default-result.json"
  pack
  python3 "$py" summary "$work/elastic/result.json" "$work/tr60/result.json" \
    "$work/trdefault/result.json" | tee "$out/recovery-all.md"
  echo "-- GPU compute apps left:"; nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
}

for phase in "$@"; do
  echo "==== $phase ($(date -u +%H:%M:%S))"
  "$phase" || { echo "phase $phase failed"; exit 1; }
done

