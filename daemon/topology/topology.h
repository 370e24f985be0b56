// Topology: this host's cores, NUMA nodes and GPUs (found with hwloc), and the binding plan that
// gives every worker slot a disjoint set of cores near its GPU and the memory node next to them.
//
// The flow is load -> plan -> apply. load_this_host() (or load_xml() in tests) turns hwloc's view
// into a plain Machine; make_plan() is pure and turns a Machine plus node.gpus / node.cpu_slots /
// spawner.bind_* into one Slot per worker; the spawner applies a Slot with sched_setaffinity and
// set_mempolicy, so every list here holds plain OS indices (the numbers Linux uses, the "P#" of
// lstopo), never hwloc logical indices. <hwloc.h> is included only by topology.cc.
//
// GPU discovery ("auto"): every PCI device with vendor 0x10de (NVIDIA) and class 0x0300 (VGA) or
// 0x0302 (3D controller), sorted by PCI bus id; CUDA index i is the i-th of them. That is the order
// CUDA itself uses only with CUDA_DEVICE_ORDER=PCI_BUS_ID (its default puts the fastest card
// first), so the daemon sets CUDA_DEVICE_ORDER=PCI_BUS_ID for every worker it starts.
// A GPU's locality is its first non-IO ancestor in hwloc (usually its package, or the machine on
// hosts that do not report PCI locality): its cpuset and its NUMA nodes.
//
// Slot rules (make_plan):
//  - GPU slots: GPUs are grouped by locality; each locality's physical cores are split evenly
//    among the SELECTED GPUs there (contiguous blocks in topology order, the remainder to the
//    lower CUDA indices). A slot gets every PU (hyperthread) of its cores; omp_threads = its core
//    count. Localities nested in others are served first, so slots never overlap. A GPU left
//    without a core borrows a free core from elsewhere, else one from the slot with the most
//    cores; only when the host has fewer cores than slots do slots share cores, and then
//    Plan::shared_cpus is true (the plan still succeeds). mem_nodes = the GPU's NUMA nodes that
//    hold the slot's cores (its local nodes if none do; the cores' nodes if its locality is
//    unknown).
//  - node.gpus as an explicit list selects those CUDA indices; an index at or beyond the number
//    of GPUs found is an Error naming node.gpus and the count. When hwloc found no NVIDIA GPU at
//    all (containers often hide /sys/bus/pci) the list is trusted: one slot per listed index with
//    locality "unknown", the host's cores divided evenly in list order.
//  - CPU slots (node.gpus = [] or "auto" finding none): node.cpu_slots of them, 0 = one per NUMA
//    node with cores; slot i goes to NUMA node i mod N (round robin), each node's cores are split
//    among its slots as above; mem_nodes = that NUMA node. With fewer slots than NUMA nodes the
//    nodes without a slot stay unused (a slot never spans NUMA nodes).
//  - bind_cpus false leaves Slot::cpus empty, bind_memory false leaves Slot::mem_nodes empty;
//    omp_threads is computed either way.
//
// to_json(Plan) is the body of the control verb `topology` and of `elasticctl nodes --topology
// --json`; its keys are stable (add, never rename):
//   {"source": "this host" | "<xml path>", "pus": N, "cores": N, "numa_nodes": N, "packages": N,
//    "gpus": [{"index": 0, "pci_bus_id": "0000:18:00.0", "numa_node": 0 | null,
//              "package": 0 | null}],
//    "slots": [{"index": 0, "gpu": 0 | null (CPU slot), "pci_bus_id": "0000:18:00.0" | null,
//               "cpus": "0-3,32-35" (cpu_list_string; "" = not bound),
//               "mem_nodes": "0" ("" = not bound), "omp_threads": 4,
//               "locality": "package 0, NUMA 0"}],
//    "bind_cpus": true, "bind_memory": true, "shared_cpus": false,
//    "notes": ["GPU 2 borrowed core(s) 2 from outside its locality.", ...]}
//
// Errors: loading returns an Error sentence naming the file (or "this host") when hwloc fails;
// make_plan returns an Error only for a node.gpus index that does not exist. Nothing throws.
// Ownership: plain values. Thread safety: every function is reentrant (each load uses its own
// hwloc topology); call them from any thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/core/result.h"

