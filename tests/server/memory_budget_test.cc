#include "server/memory_budget.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/strings/string_view.h"

namespace qmm {
namespace {

TEST(MemoryBudgetTest, ReservesUpToTheLimitExactly) {
  MemoryBudget budget(1000);
  EXPECT_TRUE(budget.Reserve(600, "a").ok());
  EXPECT_TRUE(budget.Reserve(400, "b").ok());
  EXPECT_EQ(budget.used_bytes(), 1000);
  EXPECT_EQ(budget.limit_bytes(), 1000);
}

TEST(MemoryBudgetTest, RefusalNamesNeededUsedAndLimitAndChangesNothing) {
  MemoryBudget budget(1000);
  ASSERT_TRUE(budget.Reserve(700, "a").ok());
  const absl::Status status = budget.Reserve(301, "weight \"w\"");
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("weight \"w\" needs 301 bytes"), absl::string_view::npos)
      << status;
  EXPECT_NE(status.message().find("700"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("1000"), absl::string_view::npos) << status;
  EXPECT_EQ(budget.used_bytes(), 700);
}

TEST(MemoryBudgetTest, ReleaseMakesRoom) {
  MemoryBudget budget(100);
  ASSERT_TRUE(budget.Reserve(100, "a").ok());
  EXPECT_FALSE(budget.Reserve(1, "b").ok());
  budget.Release(100);
  EXPECT_EQ(budget.used_bytes(), 0);
  EXPECT_TRUE(budget.Reserve(100, "b").ok());
}

TEST(MemoryBudgetTest, HugeRequestDoesNotOverflow) {
  MemoryBudget budget(int64_t{1} << 40);
  ASSERT_TRUE(budget.Reserve(10, "a").ok());
  EXPECT_EQ(budget.Reserve(INT64_MAX, "b").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(budget.used_bytes(), 10);
}

TEST(MemoryBudgetTest, ConcurrentReservationsNeverOvercommit) {
  MemoryBudget budget(1000);
  std::vector<std::thread> threads;
  std::atomic<int> granted{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        if (budget.Reserve(7, "x").ok()) granted.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(granted.load(), 1000 / 7);
  EXPECT_EQ(budget.used_bytes(), 7 * (1000 / 7));
}

}  // namespace
}  // namespace qmm
