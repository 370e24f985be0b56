// conf/grafana-dashboard.json is import-ready: valid JSON with a title, a uid and a schema
// version, its Prometheus data source a variable (chosen at import), panels with unique ids on
// Grafana's 24-column grid without overlaps, and every target a PromQL expression that selects at
// least one elastic_ metric by name. Whether those names are ones the endpoint exports is checked
// against a real daemon's scrape (tests/integ/grafana_dashboard_integ_test.cc: the renderer needs a
// running node). Also the name lexer those tests share (tests/support/promql_names.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tests/support/promql_names.h"

namespace elastic::testing {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

const std::string kDashboard = std::string(ELASTIC_SOURCE_DIR) + "/conf/grafana-dashboard.json";

TEST(PromqlNames, KeepsMetricsDropsFunctionsLabelsAndKeywords) {
  EXPECT_THAT(promql_metric_names("elastic_jobs"), ElementsAre("elastic_jobs"));
  EXPECT_THAT(
      promql_metric_names("max by (state) (elastic_members{job=~\"$job\", state=~\"a|b\"})"),
      ElementsAre("elastic_members"));
  EXPECT_THAT(promql_metric_names("histogram_quantile(0.9, sum by (le) (increase("
                                  "elastic_recovery_seconds_bucket{cause!=\"node_left\"}[1h])))"),
              ElementsAre("elastic_recovery_seconds_bucket"));
  EXPECT_THAT(promql_metric_names("max by (name) (elastic_node_info * on (job, instance) "
                                  "group_left () (elastic_raft_leader == 1))"),
              ElementsAre("elastic_node_info", "elastic_raft_leader"));
  EXPECT_THAT(promql_metric_names("count(a_metric == 0) or vector(0)"), ElementsAre("a_metric"));
  EXPECT_THAT(promql_metric_names("sum(rate(x_total[$__rate_interval])) / sum without (le) "
                                  "(y_count offset 5m) > bool 1e3"),
              ElementsAre("x_total", "y_count"));
  EXPECT_THAT(promql_metric_names("topk(3, z) unless on() w"), ElementsAre("w", "z"));
  EXPECT_THAT(promql_metric_names("label_replace(a, \"dst\", \"$1\", \"src\", \"(.*)\")"),
              ElementsAre("a"));
  EXPECT_THAT(promql_metric_names("vector(1) + 2"), IsEmpty());
}

TEST(GrafanaDashboard, IsImportReady) {
  const json dashboard = read_json_file(kDashboard);
  ASSERT_TRUE(dashboard.is_object()) << kDashboard << " is not a JSON object";
  EXPECT_TRUE(dashboard.value("title", "").size() > 0);
  EXPECT_TRUE(dashboard.value("uid", "").size() > 0);
  EXPECT_GE(dashboard.value("schemaVersion", 0), 36);
  // No id: Grafana assigns one on import (a fixed one would overwrite another dashboard).
  EXPECT_TRUE(dashboard["id"].is_null());

  // The data source is a variable of type datasource (Prometheus), so every Grafana can
  // import the file as it is and pick its own Prometheus.
  bool datasource_variable = false;
  for (const json& variable : dashboard["templating"]["list"]) {
    if (variable.value("name", "") == "datasource") {
      datasource_variable =
          variable.value("type", "") == "datasource" && variable.value("query", "") == "prometheus";
    }
  }
  EXPECT_TRUE(datasource_variable) << "no datasource variable of query prometheus";

  std::set<int> ids;
  std::set<std::pair<int, int>> cells;  // grid cells taken, so no panel hides another
  std::size_t graphs = 0;
  for (const json& panel : dashboard["panels"]) {
    const std::string title = panel.value("title", "");
    EXPECT_TRUE(ids.insert(panel.value("id", -1)).second) << "duplicate panel id: " << title;
    const json& grid = panel["gridPos"];
    EXPECT_LE(grid.value("x", 99) + grid.value("w", 99), 24) << title;
    EXPECT_GT(grid.value("h", 0), 0) << title;
    for (int x = grid.value("x", 0); x < grid.value("x", 0) + grid.value("w", 0); ++x) {
      for (int y = grid.value("y", 0); y < grid.value("y", 0) + grid.value("h", 0); ++y) {
        EXPECT_TRUE(cells.insert({x, y}).second) << title << " overlaps another panel";
      }
    }
    if (panel.value("type", "") == "row") continue;
    ++graphs;
    EXPECT_EQ(panel["datasource"].value("uid", ""), "${datasource}") << title;
    EXPECT_FALSE(panel.value("description", "").empty()) << title;
    ASSERT_TRUE(panel["targets"].is_array() && !panel["targets"].empty()) << title;
    std::set<std::string> refs;
    for (const json& target : panel["targets"]) {
      EXPECT_TRUE(refs.insert(target.value("refId", "")).second) << title;
      EXPECT_EQ(target["datasource"].value("uid", ""), "${datasource}") << title;
    }
  }
  EXPECT_GE(graphs, 20u);
}

TEST(GrafanaDashboard, EveryExpressionSelectsElasticMetricsByName) {
  const json dashboard = read_json_file(kDashboard);
  const std::vector<std::string> exprs = dashboard_exprs(dashboard);
  ASSERT_FALSE(exprs.empty());
  for (const std::string& expr : exprs) {
    EXPECT_EQ(expr.find("__name__"), std::string::npos) << "names must be literal: " << expr;
    const std::set<std::string> names = promql_metric_names(expr);
    EXPECT_FALSE(names.empty()) << "selects no metric: " << expr;
    for (const std::string& name : names) {
      EXPECT_EQ(name.rfind("elastic_", 0), 0u) << name << " in " << expr;
    }
  }
}

}  // namespace
}  // namespace elastic::testing
