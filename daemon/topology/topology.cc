// hwloc -> Machine, and the pure planner Machine -> Plan. The only file that includes <hwloc.h>.
#include "daemon/topology/topology.h"

#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

namespace elastic::topology {
namespace {

constexpr unsigned kNvidiaVendor = 0x10de;
constexpr unsigned kClassVga = 0x0300;
constexpr unsigned kClass3d = 0x0302;

// ---------------------------------------------------------------------------------------------
// hwloc -> Machine

class TopologyGuard {
 public:
  explicit TopologyGuard(hwloc_topology_t topology) : topology_(topology) {}
  ~TopologyGuard() { hwloc_topology_destroy(topology_); }
  TopologyGuard(const TopologyGuard&) = delete;
  TopologyGuard& operator=(const TopologyGuard&) = delete;

 private:
  hwloc_topology_t topology_;
};

std::vector<unsigned> bitmap_indices(hwloc_const_bitmap_t bitmap) {
  std::vector<unsigned> out;
  if (bitmap == nullptr || hwloc_bitmap_iszero(bitmap)) return out;
  // An infinite bitmap (hwloc's "all") would never end; no object we read has one.
  if (hwloc_bitmap_weight(bitmap) < 0) return out;
  for (int i = hwloc_bitmap_first(bitmap); i >= 0; i = hwloc_bitmap_next(bitmap, i)) {
    out.push_back(static_cast<unsigned>(i));
  }
  return out;
}

// OS index where known; hwloc reports HWLOC_UNKNOWN_INDEX for packages on some VMs, and then the
// logical index is the best name we have.
int os_index_of(hwloc_obj_t obj) {
  if (obj == nullptr) return -1;
  if (obj->os_index != HWLOC_UNKNOWN_INDEX) return static_cast<int>(obj->os_index);
  return static_cast<int>(obj->logical_index);
}

// The package that holds `obj` (itself, an ancestor, or the only package overlapping its cpuset
// when `obj` is the machine of a one-package host); -1 when it spans several.
int package_of(hwloc_topology_t topology, hwloc_obj_t obj) {
  if (obj == nullptr) return -1;
  if (obj->type == HWLOC_OBJ_PACKAGE) return os_index_of(obj);
  if (hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topology, HWLOC_OBJ_PACKAGE, obj)) {
    return os_index_of(pkg);
  }
  if (obj->cpuset == nullptr) return -1;
  int found = -1;
  int count = 0;
  for (hwloc_obj_t pkg = hwloc_get_next_obj_by_type(topology, HWLOC_OBJ_PACKAGE, nullptr);
       pkg != nullptr; pkg = hwloc_get_next_obj_by_type(topology, HWLOC_OBJ_PACKAGE, pkg)) {
    if (hwloc_bitmap_intersects(pkg->cpuset, obj->cpuset)) {
      found = os_index_of(pkg);
      ++count;
    }
  }
  return count == 1 ? found : -1;
}

// The NUMA node with PUs whose cpuset holds `cpuset`, the smallest one if several do (a
// memory-only node such as HBM may share a cpuset; the DDR node comes first in hwloc's order).
int numa_of(hwloc_topology_t topology, hwloc_const_cpuset_t cpuset) {
  int best = -1;
  int best_weight = 0;
  for (hwloc_obj_t node = hwloc_get_next_obj_by_type(topology, HWLOC_OBJ_NUMANODE, nullptr);
       node != nullptr; node = hwloc_get_next_obj_by_type(topology, HWLOC_OBJ_NUMANODE, node)) {
    if (node->cpuset == nullptr || hwloc_bitmap_iszero(node->cpuset)) continue;
    if (!hwloc_bitmap_isincluded(cpuset, node->cpuset)) continue;
    const int weight = hwloc_bitmap_weight(node->cpuset);
    if (best < 0 || weight < best_weight) {
      best = os_index_of(node);
      best_weight = weight;
    }
  }
  return best;
}

std::string bus_id_string(const hwloc_obj_t dev) {
  char text[32];
  std::snprintf(text, sizeof text, "%04x:%02x:%02x.%01x", dev->attr->pcidev.domain,
                dev->attr->pcidev.bus, dev->attr->pcidev.dev, dev->attr->pcidev.func);
  return text;
}

Machine extract(hwloc_topology_t topology, std::string source) {
  Machine machine;
  machine.source = std::move(source);
  machine.packages =
      static_cast<unsigned>(std::max(0, hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PACKAGE)));

