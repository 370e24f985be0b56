// The binding plan against synthetic hwloc topologies (tests/data/topology/*.xml, real hwloc
// XML import) and against this host.
#include "daemon/topology/topology.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/support/result_assertions.h"
#include "tests/support/temp_dir.h"

namespace elastic::topology {
namespace {

std::string data(const std::string& name) {
  return std::string(ELASTIC_SOURCE_DIR) + "/tests/data/topology/" + name;
}

Machine load(const std::string& name) {
  auto machine = load_xml(data(name));
  EXPECT_TRUE(machine.ok()) << machine.error().message;
  return machine.ok() ? machine.value() : Machine{};
}

PlanOptions gpus_auto() { return PlanOptions{}; }

PlanOptions gpu_list(std::vector<int> indices) {
  PlanOptions options;
  options.gpus.detect = false;
  options.gpus.indices = std::move(indices);
  return options;
}

PlanOptions cpu_only(unsigned slots) {
  PlanOptions options = gpu_list({});
  options.cpu_slots = slots;
  return options;
}

std::vector<unsigned> range(unsigned first, unsigned last) {
  std::vector<unsigned> out;
  for (unsigned i = first; i <= last; ++i) out.push_back(i);
  return out;
}

std::vector<unsigned> join(std::vector<unsigned> a, const std::vector<unsigned>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// No PU appears in two slots.
void expect_disjoint(const Plan& plan) {
  std::set<unsigned> seen;
  for (const Slot& slot : plan.slots) {
    for (unsigned cpu : slot.cpus) {
      EXPECT_TRUE(seen.insert(cpu).second) << "CPU " << cpu << " is in two slots";
    }
  }
}

TEST(TopologyXml, TwoSocketEightGpuHostIsReadWithPciLocality) {
  const Machine m = load("2socket-8gpu.xml");
  EXPECT_EQ(m.source, data("2socket-8gpu.xml"));
  EXPECT_EQ(m.packages, 2u);
  EXPECT_EQ(m.cores.size(), 32u);
  EXPECT_EQ(m.pu_count(), 64u);
  ASSERT_EQ(m.numa_nodes.size(), 2u);
  EXPECT_EQ(m.cores[0].pus, (std::vector<unsigned>{0, 32}));
  EXPECT_EQ(m.cores[31].numa_node, 1);
  // The InfiniBand NICs and the ASPEED VGA are not GPUs; the 8 H100s are, in PCI bus order.
  ASSERT_EQ(m.gpus.size(), 8u);
  const std::vector<std::string> bus_ids = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0",
                                            "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0",
                                            "0000:ba:00.0", "0000:db:00.0"};
  for (unsigned i = 0; i < 8; ++i) {
    EXPECT_EQ(m.gpus[i].index, i);
    EXPECT_EQ(m.gpus[i].pci_bus_id, bus_ids[i]);
    // GPUs 4-7 sit behind a PCIe switch: the locality is still the package above it.
    EXPECT_EQ(m.gpus[i].numa_node, i < 4 ? 0 : 1);
    EXPECT_EQ(m.gpus[i].package, i < 4 ? 0 : 1);
    EXPECT_EQ(m.gpus[i].local_cpus.size(), 32u);
  }
}

TEST(TopologyPlan, EightGpusGetFourDisjointCoresEachNearTheirSocket) {
  auto plan = make_plan(load("2socket-8gpu.xml"), gpus_auto());
  ASSERT_OK(plan);
  ASSERT_EQ(plan->slots.size(), 8u);
  EXPECT_FALSE(plan->shared_cpus);
  EXPECT_TRUE(plan->notes.empty());
  for (unsigned i = 0; i < 8; ++i) {
    const Slot& slot = plan->slots[i];
    EXPECT_EQ(slot.index, i);
    ASSERT_TRUE(slot.gpu.has_value());
    EXPECT_EQ(*slot.gpu, i);
    // Socket 0 owns cores 0-15 (PUs c and c+32), socket 1 cores 16-31.
    const unsigned first = 4 * i;
    EXPECT_EQ(slot.cpus, join(range(first, first + 3), range(first + 32, first + 35))) << i;
    EXPECT_EQ(slot.mem_nodes, (std::vector<unsigned>{i < 4 ? 0u : 1u}));
    EXPECT_EQ(slot.omp_threads, 4u);
    EXPECT_EQ(slot.locality, i < 4 ? "package 0, NUMA 0" : "package 1, NUMA 1");
  }
  EXPECT_EQ(cpu_list_string(plan->slots[0].cpus), "0-3,32-35");
  EXPECT_EQ(plan->slots[5].pci_bus_id, "0000:ab:00.0");
  expect_disjoint(*plan);
}

TEST(TopologyPlan, ExplicitFullListEqualsAuto) {
  const Machine m = load("2socket-8gpu.xml");
  auto automatic = make_plan(m, gpus_auto());
  auto listed = make_plan(m, gpu_list({0, 1, 2, 3, 4, 5, 6, 7}));
  ASSERT_OK(automatic);
  ASSERT_OK(listed);
  EXPECT_EQ(automatic->slots, listed->slots);
}

// A selected GPU gets its locality's cores divided among the SELECTED GPUs there: with
// node.gpus = [1, 6] each GPU gets its whole socket.
TEST(TopologyPlan, SelectedGpusShareTheirSocketOnlyWithOtherSelectedGpus) {
  auto plan = make_plan(load("2socket-8gpu.xml"), gpu_list({1, 6}));
  ASSERT_OK(plan);
  ASSERT_EQ(plan->slots.size(), 2u);
  EXPECT_EQ(plan->slots[0].gpu, 1u);
  EXPECT_EQ(plan->slots[0].pci_bus_id, "0000:2a:00.0");
  EXPECT_EQ(cpu_list_string(plan->slots[0].cpus), "0-15,32-47");
  EXPECT_EQ(plan->slots[0].omp_threads, 16u);
  EXPECT_EQ(plan->slots[0].mem_nodes, (std::vector<unsigned>{0}));
  EXPECT_EQ(plan->slots[1].gpu, 6u);
  EXPECT_EQ(cpu_list_string(plan->slots[1].cpus), "16-31,48-63");
  EXPECT_EQ(plan->slots[1].mem_nodes, (std::vector<unsigned>{1}));

  // Two selected GPUs on the same socket split it; the other socket stays unused.
  auto same_socket = make_plan(load("2socket-8gpu.xml"), gpu_list({2, 0}));
  ASSERT_OK(same_socket);
  ASSERT_EQ(same_socket->slots.size(), 2u);
  EXPECT_EQ(same_socket->slots[0].gpu, 2u);  // slots follow the list's order
  EXPECT_EQ(cpu_list_string(same_socket->slots[0].cpus), "0-7,32-39");
  EXPECT_EQ(cpu_list_string(same_socket->slots[1].cpus), "8-15,40-47");
  EXPECT_EQ(same_socket->slots[1].omp_threads, 8u);
}

TEST(TopologyPlan, UnknownGpuIndexNamesTheKeyAndTheCount) {
  auto plan = make_plan(load("2socket-8gpu.xml"), gpu_list({0, 8}));
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error().message.find("node.gpus"), std::string::npos) << plan.error().message;
  EXPECT_NE(plan.error().message.find("8 NVIDIA GPU"), std::string::npos) << plan.error().message;
  auto twice = make_plan(load("2socket-8gpu.xml"), gpu_list({3, 3}));
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.error().message.find("twice"), std::string::npos);
}

