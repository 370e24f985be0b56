// The Prometheus text rendering (daemon/node/metrics.h): exact text for a small scrape, label
// value escaping, cumulative histogram buckets, number formatting, and the programming errors
// that abort.
#include "daemon/node/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace elastic::node {
namespace {

TEST(MetricsText, RendersFamiliesExactly) {
  MetricsText m;
  m.family("elastic_uptime_seconds", MetricType::kGauge, "Seconds since this daemon started.");
  m.sample(12.5);
  m.family("elastic_members", MetricType::kGauge, "Members by state.");
  m.sample(3, {{"state", "alive"}});
  m.sample(0, {{"state", "dead"}});
  m.family("elastic_probes_total", MetricType::kCounter, "Probes sent.");
  m.sample(1234567);
  m.family("elastic_empty", MetricType::kCounter, "A family without samples.");
  m.family("elastic_node_info", MetricType::kGauge, "Info.");
  m.sample(1, {{"name", "n1"}, {"generation", "4"}});
  EXPECT_EQ(m.text(),
            "# HELP elastic_uptime_seconds Seconds since this daemon started.\n"
            "# TYPE elastic_uptime_seconds gauge\n"
            "elastic_uptime_seconds 12.5\n"
            "# HELP elastic_members Members by state.\n"
            "# TYPE elastic_members gauge\n"
            "elastic_members{state=\"alive\"} 3\n"
            "elastic_members{state=\"dead\"} 0\n"
            "# HELP elastic_probes_total Probes sent.\n"
            "# TYPE elastic_probes_total counter\n"
            "elastic_probes_total 1234567\n"
            "# HELP elastic_empty A family without samples.\n"
            "# TYPE elastic_empty counter\n"
            "# HELP elastic_node_info Info.\n"
            "# TYPE elastic_node_info gauge\n"
            "elastic_node_info{name=\"n1\",generation=\"4\"} 1\n");
}

TEST(MetricsText, EscapesLabelValuesAndHelp) {
  MetricsText m;
  m.family("elastic_job_round", MetricType::kGauge, "Back\\slash and\nnewline \"quotes\" stay.");
  m.sample(7, {{"job", "a\\b\"c\nd"}});
  EXPECT_EQ(m.text(),
            "# HELP elastic_job_round Back\\\\slash and\\nnewline \"quotes\" stay.\n"
            "# TYPE elastic_job_round gauge\n"
            "elastic_job_round{job=\"a\\\\b\\\"c\\nd\"} 7\n");
  EXPECT_EQ(escape_label_value("plain-value_1.2"), "plain-value_1.2");
  EXPECT_EQ(escape_label_value(""), "");
  EXPECT_EQ(escape_label_value("\\\n\""), "\\\\\\n\\\"");
}

TEST(MetricsText, HistogramBucketsAreCumulative) {
  MetricsText m;
  m.family("elastic_recovery_seconds", MetricType::kHistogram, "Recovery.");
  const std::vector<double> bounds = {0.5, 1, 7.5};
  const std::vector<std::uint64_t> counts = {2, 0, 3, 1};  // per bucket, last above 7.5
  m.histogram(bounds, counts, 30.25, {{"job", "j"}});
  EXPECT_EQ(m.text(),
            "# HELP elastic_recovery_seconds Recovery.\n"
            "# TYPE elastic_recovery_seconds histogram\n"
            "elastic_recovery_seconds_bucket{job=\"j\",le=\"0.5\"} 2\n"
            "elastic_recovery_seconds_bucket{job=\"j\",le=\"1\"} 2\n"
            "elastic_recovery_seconds_bucket{job=\"j\",le=\"7.5\"} 5\n"
            "elastic_recovery_seconds_bucket{job=\"j\",le=\"+Inf\"} 6\n"
            "elastic_recovery_seconds_sum{job=\"j\"} 30.25\n"
            "elastic_recovery_seconds_count{job=\"j\"} 6\n");
}

TEST(Histogram, ObserveUsesLessOrEqualBounds) {
  Histogram h({1, 2, 5});
  for (double v : {0.5, 1.0, 1.5, 2.0, 5.0, 5.25, 100.0}) h.observe(v);
  EXPECT_EQ(h.counts, (std::vector<std::uint64_t>{2, 2, 1, 2}));
  EXPECT_EQ(h.count, 7u);
  EXPECT_EQ(h.sum, 115.25);
  MetricsText m;
  m.family("elastic_x_seconds", MetricType::kHistogram, "X.");
  m.histogram(h);
  EXPECT_EQ(m.text(),
            "# HELP elastic_x_seconds X.\n"
            "# TYPE elastic_x_seconds histogram\n"
            "elastic_x_seconds_bucket{le=\"1\"} 2\n"
            "elastic_x_seconds_bucket{le=\"2\"} 4\n"
            "elastic_x_seconds_bucket{le=\"5\"} 5\n"
            "elastic_x_seconds_bucket{le=\"+Inf\"} 7\n"
            "elastic_x_seconds_sum 115.25\n"
            "elastic_x_seconds_count 7\n");
}

TEST(MetricsText, FormatsValues) {
  EXPECT_EQ(format_metric_value(0), "0");
  EXPECT_EQ(format_metric_value(-3), "-3");
  EXPECT_EQ(format_metric_value(1e6), "1000000");
  EXPECT_EQ(format_metric_value(9007199254740991.0), "9007199254740991");
  EXPECT_EQ(format_metric_value(0.1), "0.1");
  EXPECT_EQ(format_metric_value(1e300), "1e+300");
  EXPECT_EQ(format_metric_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_metric_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_metric_value(std::nan("")), "NaN");
}

TEST(MetricsText, ValidatesNames) {
  EXPECT_TRUE(is_metric_name("elastic_members"));
  EXPECT_TRUE(is_metric_name("a:b_1"));
  EXPECT_FALSE(is_metric_name(""));
  EXPECT_FALSE(is_metric_name("1abc"));
  EXPECT_FALSE(is_metric_name("a-b"));
  EXPECT_TRUE(is_label_name("state"));
  EXPECT_FALSE(is_label_name("__name__"));
  EXPECT_FALSE(is_label_name("a:b"));
  EXPECT_FALSE(is_label_name("Ä"));
}

TEST(MetricsTextDeathTest, ProgrammingErrorsAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        MetricsText m;
        m.family("elastic_a", MetricType::kGauge, "A.");
        m.family("elastic_a", MetricType::kGauge, "A again.");
      },
      "declared twice");
  EXPECT_DEATH(
      {
        MetricsText m;
        m.sample(1);
      },
      "before any metric family");
  EXPECT_DEATH(
      {
        MetricsText m;
        m.family("bad-name", MetricType::kGauge, "B.");
      },
      "not a metric name");
  EXPECT_DEATH(
      {
        MetricsText m;
        m.family("elastic_h", MetricType::kHistogram, "H.");
        m.sample(1);
      },
      "is a histogram");
  EXPECT_DEATH(
      {
        MetricsText m;
        m.family("elastic_g", MetricType::kGauge, "G.");
        m.sample(1, {{"le", "1"}});
      },
      "not a label name");
}

}  // namespace
}  // namespace elastic::node
