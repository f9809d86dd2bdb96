#include "server/model_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace qmm {
namespace {

class FakeWeight : public BackendWeight {
 public:
  explicit FakeWeight(std::atomic<int>* destroyed) : destroyed_(destroyed) {}
  ~FakeWeight() override { destroyed_->fetch_add(1); }
  Scheme scheme() const override { return Scheme::kFp16; }
  const WeightShape& shape() const override { return shape_; }
  int64_t device_bytes() const override { return 64; }

 private:
  WeightShape shape_{16, 16, 0};
  std::atomic<int>* destroyed_;
};

class ModelStoreTest : public ::testing::Test {
 protected:
  ModelStoreTest() : weights_(int64_t{1} << 20), models_(weights_) {}

  void Put(const std::string& name) {
    absl::StatusOr<WeightStore::Reservation> r = weights_.Reserve(name, 64);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(weights_
                    .Commit(*std::move(r), WeightDesc{Scheme::kFp16, {16, 16, 0}, 512},
                            std::make_unique<FakeWeight>(&destroyed_))
                    .ok());
  }

  // A model of Linear layers over `weights`.
  absl::StatusOr<std::shared_ptr<const StoredModel>> Create(
      const std::string& name, const std::vector<std::string>& weights) {
    v1::CreateModelRequest r;
    r.set_name(name);
    for (const std::string& w : weights) r.add_layers()->mutable_linear()->set_weight(w);
    absl::StatusOr<ModelSpec> spec = CheckModel(r, weights_);
    if (!spec.ok()) return spec.status();
    return models_.Add(std::make_shared<const StoredModel>(*std::move(spec)));
  }

  std::atomic<int> destroyed_{0};
  WeightStore weights_;
  ModelStore models_;
};

TEST_F(ModelStoreTest, AddGetListDelete) {
  Put("a");
  Put("b");
  ASSERT_TRUE(Create("m2", {"a", "b", "a"}).ok());
  ASSERT_TRUE(Create("m1", {"b"}).ok());
  EXPECT_EQ(models_.size(), 2);
  absl::StatusOr<std::shared_ptr<const StoredModel>> got = models_.Get("m2");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)->spec().layers.size(), 3u);
  const std::vector<std::shared_ptr<const StoredModel>> all = models_.List();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0]->name(), "m1");
  EXPECT_EQ(all[1]->name(), "m2");
  EXPECT_EQ(models_.ModelsUsing("b"), (std::vector<std::string>{"m1", "m2"}));
  EXPECT_EQ(models_.ModelsUsing("a"), (std::vector<std::string>{"m2"}));

  EXPECT_EQ(Create("m1", {"a"}).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(models_.Delete("m1").ok());
  EXPECT_EQ(models_.Delete("m1").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(models_.Get("m1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(models_.ModelsUsing("b"), (std::vector<std::string>{"m2"}));
  // The name is free again.
  EXPECT_TRUE(Create("m1", {"a"}).ok());
}

TEST_F(ModelStoreTest, WeightInUseCannotBeDeleted) {
  Put("a");
  Put("b");
  Put("free");
  ASSERT_TRUE(Create("m1", {"a"}).ok());
  ASSERT_TRUE(Create("m2", {"a", "b"}).ok());
  absl::Status s = models_.DeleteWeight("a");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "weight \"a\" is used by models \"m1\", \"m2\"; delete them first");
  s = models_.DeleteWeight("b");
  EXPECT_EQ(s.message(), "weight \"b\" is used by model \"m2\"; delete it first");
  EXPECT_TRUE(weights_.Get("a").ok());

  EXPECT_TRUE(models_.DeleteWeight("free").ok());
  EXPECT_EQ(models_.DeleteWeight("free").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(models_.DeleteWeight("never").code(), absl::StatusCode::kNotFound);

  ASSERT_TRUE(models_.Delete("m2").ok());
  EXPECT_TRUE(models_.DeleteWeight("b").ok());
  EXPECT_EQ(models_.DeleteWeight("a").code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(models_.Delete("m1").ok());
  EXPECT_TRUE(models_.DeleteWeight("a").ok());
  EXPECT_EQ(destroyed_.load(), 3);
}

TEST_F(ModelStoreTest, InFlightModelKeepsItsWeightsAlive) {
  Put("a");
  absl::StatusOr<std::shared_ptr<const StoredModel>> held = Create("m", {"a"});
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(models_.Delete("m").ok());
  ASSERT_TRUE(models_.DeleteWeight("a").ok());
  EXPECT_EQ(destroyed_.load(), 0);  // a request still holds the model
  held->reset();
  EXPECT_EQ(destroyed_.load(), 1);
}

TEST_F(ModelStoreTest, WeightDeletedOrReplacedAfterCheckFailsAdd) {
  Put("a");
  v1::CreateModelRequest r;
  r.set_name("m");
  r.add_layers()->mutable_linear()->set_weight("a");
  absl::StatusOr<ModelSpec> spec = CheckModel(r, weights_);
  ASSERT_TRUE(spec.ok());
  // Deleted, then re-uploaded under the same name: a different weight.
  ASSERT_TRUE(models_.DeleteWeight("a").ok());
  Put("a");
  const absl::Status s = models_.Add(std::make_shared<const StoredModel>(*spec)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "weight \"a\" was deleted while model \"m\" was being created");
  EXPECT_EQ(models_.size(), 0);
  EXPECT_TRUE(models_.ModelsUsing("a").empty());
}

TEST_F(ModelStoreTest, CreateRacingDeleteWeightNeverLeavesAModelWithoutItsWeight) {
  for (int round = 0; round < 50; ++round) {
    const std::string w = absl::StrCat("w", round);
    Put(w);
    std::atomic<bool> created{false}, deleted{false};
    std::thread creator([&] { created = Create(absl::StrCat("m", round), {w}).ok(); });
    std::thread deleter([&] { deleted = models_.DeleteWeight(w).ok(); });
    creator.join();
    deleter.join();
    // Exactly one wins (a create that resolved the weight before the delete fails Add).
    EXPECT_NE(created.load(), deleted.load()) << round;
    if (created) {
      EXPECT_TRUE(weights_.Get(w).ok()) << round;
    }
  }
}

}  // namespace
}  // namespace qmm
