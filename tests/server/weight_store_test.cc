#include "server/weight_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace qmm {
namespace {

// A backend weight of a chosen size that records its destruction.
class FakeWeight : public BackendWeight {
 public:
  FakeWeight(int64_t bytes, std::atomic<int>* destroyed) : bytes_(bytes), destroyed_(destroyed) {}
  ~FakeWeight() override {
    if (destroyed_ != nullptr) destroyed_->fetch_add(1);
  }
  Scheme scheme() const override { return Scheme::kW8A16; }
  const WeightShape& shape() const override { return shape_; }
  int64_t device_bytes() const override { return bytes_; }

 private:
  WeightShape shape_{4, 64, 0};
  int64_t bytes_;
  std::atomic<int>* destroyed_;
};

WeightDesc Desc(int64_t packed_bytes) {
  return WeightDesc{Scheme::kW8A16, WeightShape{4, 64, 0}, packed_bytes};
}

absl::StatusOr<std::shared_ptr<const StoredWeight>> Put(WeightStore& store, std::string name,
                                                        int64_t bytes,
                                                        std::atomic<int>* destroyed = nullptr) {
  absl::StatusOr<WeightStore::Reservation> reservation = store.Reserve(name, bytes);
  if (!reservation.ok()) return reservation.status();
  return store.Commit(*std::move(reservation), Desc(bytes),
                      std::make_unique<FakeWeight>(bytes, destroyed));
}

TEST(WeightStoreTest, CommitPublishesAndGetFindsIt) {
  WeightStore store(1000);
  absl::StatusOr<std::shared_ptr<const StoredWeight>> put = Put(store, "layer.0/q", 300);
  ASSERT_TRUE(put.ok()) << put.status();
  absl::StatusOr<std::shared_ptr<const StoredWeight>> got = store.Get("layer.0/q");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->get(), put->get());
  EXPECT_EQ((*got)->name(), "layer.0/q");
  EXPECT_EQ((*got)->desc().packed_bytes, 300);
  EXPECT_EQ((*got)->device_bytes(), 300);
  EXPECT_EQ(store.used_bytes(), 300);
  EXPECT_EQ(store.size(), 1);
}

TEST(WeightStoreTest, ReservedNameIsInvisibleUntilCommit) {
  WeightStore store(1000);
  absl::StatusOr<WeightStore::Reservation> reservation = store.Reserve("w", 100);
  ASSERT_TRUE(reservation.ok());
  EXPECT_EQ(store.Get("w").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store.List().empty());
  EXPECT_EQ(store.used_bytes(), 100);  // the bytes are held already
}

TEST(WeightStoreTest, DroppedReservationGivesBackNameAndBytes) {
  WeightStore store(1000);
  {
    absl::StatusOr<WeightStore::Reservation> reservation = store.Reserve("w", 600);
    ASSERT_TRUE(reservation.ok());
    EXPECT_EQ(store.Reserve("w", 1).status().code(), absl::StatusCode::kAlreadyExists);
  }
  EXPECT_EQ(store.used_bytes(), 0);
  EXPECT_TRUE(Put(store, "w", 1000).ok());
}

TEST(WeightStoreTest, MovedReservationReleasesOnce) {
  WeightStore store(1000);
  {
    absl::StatusOr<WeightStore::Reservation> reservation = store.Reserve("w", 600);
    ASSERT_TRUE(reservation.ok());
    WeightStore::Reservation moved = *std::move(reservation);
    EXPECT_EQ(moved.name(), "w");
    EXPECT_EQ(moved.bytes(), 600);
  }
  EXPECT_EQ(store.used_bytes(), 0);
}

TEST(WeightStoreTest, DuplicateNameIsAlreadyExists) {
  WeightStore store(1000);
  ASSERT_TRUE(Put(store, "w", 10).ok());
  const absl::Status status = store.Reserve("w", 10).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(status.message().find("\"w\""), absl::string_view::npos);
  EXPECT_EQ(store.used_bytes(), 10);
}