  for (hwloc_obj_t node = hwloc_get_next_obj_by_type(topology, HWLOC_OBJ_NUMANODE, nullptr);
       node != nullptr; node = hwloc_get_next_obj_by_type(topology, HWLOC_OBJ_NUMANODE, node)) {
    NumaNode numa;
    numa.os_index = static_cast<unsigned>(os_index_of(node));
    numa.pus = bitmap_indices(node->cpuset);
    numa.package = numa.pus.empty() ? -1 : package_of(topology, node);
    machine.numa_nodes.push_back(std::move(numa));
  }

  // Hosts whose firmware reports no cores (some VMs, some ARM boards) get one core per PU.
  const hwloc_obj_type_t core_type =
      hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  for (hwloc_obj_t obj = hwloc_get_next_obj_by_type(topology, core_type, nullptr); obj != nullptr;
       obj = hwloc_get_next_obj_by_type(topology, core_type, obj)) {
    Core core;
    core.pus = bitmap_indices(obj->cpuset);
    if (core.pus.empty()) continue;  // every PU of it is outside the allowed set
    core.package = package_of(topology, obj);
    core.numa_node = numa_of(topology, obj->cpuset);
    machine.cores.push_back(std::move(core));
  }

  std::vector<std::pair<std::tuple<unsigned, unsigned, unsigned, unsigned>, Gpu>> found;
  for (hwloc_obj_t dev = hwloc_get_next_pcidev(topology, nullptr); dev != nullptr;
       dev = hwloc_get_next_pcidev(topology, dev)) {
    const auto& pci = dev->attr->pcidev;
    if (pci.vendor_id != kNvidiaVendor) continue;
    if (pci.class_id != kClassVga && pci.class_id != kClass3d) continue;
    Gpu gpu;
    gpu.pci_bus_id = bus_id_string(dev);
    hwloc_obj_t near = hwloc_get_non_io_ancestor_obj(topology, dev);
    if (near != nullptr) {
      gpu.local_cpus = bitmap_indices(near->cpuset);
      gpu.local_mem_nodes = bitmap_indices(near->nodeset);
      gpu.package = package_of(topology, near);
      // numa_node names the one node with cores in the locality (memory-only nodes don't count).
      int with_cpus = 0;
      for (const NumaNode& numa : machine.numa_nodes) {
        if (numa.pus.empty()) continue;
        if (std::find(gpu.local_mem_nodes.begin(), gpu.local_mem_nodes.end(), numa.os_index) ==
            gpu.local_mem_nodes.end()) {
          continue;
        }
        gpu.numa_node = static_cast<int>(numa.os_index);
        ++with_cpus;
      }
      if (with_cpus != 1) gpu.numa_node = -1;
    }
    found.emplace_back(std::make_tuple(pci.domain, pci.bus, pci.dev, pci.func), std::move(gpu));
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [key, gpu] : found) {
    gpu.index = static_cast<unsigned>(machine.gpus.size());
    machine.gpus.push_back(std::move(gpu));
  }
  return machine;
}