namespace elastic::topology {

// One physical core: the PUs (hyperthreads) it holds, by OS index.
struct Core {
  int package = -1;    // OS index of its package, -1 unknown
  int numa_node = -1;  // OS index of the NUMA node holding it, -1 unknown
  std::vector<unsigned> pus;
  bool operator==(const Core&) const = default;
};

struct NumaNode {
  unsigned os_index = 0;
  int package = -1;           // -1 when unknown or when it spans packages
  std::vector<unsigned> pus;  // empty for memory-only nodes (HBM, CXL); those get no slots
  bool operator==(const NumaNode&) const = default;
};

struct Gpu {
  unsigned index = 0;      // CUDA index under CUDA_DEVICE_ORDER=PCI_BUS_ID
  std::string pci_bus_id;  // "0000:18:00.0"; "" when unknown
  int numa_node = -1;  // OS index when its locality has exactly one NUMA node with cores, else -1
  int package = -1;    // OS index when its locality lies in one package, else -1
  std::vector<unsigned> local_cpus;       // PUs of its locality; empty = unknown
  std::vector<unsigned> local_mem_nodes;  // NUMA nodes of its locality; empty = unknown
  bool operator==(const Gpu&) const = default;
};

// The host as the planner sees it. Cores are in topology order (hwloc's logical order), which
// keeps cores that share caches next to each other.
struct Machine {
  std::string source;  // "this host", or the XML file it came from
  unsigned packages = 0;
  std::vector<Core> cores;
  std::vector<NumaNode> numa_nodes;
  std::vector<Gpu> gpus;  // sorted by PCI bus id, index = position
  unsigned pu_count() const;
  bool operator==(const Machine&) const = default;
};

struct Slot {
  unsigned index = 0;
  std::optional<unsigned> gpu;  // CUDA index; nullopt for a CPU slot
  std::string pci_bus_id;       // "" for a CPU slot or an unknown bus id
  std::vector<unsigned> cpus;   // OS PU indices, sorted, disjoint across slots unless shared_cpus
  std::vector<unsigned> mem_nodes;  // OS NUMA indices, sorted
  unsigned omp_threads = 1;         // physical cores behind `cpus` (>= 1)
  std::string locality;             // "package 0, NUMA 1", "unknown"
  bool operator==(const Slot&) const = default;
};

struct Plan {
  Machine machine;
  std::vector<Slot> slots;
  bool bind_cpus = true;
  bool bind_memory = true;
  bool shared_cpus = false;        // some slots share cores (fewer cores than slots)
  std::vector<std::string> notes;  // one sentence per compromise (borrowed or shared cores)
};

struct PlanOptions {
  config::GpuSelection gpus;  // node.gpus: detect ("auto"), a list of CUDA indices, or []
  unsigned cpu_slots = 0;     // node.cpu_slots: 0 = one per NUMA node
  bool bind_cpus = true;      // spawner.bind_cpus
  bool bind_memory = true;    // spawner.bind_memory
};

// The options a daemon plans with: node.gpus, node.cpu_slots, spawner.bind_cpus/bind_memory.
PlanOptions plan_options(const config::DaemonConfig& config);

// hwloc's view of this host, PCI devices included; PUs outside the allowed set (cgroup cpusets,
// a Slurm allocation) are left out. HWLOC_XMLFILE in the environment makes hwloc read that file
// instead, which `source` then says (handy to try a plan; the spawner cannot bind to CPUs the
// real host lacks). Loads take milliseconds and walk sysfs: load once at startup and keep it.
Result<Machine> load_this_host();
// A topology saved with `lstopo --of xml` (or written by hand for tests). The Error names `path`.
Result<Machine> load_xml(const std::string& path);

Result<Plan> make_plan(const Machine& machine, const PlanOptions& options);

// See the header comment for the keys. Compact, one line.
std::string to_json(const Plan& plan);
// For humans: a summary line, then one line per slot (slot, GPU, bus id, cpus, mem, omp, locality).
std::string to_table(const Plan& plan);
// Sorted indices as a Linux cpu list: {0,1,2,3,8} -> "0-3,8"; {} -> "".
std::string cpu_list_string(const std::vector<unsigned>& indices);

}  // namespace elastic::topology