TEST(WeightStoreTest, BudgetRefusalNamesBytesAndChangesNothing) {
  WeightStore store(1000);
  ASSERT_TRUE(Put(store, "a", 800).ok());
  const absl::Status status = store.Reserve("b", 201).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("201"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("800"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("1000"), absl::string_view::npos) << status;
  EXPECT_EQ(store.used_bytes(), 800);
  // The refused name was not claimed.
  EXPECT_TRUE(Put(store, "b", 200).ok());
}

TEST(WeightStoreTest, ConcurrentUploadsCannotBothPassTheBudget) {
  WeightStore store(1000);
  absl::StatusOr<WeightStore::Reservation> first = store.Reserve("a", 600);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(store.Reserve("b", 600).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(WeightStoreTest, ConcurrentReservationsOfOneNameGrantExactlyOne) {
  WeightStore store(1 << 20);
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  std::vector<std::optional<WeightStore::Reservation>> held(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      absl::StatusOr<WeightStore::Reservation> r = store.Reserve("same", 10);
      if (r.ok()) {
        granted.fetch_add(1);
        held[t].emplace(*std::move(r));
      } else {
        EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(granted.load(), 1);
}

TEST(WeightStoreTest, CommitChargesTheDeviceBytes) {
  WeightStore store(1000);
  // The device layout is larger than the reservation: the difference is charged.
  absl::StatusOr<WeightStore::Reservation> big = store.Reserve("big", 100);
  ASSERT_TRUE(big.ok());
  ASSERT_TRUE(
      store.Commit(*std::move(big), Desc(100), std::make_unique<FakeWeight>(400, nullptr)).ok());
  EXPECT_EQ(store.used_bytes(), 400);
  // Smaller than the reservation: the rest is given back.
  absl::StatusOr<WeightStore::Reservation> small = store.Reserve("small", 300);
  ASSERT_TRUE(small.ok());
  ASSERT_TRUE(
      store.Commit(*std::move(small), Desc(300), std::make_unique<FakeWeight>(50, nullptr)).ok());
  EXPECT_EQ(store.used_bytes(), 450);
}

TEST(WeightStoreTest, CommitOverTheBudgetPublishesNothing) {
  WeightStore store(1000);
  std::atomic<int> destroyed{0};
  absl::StatusOr<WeightStore::Reservation> r = store.Reserve("w", 500);
  ASSERT_TRUE(r.ok());
  absl::StatusOr<std::shared_ptr<const StoredWeight>> committed =
      store.Commit(*std::move(r), Desc(500), std::make_unique<FakeWeight>(1200, &destroyed));
  EXPECT_EQ(committed.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(destroyed.load(), 1);
  EXPECT_EQ(store.used_bytes(), 0);
  EXPECT_EQ(store.Get("w").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Put(store, "w", 10).ok());  // the name is free again
}

TEST(WeightStoreTest, ListIsSortedByName) {
  WeightStore store(1000);
  for (const char* name : {"b", "a/2", "c", "a/10", "A"}) ASSERT_TRUE(Put(store, name, 1).ok());
  std::vector<std::string> names;
  for (const auto& w : store.List()) names.push_back(w->name());
  EXPECT_EQ(names, (std::vector<std::string>{"A", "a/10", "a/2", "b", "c"}));
}

TEST(WeightStoreTest, DeleteUnknownIsNotFound) {
  WeightStore store(1000);
  const absl::Status status = store.Delete("nope");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(status.message().find("\"nope\""), absl::string_view::npos);
}

TEST(WeightStoreTest, DeleteWhileHeldFreesAfterTheLastUser) {
  WeightStore store(1000);
  std::atomic<int> destroyed{0};
  ASSERT_TRUE(Put(store, "w", 700, &destroyed).ok());
  std::shared_ptr<const StoredWeight> in_flight = *store.Get("w");

  ASSERT_TRUE(store.Delete("w").ok());
  EXPECT_EQ(store.Get("w").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Delete("w").code(), absl::StatusCode::kNotFound);
  // Still alive and still charged: the memory is not free yet.
  EXPECT_EQ(destroyed.load(), 0);
  EXPECT_EQ(in_flight->device_bytes(), 700);
  EXPECT_EQ(store.used_bytes(), 700);
  // The name is free for a new upload at once, within the budget.
  EXPECT_EQ(store.Reserve("w", 301).status().code(), absl::StatusCode::kResourceExhausted);

  in_flight.reset();
  EXPECT_EQ(destroyed.load(), 1);
  EXPECT_EQ(store.used_bytes(), 0);
  EXPECT_TRUE(Put(store, "w", 1000).ok());
}

TEST(WeightStoreTest, HeldWeightMayOutliveTheStore) {
  std::atomic<int> destroyed{0};
  std::shared_ptr<const StoredWeight> held;
  {
    WeightStore store(1000);
    held = *Put(store, "w", 10, &destroyed);
  }
  EXPECT_EQ(destroyed.load(), 0);
  EXPECT_EQ(held->name(), "w");
  held.reset();
  EXPECT_EQ(destroyed.load(), 1);
}

TEST(WeightStoreTest, ConcurrentPutGetDeleteKeepsTheBooksStraight) {
  WeightStore store(1 << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::string name = absl::StrCat("w", t % 2);
      for (int i = 0; i < 500; ++i) {
        (void)Put(store, name, 100);
        if (auto w = store.Get(name); w.ok()) {
          EXPECT_EQ((*w)->device_bytes(), 100);
        }
        (void)store.Delete(name);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(store.size(), 0);
  EXPECT_EQ(store.used_bytes(), 0);
}

}  // namespace
}  // namespace qmm