TEST(TopologyPlan, EmptyGpuListMakesCpuSlotsOnAGpuHost) {
  auto plan = make_plan(load("2socket-8gpu.xml"), cpu_only(0));
  ASSERT_OK(plan);
  ASSERT_EQ(plan->slots.size(), 2u);
  EXPECT_FALSE(plan->slots[0].gpu.has_value());
  EXPECT_EQ(cpu_list_string(plan->slots[0].cpus), "0-15,32-47");
  EXPECT_EQ(plan->slots[0].omp_threads, 16u);
}

TEST(TopologyPlan, BindingSwitchesEmptyTheListsButKeepOmpThreads) {
  PlanOptions options = gpus_auto();
  options.bind_cpus = false;
  options.bind_memory = false;
  auto plan = make_plan(load("2socket-8gpu.xml"), options);
  ASSERT_OK(plan);
  ASSERT_EQ(plan->slots.size(), 8u);
  for (const Slot& slot : plan->slots) {
    EXPECT_TRUE(slot.cpus.empty());
    EXPECT_TRUE(slot.mem_nodes.empty());
    EXPECT_EQ(slot.omp_threads, 4u);
  }
  EXPECT_FALSE(plan->bind_cpus);
  EXPECT_FALSE(plan->bind_memory);
}

TEST(TopologyPlan, CpuHostGetsOneSlotPerNumaNodeByDefault) {
  const Machine m = load("2numa-cpu.xml");
  EXPECT_TRUE(m.gpus.empty());
  EXPECT_EQ(m.packages, 1u);
  ASSERT_EQ(m.numa_nodes.size(), 2u);
  auto plan = make_plan(m, gpus_auto());  // "auto" finding no GPU means CPU slots
  ASSERT_OK(plan);
  ASSERT_EQ(plan->slots.size(), 2u);
  EXPECT_EQ(plan->slots[0].cpus, range(0, 7));
  EXPECT_EQ(plan->slots[0].mem_nodes, (std::vector<unsigned>{0}));
  EXPECT_EQ(plan->slots[0].omp_threads, 8u);
  EXPECT_EQ(plan->slots[0].locality, "package 0, NUMA 0");
  EXPECT_EQ(plan->slots[1].cpus, range(8, 15));
  EXPECT_EQ(plan->slots[1].mem_nodes, (std::vector<unsigned>{1}));
  EXPECT_FALSE(plan->slots[1].gpu.has_value());
}