Result<Machine> load(const std::string* xml_path, std::string source) {
  const std::string where = xml_path ? "the hwloc XML file " + *xml_path : "this host";
  hwloc_topology_t topology = nullptr;
  if (hwloc_topology_init(&topology) != 0) {
    return Error{"Cannot initialise hwloc to read the topology of " + where + ": " +
                 std::strerror(errno) + "."};
  }
  TopologyGuard guard(topology);
  // GPUs are PCI devices, which hwloc drops unless asked; "important" keeps display, network,
  // storage and accelerator devices and the bridges above them, not every PCI function.
  hwloc_topology_set_io_types_filter(topology, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  // Linux's own sysfs walk finds PCI devices and their locality. The libpciaccess component
  // ("pci") leaks about 1 KiB per load, and the GPU-runtime components would open the CUDA,
  // NVML, OpenCL or GL drivers inside the daemon just to name devices we already know from PCI.
  // A name that is not installed is ignored, so the return value does not matter.
  for (const char* component : {"pci", "cuda", "nvml", "opencl", "rsmi", "levelzero", "gl"}) {
    (void)hwloc_topology_set_components(topology, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                        component);
  }
  if (xml_path != nullptr) {
    if (hwloc_topology_set_xml(topology, xml_path->c_str()) != 0) {
      return Error{"Cannot read " + where + ": " + std::strerror(errno) + "."};
    }
  }
  if (hwloc_topology_load(topology) != 0) {
    // hwloc says EINVAL for XML that is not a topology; the hint is what the operator needs.
    return Error{
        "Cannot load the topology of " + where + ": " + std::strerror(errno) +
        (xml_path != nullptr ? " (is it a topology saved with `lstopo --of xml`?)." : ".")};
  }
  Machine machine = extract(topology, std::move(source));
  if (machine.cores.empty()) {
    return Error{"The topology of " + where + " has no usable core (no allowed PU)."};
  }
  return machine;
}

// ---------------------------------------------------------------------------------------------
// Machine -> Plan

// One slot being planned: which cores of machine.cores it got.
struct Draft {
  std::optional<unsigned> gpu;
  std::string pci_bus_id;
  std::vector<std::size_t> cores;        // positions in machine.cores, topology order
  std::vector<unsigned> preferred_mems;  // GPU locality nodes; empty = use the cores' nodes
  std::string locality;
};

// Slots that want the same cores: `candidates` are positions in machine.cores.
struct Group {
  std::vector<std::size_t> candidates;
  std::vector<std::size_t> drafts;  // positions in the draft list, in slot order
};

// "the core of CPUs 2,34": operators know OS CPU numbers, not our positions.
std::string core_name(const Machine& machine, std::size_t core) {
  return "the core of CPUs " + cpu_list_string(machine.cores[core].pus);
}

// Splits each group's free cores evenly among its slots (contiguous blocks, remainder first),
// narrowest group first so a locality nested in another keeps its own cores. Then gives every
// slot left empty a core: a free one, else one from the richest slot, else a shared one.
void assign(const Machine& machine, std::vector<Group> groups, std::vector<Draft>& drafts,
            Plan& plan) {
  std::vector<bool> used(machine.cores.size(), false);
  std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
    if (a.candidates.size() != b.candidates.size()) {
      return a.candidates.size() < b.candidates.size();
    }
    const std::size_t first_a = a.candidates.empty() ? 0 : a.candidates.front();
    const std::size_t first_b = b.candidates.empty() ? 0 : b.candidates.front();
    return first_a < first_b;
  });
  for (const Group& group : groups) {
    std::vector<std::size_t> free_cores;
    for (std::size_t c : group.candidates) {
      if (!used[c]) free_cores.push_back(c);
    }
    const std::size_t slots = group.drafts.size();
    const std::size_t base = free_cores.size() / slots;
    const std::size_t extra = free_cores.size() % slots;
    std::size_t next = 0;
    for (std::size_t j = 0; j < slots; ++j) {
      const std::size_t take = base + (j < extra ? 1 : 0);
      for (std::size_t k = 0; k < take; ++k) {
        drafts[group.drafts[j]].cores.push_back(free_cores[next]);
        used[free_cores[next]] = true;
        ++next;
      }
    }
  }

  const auto who = [](const Draft& d, std::size_t slot) {
    return d.gpu ? "GPU " + std::to_string(*d.gpu) : "CPU slot " + std::to_string(slot);
  };
  for (std::size_t i = 0; i < drafts.size(); ++i) {
    Draft& draft = drafts[i];
    if (!draft.cores.empty()) continue;
    auto free_core = std::find(used.begin(), used.end(), false);
    if (free_core != used.end()) {
      const auto c = static_cast<std::size_t>(free_core - used.begin());
      used[c] = true;
      draft.cores.push_back(c);
      plan.notes.push_back(who(draft, i) + " has no free core near it and borrowed " +
                           core_name(machine, c) + " from outside its locality.");
      continue;
    }
    std::size_t richest = drafts.size();
    for (std::size_t j = 0; j < drafts.size(); ++j) {
      if (drafts[j].cores.size() > 1 &&
          (richest == drafts.size() || drafts[j].cores.size() > drafts[richest].cores.size())) {
        richest = j;
      }
    }
    if (richest != drafts.size()) {
      const std::size_t c = drafts[richest].cores.back();
      drafts[richest].cores.pop_back();
      draft.cores.push_back(c);
      plan.notes.push_back(who(draft, i) + " has no free core near it and took " +
                           core_name(machine, c) + " from " + who(drafts[richest], richest) + ".");
      continue;
    }
    // Fewer cores than slots: sharing is better than refusing to run.
    const std::size_t c = i % machine.cores.size();
    draft.cores.push_back(c);
    plan.shared_cpus = true;
    plan.notes.push_back(who(draft, i) + " shares " + core_name(machine, c) + ": this host has " +
                         std::to_string(machine.cores.size()) + " core(s) for " +
                         std::to_string(drafts.size()) + " slots.");
  }
}

