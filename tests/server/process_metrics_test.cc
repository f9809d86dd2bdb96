#include "server/process_metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace qmm {
namespace {

constexpr char kStat[] =
    "4242 (qmm-server) S 1 4242 4242 0 -1 4194560 5000 0 0 0 1234 567 0 0 20 0 9 0 "
    "987654 2147483648 51200 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 3 0 0 0 0 0\n";

TEST(ProcessMetricsTest, ParsesTheStatFields) {
  const std::optional<ProcStat> stat = ParseProcStat(kStat);
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ(stat->utime_ticks, 1234);
  EXPECT_EQ(stat->stime_ticks, 567);
  EXPECT_EQ(stat->start_ticks, 987654);
  EXPECT_EQ(stat->vsize_bytes, 2147483648);
  EXPECT_EQ(stat->rss_pages, 51200);
}

TEST(ProcessMetricsTest, CommandNameMayHoldSpacesAndParentheses) {
  const std::string stat = std::string("77 (a b) (c) ") + (std::string(kStat).substr(17));
  const std::optional<ProcStat> parsed = ParseProcStat(stat);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->utime_ticks, 1234);
  EXPECT_EQ(parsed->rss_pages, 51200);
}

TEST(ProcessMetricsTest, MalformedStatIsRejected) {
  EXPECT_FALSE(ParseProcStat("").has_value());
  EXPECT_FALSE(ParseProcStat("4242 qmm-server S 1 2 3").has_value());                // no ')'
  EXPECT_FALSE(ParseProcStat("4242 (qmm) S 1 4242 4242 0 -1 4194560").has_value());  // short
  std::string bad = kStat;
  bad.replace(bad.find("1234"), 4, "12x4");
  EXPECT_FALSE(ParseProcStat(bad).has_value());
}

TEST(ProcessMetricsTest, ParsesBootTime) {
  EXPECT_EQ(ParseBootTime("cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n"), 1700000000);
  EXPECT_FALSE(ParseBootTime("cpu  1 2 3\n").has_value());
  EXPECT_FALSE(ParseBootTime("btime soon\n").has_value());
}

TEST(ProcessMetricsTest, ParsesTheSoftOpenFileLimit) {
  const char kLimits[] =
      "Limit                     Soft Limit           Hard Limit           Units     \n"
      "Max stack size            8388608              unlimited            bytes     \n"
      "Max open files            1024                 524288               files     \n";
  EXPECT_EQ(ParseMaxOpenFiles(kLimits), 1024);
  EXPECT_FALSE(ParseMaxOpenFiles("Max open files            unlimited            unlimited "
                                 "           files\n")
                   .has_value());
  EXPECT_FALSE(ParseMaxOpenFiles("Max stack size  8388608  unlimited  bytes\n").has_value());
}

std::map<std::string, double> CollectValues() {
  std::map<std::string, double> values;
  for (const prometheus::MetricFamily& family : ProcessCollector().Collect()) {
    EXPECT_EQ(family.metric.size(), 1u) << family.name;
    const prometheus::ClientMetric& m = family.metric.front();
    values[family.name] =
        family.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
  }
  return values;
}

TEST(ProcessMetricsTest, CollectsThisProcess) {
  const std::map<std::string, double> before = CollectValues();
  ASSERT_EQ(before.size(), 6u);
  EXPECT_GT(before.at("process_resident_memory_bytes"), 0);
  EXPECT_GT(before.at("process_start_time_seconds"), 1.5e9);
  // An extra descriptor shows up in the next collection.
  const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const std::map<std::string, double> during = CollectValues();
  close(fd);
  EXPECT_EQ(during.at("process_open_fds"), before.at("process_open_fds") + 1);
  EXPECT_EQ(during.at("process_start_time_seconds"), before.at("process_start_time_seconds"));
  // CPU time only grows.
  volatile double x = 0;
  for (int i = 0; i < 20000000; ++i) x = x + i;
  EXPECT_GE(CollectValues().at("process_cpu_seconds_total"),
            before.at("process_cpu_seconds_total"));
}

}  // namespace
}  // namespace qmm