TEST(TopologyPlan, CpuSlotsAreSpreadRoundRobinAcrossNumaNodes) {
  auto plan = make_plan(load("2numa-cpu.xml"), cpu_only(4));
  ASSERT_OK(plan);
  ASSERT_EQ(plan->slots.size(), 4u);
  // Slots 0 and 2 on node 0, 1 and 3 on node 1; each node's 8 cores split in halves.
  EXPECT_EQ(plan->slots[0].cpus, range(0, 3));
  EXPECT_EQ(plan->slots[2].cpus, range(4, 7));
  EXPECT_EQ(plan->slots[1].cpus, range(8, 11));
  EXPECT_EQ(plan->slots[3].cpus, range(12, 15));
  for (const Slot& slot : plan->slots) {
    EXPECT_EQ(slot.omp_threads, 4u);
    EXPECT_EQ(slot.mem_nodes, (std::vector<unsigned>{slot.index % 2}));
  }
  expect_disjoint(*plan);
  EXPECT_FALSE(plan->shared_cpus);

  // An odd count: node 0 gets slots 0 and 2 (4 cores each), node 1 slot 1 (all 8).
  auto three = make_plan(load("2numa-cpu.xml"), cpu_only(3));
  ASSERT_OK(three);
  EXPECT_EQ(three->slots[1].cpus, range(8, 15));
  EXPECT_EQ(three->slots[2].cpus, range(4, 7));
}

TEST(TopologyPlan, SingleCoreHostSharesItsCoreAndSaysSo) {
  const Machine m = load("1core.xml");
  ASSERT_EQ(m.cores.size(), 1u);
  auto plan = make_plan(m, cpu_only(4));
  ASSERT_OK(plan);
  ASSERT_EQ(plan->slots.size(), 4u);
  EXPECT_TRUE(plan->shared_cpus);
  EXPECT_FALSE(plan->notes.empty());
  for (const Slot& slot : plan->slots) {
    EXPECT_EQ(slot.cpus, (std::vector<unsigned>{0}));
    EXPECT_EQ(slot.omp_threads, 1u);
    EXPECT_EQ(slot.mem_nodes, (std::vector<unsigned>{0}));
  }
  EXPECT_NE(to_table(*plan).find("SHARE"), std::string::npos);
}

TEST(TopologyPlan, GpuWithoutANearbyCoreBorrowsAFreeOneAndKeepsItsMemoryNode) {
  // Package 0 has 2 cores and 3 GPUs; package 1 has 2 cores and none.
  auto plan = make_plan(load("2core-3gpu.xml"), gpus_auto());
  ASSERT_OK(plan);
  ASSERT_EQ(plan->slots.size(), 3u);
  EXPECT_FALSE(plan->shared_cpus);
  EXPECT_EQ(plan->slots[0].cpus, (std::vector<unsigned>{0}));
  EXPECT_EQ(plan->slots[1].cpus, (std::vector<unsigned>{1}));
  EXPECT_EQ(plan->slots[2].cpus, (std::vector<unsigned>{2}));
  EXPECT_EQ(plan->slots[2].mem_nodes, (std::vector<unsigned>{0}));
  ASSERT_EQ(plan->notes.size(), 1u);
  EXPECT_NE(plan->notes[0].find("GPU 2"), std::string::npos) << plan->notes[0];
  expect_disjoint(*plan);
}