std::string locality_string(int package, const std::vector<unsigned>& numa_nodes) {
  std::string out = package >= 0 ? "package " + std::to_string(package) : "";
  if (!numa_nodes.empty()) {
    out += (out.empty() ? "" : ", ") + std::string("NUMA ") + cpu_list_string(numa_nodes);
  }
  return out.empty() ? "unknown" : out;
}

std::vector<std::size_t> cores_within(const Machine& machine, const std::vector<unsigned>& cpus) {
  std::vector<std::size_t> out;
  const std::set<unsigned> allowed(cpus.begin(), cpus.end());
  for (std::size_t c = 0; c < machine.cores.size(); ++c) {
    const auto& pus = machine.cores[c].pus;
    if (std::all_of(pus.begin(), pus.end(), [&](unsigned pu) { return allowed.count(pu) > 0; })) {
      out.push_back(c);
    }
  }
  return out;
}

std::vector<std::size_t> all_cores(const Machine& machine) {
  std::vector<std::size_t> out(machine.cores.size());
  for (std::size_t c = 0; c < out.size(); ++c) out[c] = c;
  return out;
}

Result<std::vector<Draft>> gpu_drafts(const Machine& machine, const PlanOptions& options,
                                      std::vector<Group>& groups) {
  std::vector<Draft> drafts;
  std::map<std::vector<unsigned>, std::size_t> group_of_locality;
  const auto add = [&](Draft draft, const std::vector<unsigned>& local_cpus) {
    auto [it, inserted] = group_of_locality.emplace(local_cpus, groups.size());
    if (inserted) {
      groups.push_back(
          Group{local_cpus.empty() ? all_cores(machine) : cores_within(machine, local_cpus), {}});
    }
    groups[it->second].drafts.push_back(drafts.size());
    drafts.push_back(std::move(draft));
  };

  if (options.gpus.detect) {
    for (const Gpu& gpu : machine.gpus) {
      add(Draft{gpu.index,
                gpu.pci_bus_id,
                {},
                gpu.local_mem_nodes,
                gpu.local_cpus.empty() ? "unknown"
                                       : locality_string(gpu.package, gpu.local_mem_nodes)},
          gpu.local_cpus);
    }
    return drafts;
  }
  std::set<int> seen;
  for (int index : options.gpus.indices) {
    if (index < 0) {
      return Error{"node.gpus lists GPU index " + std::to_string(index) +
                   ", but CUDA indices start at 0."};
    }
    if (!seen.insert(index).second) {
      return Error{"node.gpus lists GPU " + std::to_string(index) + " twice."};
    }
    const auto cuda = static_cast<unsigned>(index);
    if (machine.gpus.empty()) {
      // hwloc saw no NVIDIA GPU (containers often hide the PCI tree): trust the operator.
      add(Draft{cuda, "", {}, {}, "unknown"}, {});
      continue;
    }
    if (cuda >= machine.gpus.size()) {
      return Error{"node.gpus lists GPU " + std::to_string(index) + ", but " + machine.source +
                   " has " + std::to_string(machine.gpus.size()) +
                   " NVIDIA GPU(s) (CUDA indices 0-" + std::to_string(machine.gpus.size() - 1) +
                   " in PCI bus order)."};
    }
    const Gpu& gpu = machine.gpus[cuda];
    add(Draft{gpu.index,
              gpu.pci_bus_id,
              {},
              gpu.local_mem_nodes,
              gpu.local_cpus.empty() ? "unknown"
                                     : locality_string(gpu.package, gpu.local_mem_nodes)},
        gpu.local_cpus);
  }
  return drafts;
}

