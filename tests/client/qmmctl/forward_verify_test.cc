#include "client/qmmctl/forward_verify.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "client/qmmctl/verify.h"
#include "client/random_data.h"
#include "kernels/layers_reference.h"

namespace qmm::ctl {
namespace {

v1::ModelInfo LinearModel(const std::string& weight) {
  v1::ModelInfo m;
  m.set_name("m");
  m.add_layers()->mutable_linear()->set_weight(weight);
  m.add_weights(weight);
  return m;
}

TEST(ForwardVerifyTest, OneLinearLayerIsTheMatMulReference) {
  const std::map<std::string, RandomWeight, std::less<>> weights = {
      {"w", {Scheme::kW4A16, {40, 256, 128}, 9}}};
  const std::vector<float> x = RandomActivationValues(3, 256, 4);
  absl::StatusOr<std::vector<double>> got =
      ReferenceForRandomModel(LinearModel("w"), weights, {}, x, 3);
  ASSERT_TRUE(got.ok()) << got.status();
  absl::StatusOr<std::vector<double>> want =
      ReferenceForRandomWeight(Scheme::kW4A16, {40, 256, 128}, 9, x, 3);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(*got, *want);
}

TEST(ForwardVerifyTest, ComposesEveryLayerKind) {
  // embedding -> DyT -> linear(bias) -> GELU -> residual(1)
  v1::ModelInfo m;
  m.set_name("m");
  m.add_layers()->mutable_embedding()->set_weight("tok");
  v1::DyTLayer* dyt = m.add_layers()->mutable_dyt();
  dyt->set_alpha(0.5f);
  for (int i = 0; i < 64; ++i) dyt->add_gamma(1.0f + 0.01f * i);
  v1::LinearLayer* linear = m.add_layers()->mutable_linear();
  linear->set_weight("w");
  for (int i = 0; i < 64; ++i) linear->add_bias(0.1f);
  m.add_layers()->mutable_activation()->set_kind(v1::ACTIVATION_GELU_TANH);
  m.add_layers()->mutable_residual()->set_block_start(1);
  const std::map<std::string, RandomWeight, std::less<>> weights = {
      {"tok", {Scheme::kFp16, {30, 64, 0}, 1}}, {"w", {Scheme::kW8A16, {64, 64, 0}, 2}}};
  const std::vector<int32_t> ids = {3, 29};
  absl::StatusOr<std::vector<double>> got = ReferenceForRandomModel(m, weights, ids, {}, 2);
  ASSERT_TRUE(got.ok()) << got.status();

  // By hand from the single-layer references.
  absl::StatusOr<std::vector<uint8_t>> tok = PackRandomWeight(Scheme::kFp16, {30, 64, 0}, 1);
  absl::StatusOr<std::vector<uint8_t>> w = PackRandomWeight(Scheme::kW8A16, {64, 64, 0}, 2);
  ASSERT_TRUE(tok.ok() && w.ok());
  const std::vector<double> e =
      ReferenceEmbedding(PackedWeight{Scheme::kFp16, {30, 64, 0}, *tok}, ids);
  const std::vector<float> gamma(dyt->gamma().begin(), dyt->gamma().end());
  const std::vector<double> d = ReferenceDyT(e, 64, 0.5, gamma, {});
  const std::vector<float> bias(64, 0.1f);
  const std::vector<double> h = ReferenceBiasActivation(
      Activation::kGeluTanh,
      ReferenceBiasActivation(Activation::kIdentity,
                              ReferenceLinear(PackedWeight{Scheme::kW8A16, {64, 64, 0}, *w}, d, 2),
                              64, bias),
      64, {});
  EXPECT_EQ(*got, ReferenceAdd(h, e));  // the block starts at layer 1: its input is e
}

TEST(ForwardVerifyTest, AMissingSeedIsNamed) {
  const absl::Status s = ReferenceForRandomModel(LinearModel("w"), {}, {}, {}, 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "weight \"w\" of model \"m\" has no seed in --verify_seeds");
}

TEST(ForwardVerifyTest, Tolerances) {
  EXPECT_DOUBLE_EQ(ForwardTolerance(false, false, DType::kF32, "cpu"), 1e-4);
  EXPECT_DOUBLE_EQ(ForwardTolerance(true, false, DType::kF32, "cpu"), 1e-4 + 5e-3);
  EXPECT_DOUBLE_EQ(ForwardTolerance(false, false, DType::kF16, "cuda"), 1e-2 + 0x1p-10);
  EXPECT_DOUBLE_EQ(ForwardTolerance(false, true, DType::kBF16, "cuda"), 4e-2 + 0x1p-7);
}

}  // namespace
}  // namespace qmm::ctl