TEST(TopologyPlan, ExplicitGpusOnAHostWithoutVisibleGpusGetUnknownLocality) {
  // Containers often hide the PCI tree: the operator's list is trusted.
  auto plan = make_plan(load("2numa-cpu.xml"), gpu_list({0, 1, 2}));
  ASSERT_OK(plan);
  ASSERT_EQ(plan->slots.size(), 3u);
  EXPECT_EQ(plan->slots[0].locality, "unknown");
  EXPECT_TRUE(plan->slots[0].pci_bus_id.empty());
  // 16 cores in topology order: 6, 5, 5.
  EXPECT_EQ(plan->slots[0].cpus, range(0, 5));
  EXPECT_EQ(plan->slots[1].cpus, range(6, 10));
  EXPECT_EQ(plan->slots[2].cpus, range(11, 15));
  EXPECT_EQ(plan->slots[1].mem_nodes, (std::vector<unsigned>{0, 1}));
  EXPECT_EQ(plan->slots[2].mem_nodes, (std::vector<unsigned>{1}));
  EXPECT_FALSE(plan->notes.empty());
  expect_disjoint(*plan);
}

TEST(TopologyPlan, AnEmptySlotTakesACoreFromTheRichestBeforeSharing) {
  // Hand-built: 3 cores; GPUs 0 and 1 are local to core 0 only, GPU 2 to all three cores. The
  // narrow locality is served first (GPU 0 gets core 0, GPU 1 nothing), GPU 2 gets cores 1-2,
  // then GPU 1 takes one of GPU 2's cores.
  Machine m;
  m.source = "hand-built";
  m.packages = 1;
  m.numa_nodes = {NumaNode{0, 0, {0, 1, 2}}};
  for (unsigned c = 0; c < 3; ++c) m.cores.push_back(Core{0, 0, {c}});
  m.gpus.push_back(Gpu{0, "0000:01:00.0", 0, 0, {0}, {0}});
  m.gpus.push_back(Gpu{1, "0000:02:00.0", 0, 0, {0}, {0}});
  m.gpus.push_back(Gpu{2, "0000:03:00.0", 0, 0, {0, 1, 2}, {0}});
  auto plan = make_plan(m, gpus_auto());
  ASSERT_OK(plan);
  EXPECT_FALSE(plan->shared_cpus);
  EXPECT_EQ(plan->slots[0].cpus, (std::vector<unsigned>{0}));
  EXPECT_EQ(plan->slots[1].cpus, (std::vector<unsigned>{2}));
  EXPECT_EQ(plan->slots[2].cpus, (std::vector<unsigned>{1}));
  ASSERT_EQ(plan->notes.size(), 1u);
  EXPECT_NE(plan->notes[0].find("from GPU 2"), std::string::npos) << plan->notes[0];
  expect_disjoint(*plan);

  // Six CPU slots on three cores: nothing to take, so slots share.
  auto crowded = make_plan(m, cpu_only(6));
  ASSERT_OK(crowded);
  EXPECT_TRUE(crowded->shared_cpus);
  EXPECT_EQ(crowded->slots.size(), 6u);
}

TEST(TopologyXml, NotHwlocXmlIsAnErrorNamingTheFile) {
  auto html = load_xml(data("not-hwloc.xml"));
  ASSERT_FALSE(html.ok());
  EXPECT_NE(html.error().message.find(data("not-hwloc.xml")), std::string::npos)
      << html.error().message;

  elastic::testing::TempDir dir;
  const std::string garbage = dir.write("garbage.xml", std::string("\x00\xff<topo\x01", 8));
  auto bad = load_xml(garbage);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find(garbage), std::string::npos) << bad.error().message;

  auto missing = load_xml(dir.file("missing.xml"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("missing.xml"), std::string::npos);
}

TEST(TopologyHost, ThisHostLoadsAndPlansAtLeastOneSlot) {
  auto machine = load_this_host();
  ASSERT_OK(machine);
  EXPECT_GE(machine->cores.size(), 1u);
  EXPECT_GE(machine->pu_count(), 1u);
  auto plan = make_plan(*machine, gpus_auto());
  ASSERT_OK(plan);
  ASSERT_GE(plan->slots.size(), 1u);
  for (const Slot& slot : plan->slots) {
    EXPECT_FALSE(slot.cpus.empty());
    EXPECT_GE(slot.omp_threads, 1u);
  }
  if (machine->gpus.empty()) {
    EXPECT_FALSE(plan->slots[0].gpu.has_value());
  }
  expect_disjoint(*plan);
}