std::vector<Draft> cpu_drafts(const Machine& machine, unsigned cpu_slots,
                              std::vector<Group>& groups) {
  // NUMA nodes that hold usable cores, in hwloc order; a host with no NUMA information is one.
  std::vector<int> nodes;
  for (const NumaNode& numa : machine.numa_nodes) {
    const bool has_core =
        std::any_of(machine.cores.begin(), machine.cores.end(),
                    [&](const Core& core) { return core.numa_node == int(numa.os_index); });
    if (has_core) nodes.push_back(static_cast<int>(numa.os_index));
  }
  if (nodes.empty()) nodes.push_back(-1);

  for (int node : nodes) {
    Group group;
    for (std::size_t c = 0; c < machine.cores.size(); ++c) {
      if (node < 0 || machine.cores[c].numa_node == node) group.candidates.push_back(c);
    }
    groups.push_back(std::move(group));
  }
  const std::size_t count = cpu_slots > 0 ? cpu_slots : nodes.size();
  std::vector<Draft> drafts;
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t g = i % nodes.size();
    const int node = nodes[g];
    Draft draft;
    if (node >= 0) {
      draft.preferred_mems = {static_cast<unsigned>(node)};
      int package = -1;
      for (const NumaNode& numa : machine.numa_nodes) {
        if (int(numa.os_index) == node) package = numa.package;
      }
      draft.locality = locality_string(package, draft.preferred_mems);
    } else {
      draft.locality = "unknown";
    }
    groups[g].drafts.push_back(drafts.size());
    drafts.push_back(std::move(draft));
  }
  // A NUMA node that got no slot (cpu_slots below the node count) keeps its cores unused.
  std::erase_if(groups, [](const Group& group) { return group.drafts.empty(); });
  return drafts;
}

}  // namespace

unsigned Machine::pu_count() const {
  std::size_t pus = 0;
  for (const Core& core : cores) pus += core.pus.size();
  return static_cast<unsigned>(pus);
}

PlanOptions plan_options(const config::DaemonConfig& config) {
  PlanOptions options;
  options.gpus = config.node.gpus;
  options.cpu_slots = static_cast<unsigned>(std::max(0, config.node.cpu_slots));
  options.bind_cpus = config.spawner.bind_cpus;
  options.bind_memory = config.spawner.bind_memory;
  return options;
}

Result<Machine> load_this_host() {
  std::string source = "this host";
  if (const char* xml = std::getenv("HWLOC_XMLFILE"); xml != nullptr && *xml != '\0') {
    source += " (HWLOC_XMLFILE=" + std::string(xml) + ")";
  }
  return load(nullptr, std::move(source));
}

Result<Machine> load_xml(const std::string& path) { return load(&path, path); }

Result<Plan> make_plan(const Machine& machine, const PlanOptions& options) {
  Plan plan;
  plan.machine = machine;
  plan.bind_cpus = options.bind_cpus;
  plan.bind_memory = options.bind_memory;
  if (machine.cores.empty()) {
    return Error{"Cannot plan worker slots: " + machine.source + " has no usable core."};
  }

  std::vector<Group> groups;
  std::vector<Draft> drafts;
  const bool want_gpus =
      options.gpus.detect ? !machine.gpus.empty() : !options.gpus.indices.empty();
  if (want_gpus) {
    auto gpu = gpu_drafts(machine, options, groups);
    if (!gpu.ok()) return gpu.error();
    drafts = std::move(gpu).value();
    if (machine.gpus.empty()) {
      plan.notes.push_back("hwloc found no NVIDIA GPU on " + machine.source +
                           "; the GPUs listed in node.gpus get slots with unknown locality.");
    }
  } else {
    drafts = cpu_drafts(machine, options.cpu_slots, groups);
  }
  assign(machine, std::move(groups), drafts, plan);

  for (std::size_t i = 0; i < drafts.size(); ++i) {
    Draft& draft = drafts[i];
    std::sort(draft.cores.begin(), draft.cores.end());
    Slot slot;
    slot.index = static_cast<unsigned>(i);
    slot.gpu = draft.gpu;
    slot.pci_bus_id = draft.pci_bus_id;
    slot.locality = draft.locality;
    slot.omp_threads = static_cast<unsigned>(std::max<std::size_t>(1, draft.cores.size()));
    std::set<unsigned> cpus;
    std::set<unsigned> core_nodes;
    for (std::size_t c : draft.cores) {
      const Core& core = machine.cores[c];
      cpus.insert(core.pus.begin(), core.pus.end());
      if (core.numa_node >= 0) core_nodes.insert(static_cast<unsigned>(core.numa_node));
    }
    // Memory goes next to the GPU where the slot's cores are too; a GPU slot that borrowed far
    // cores keeps its GPU's node (pinned buffers feed the GPU), a slot of unknown locality
    // follows its cores.
    std::vector<unsigned> mems;
    for (unsigned node : draft.preferred_mems) {
      if (core_nodes.count(node) > 0) mems.push_back(node);
    }
    if (mems.empty()) mems = draft.preferred_mems;
    if (mems.empty()) mems.assign(core_nodes.begin(), core_nodes.end());
    if (options.bind_cpus) slot.cpus.assign(cpus.begin(), cpus.end());
    if (options.bind_memory) slot.mem_nodes = std::move(mems);
    plan.slots.push_back(std::move(slot));
  }
  return plan;
}

