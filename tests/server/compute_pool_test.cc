#include "server/compute_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace qmm {
namespace {

TEST(ComputePoolTest, RunsEveryTaskWithAValidWorkerIndex) {
  std::atomic<int> ran{0};
  std::atomic<int> bad_index{0};
  {
    ComputePool pool("test", 3, 10000);
    EXPECT_EQ(pool.size(), 3);
    for (int i = 0; i < 1000; ++i) {
      ASSERT_TRUE(pool.Submit([&](int worker) {
                        if (worker < 0 || worker >= 3) bad_index.fetch_add(1);
                        ran.fetch_add(1);
                      })
                      .ok());
    }
  }  // the destructor drains the queue
  EXPECT_EQ(ran.load(), 1000);
  EXPECT_EQ(bad_index.load(), 0);
}

TEST(ComputePoolTest, SpinningWorkersRunEveryTask) {
  std::atomic<int> ran{0};
  {
    ComputePool pool("test", 2, 10000, absl::Microseconds(200));
    for (int i = 0; i < 200; ++i) {
      ASSERT_TRUE(pool.Submit([&](int) { ran.fetch_add(1); }).ok());
      // Some tasks find a worker spinning, some find it asleep.
      if (i % 50 == 0) absl::SleepFor(absl::Milliseconds(2));
    }
  }
  EXPECT_EQ(ran.load(), 200);
}

TEST(ComputePoolTest, AWorkerIndexIsNeverBusyTwice) {
  constexpr int kWorkers = 4;
  std::atomic<int> busy[kWorkers] = {};
  std::atomic<int> overlaps{0};
  std::mutex mu;
  std::set<int> seen;
  {
    ComputePool pool("test", kWorkers, 10000);
    for (int i = 0; i < 2000; ++i) {
      ASSERT_TRUE(pool.Submit([&](int worker) {
                        if (busy[worker].fetch_add(1) != 0) overlaps.fetch_add(1);
                        {
                          std::lock_guard<std::mutex> lock(mu);
                          seen.insert(worker);
                        }
                        busy[worker].fetch_sub(1);
                      })
                      .ok());
    }
  }
  EXPECT_EQ(overlaps.load(), 0);
  for (int w : seen) EXPECT_TRUE(w >= 0 && w < kWorkers);
}

TEST(ComputePoolTest, FullQueueIsResourceExhaustedAndDropsTheTask) {
  absl::Notification release;
  absl::Notification started;
  std::atomic<int> ran{0};
  {
    ComputePool pool("compute", 1, 2);
    ASSERT_TRUE(pool.Submit([&](int) {
                      started.Notify();
                      release.WaitForNotification();
                    })
                    .ok());
    started.WaitForNotification();  // the worker is busy; the queue is empty
    ASSERT_TRUE(pool.Submit([&](int) { ran.fetch_add(1); }).ok());
    ASSERT_TRUE(pool.Submit([&](int) { ran.fetch_add(1); }).ok());
    const absl::Status full = pool.Submit([&](int) { ran.fetch_add(100); });
    EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(full.message().find("compute queue is full (2 "), absl::string_view::npos) << full;
    release.Notify();
  }
  EXPECT_EQ(ran.load(), 2);
}

TEST(ComputePoolTest, TasksRunInSubmissionOrderOnOneWorker) {
  std::vector<int> order;
  {
    ComputePool pool("test", 1, 100);
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(pool.Submit([&, i](int) { order.push_back(i); }).ok());
  }
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
}

TEST(ComputePoolTest, MoveOnlyTasksAreAccepted) {
  auto value = std::make_unique<int>(42);
  std::atomic<int> seen{0};
  {
    ComputePool pool("test", 1, 10);
    ASSERT_TRUE(pool.Submit([v = std::move(value), &seen](int) { seen = *v; }).ok());
  }
  EXPECT_EQ(seen.load(), 42);
}

}  // namespace
}  // namespace qmm