// hwloc reads HWLOC_XMLFILE instead of the host, and the source says so (one process per test
// under ctest, so the variable cannot leak into another test).
TEST(TopologyHost, HwlocXmlFileOverridesThisHostAndIsNamed) {
  ASSERT_EQ(::setenv("HWLOC_XMLFILE", data("2core-3gpu.xml").c_str(), 1), 0);
  auto machine = load_this_host();
  ::unsetenv("HWLOC_XMLFILE");
  ASSERT_OK(machine);
  EXPECT_EQ(machine->source, "this host (HWLOC_XMLFILE=" + data("2core-3gpu.xml") + ")");
  EXPECT_EQ(machine->gpus.size(), 3u);
}

TEST(TopologyJson, KeysAreStableAndListsAreStrings) {
  auto plan = make_plan(load("2socket-8gpu.xml"), gpus_auto());
  ASSERT_OK(plan);
  const auto json = nlohmann::json::parse(to_json(*plan));
  for (const char* key : {"source", "pus", "cores", "numa_nodes", "packages", "gpus", "slots",
                          "bind_cpus", "bind_memory", "shared_cpus", "notes"}) {
    EXPECT_TRUE(json.contains(key)) << key;
  }
  EXPECT_EQ(json["pus"], 64);
  EXPECT_EQ(json["cores"], 32);
  EXPECT_EQ(json["numa_nodes"], 2);
  EXPECT_EQ(json["packages"], 2);
  ASSERT_EQ(json["gpus"].size(), 8u);
  EXPECT_EQ(json["gpus"][7]["pci_bus_id"], "0000:db:00.0");
  EXPECT_EQ(json["gpus"][7]["numa_node"], 1);
  EXPECT_EQ(json["gpus"][7]["package"], 1);
  ASSERT_EQ(json["slots"].size(), 8u);
  const auto& slot = json["slots"][1];
  for (const char* key :
       {"index", "gpu", "pci_bus_id", "cpus", "mem_nodes", "omp_threads", "locality"}) {
    EXPECT_TRUE(slot.contains(key)) << key;
  }
  EXPECT_EQ(slot["gpu"], 1);
  EXPECT_EQ(slot["cpus"], "4-7,36-39");
  EXPECT_EQ(slot["mem_nodes"], "0");
  EXPECT_EQ(slot["omp_threads"], 4);
  EXPECT_EQ(slot["locality"], "package 0, NUMA 0");
  EXPECT_EQ(json["shared_cpus"], false);

  auto cpu = make_plan(load("2numa-cpu.xml"), cpu_only(0));
  ASSERT_OK(cpu);
  const auto cpu_json = nlohmann::json::parse(to_json(*cpu));
  EXPECT_TRUE(cpu_json["slots"][0]["gpu"].is_null());
  EXPECT_TRUE(cpu_json["slots"][0]["pci_bus_id"].is_null());
  EXPECT_TRUE(cpu_json["gpus"].empty());
}

TEST(TopologyTable, OneLinePerSlotAfterASummary) {
  auto plan = make_plan(load("2socket-8gpu.xml"), gpus_auto());
  ASSERT_OK(plan);
  const std::string table = to_table(*plan);
  std::size_t lines = 0;
  for (char c : table) lines += c == '\n' ? 1 : 0;
  EXPECT_EQ(lines, 1u + 1u + 8u);  // summary, header, slots
  EXPECT_NE(table.find("0000:18:00.0  0-3,32-35"), std::string::npos) << table;
  EXPECT_NE(table.find("8 GPU(s)"), std::string::npos) << table;
}

TEST(CpuList, RangesAndSingles) {
  EXPECT_EQ(cpu_list_string({0, 1, 2, 3, 8}), "0-3,8");
  EXPECT_EQ(cpu_list_string({}), "");
  EXPECT_EQ(cpu_list_string({5}), "5");
  EXPECT_EQ(cpu_list_string({9, 1, 0, 2, 2, 7, 8}), "0-2,7-9");
  EXPECT_EQ(cpu_list_string({0, 2, 4}), "0,2,4");
}

TEST(TopologyOptions, ComeFromNodeAndSpawnerConfig) {
  config::DaemonConfig config;
  config.node.gpus.detect = false;
  config.node.gpus.indices = {2, 3};
  config.node.cpu_slots = 3;
  config.spawner.bind_memory = false;
  const PlanOptions options = plan_options(config);
  EXPECT_FALSE(options.gpus.detect);
  EXPECT_EQ(options.gpus.indices, (std::vector<int>{2, 3}));
  EXPECT_EQ(options.cpu_slots, 3u);
  EXPECT_TRUE(options.bind_cpus);
  EXPECT_FALSE(options.bind_memory);
}

}  // namespace
}  // namespace elastic::topology