std::string cpu_list_string(const std::vector<unsigned>& indices) {
  std::vector<unsigned> sorted(indices);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string out;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(sorted[i]);
    if (j > i) out += '-' + std::to_string(sorted[j]);
    i = j + 1;
  }
  return out;
}

std::string to_json(const Plan& plan) {
  using Json = nlohmann::ordered_json;
  const auto index_or_null = [](int value) { return value >= 0 ? Json(value) : Json(nullptr); };
  Json out;
  out["source"] = plan.machine.source;
  out["pus"] = plan.machine.pu_count();
  out["cores"] = plan.machine.cores.size();
  out["numa_nodes"] = plan.machine.numa_nodes.size();
  out["packages"] = plan.machine.packages;
  out["gpus"] = Json::array();
  for (const Gpu& gpu : plan.machine.gpus) {
    out["gpus"].push_back(Json{{"index", gpu.index},
                               {"pci_bus_id", gpu.pci_bus_id},
                               {"numa_node", index_or_null(gpu.numa_node)},
                               {"package", index_or_null(gpu.package)}});
  }
  out["slots"] = Json::array();
  for (const Slot& slot : plan.slots) {
    out["slots"].push_back(
        Json{{"index", slot.index},
             {"gpu", slot.gpu ? Json(*slot.gpu) : Json(nullptr)},
             {"pci_bus_id", slot.pci_bus_id.empty() ? Json(nullptr) : Json(slot.pci_bus_id)},
             {"cpus", cpu_list_string(slot.cpus)},
             {"mem_nodes", cpu_list_string(slot.mem_nodes)},
             {"omp_threads", slot.omp_threads},
             {"locality", slot.locality}});
  }
  out["bind_cpus"] = plan.bind_cpus;
  out["bind_memory"] = plan.bind_memory;
  out["shared_cpus"] = plan.shared_cpus;
  out["notes"] = plan.notes;
  // Replace, not throw, on bytes that are not UTF-8 (a hostile XML file's path, say).
  return out.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string to_table(const Plan& plan) {
  const Machine& m = plan.machine;
  std::string out =
      m.source + ": " + std::to_string(m.packages) + " package(s), " +
      std::to_string(m.numa_nodes.size()) + " NUMA node(s), " + std::to_string(m.cores.size()) +
      " core(s), " + std::to_string(m.pu_count()) + " PU(s), " + std::to_string(m.gpus.size()) +
      " GPU(s); " + std::to_string(plan.slots.size()) + " slot(s), cpu binding " +
      (plan.bind_cpus ? "on" : "off") + ", memory binding " + (plan.bind_memory ? "on" : "off") +
      (plan.shared_cpus ? ", slots SHARE cores" : "") + "\n";
  std::vector<std::vector<std::string>> rows = {
      {"SLOT", "GPU", "PCI BUS ID", "CPUS", "MEM", "OMP", "LOCALITY"}};
  for (const Slot& slot : plan.slots) {
    rows.push_back({std::to_string(slot.index), slot.gpu ? std::to_string(*slot.gpu) : "-",
                    slot.pci_bus_id.empty() ? "-" : slot.pci_bus_id,
                    slot.cpus.empty() ? "-" : cpu_list_string(slot.cpus),
                    slot.mem_nodes.empty() ? "-" : cpu_list_string(slot.mem_nodes),
                    std::to_string(slot.omp_threads), slot.locality});
  }
  std::vector<std::size_t> width(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    out += line + "\n";
  }
  for (const std::string& note : plan.notes) out += "note: " + note + "\n";
  return out;
}

}  // namespace elastic::topology
