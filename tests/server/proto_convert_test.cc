#include "server/proto_convert.h"

#include <gtest/gtest.h>

namespace qmm {
namespace {

TEST(ProtoConvertTest, DTypesRoundTrip) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_EQ(DTypeFromProto(DTypeToProto(d)), d);
  }
  EXPECT_EQ(DTypeToProto(DType::kF32), v1::DTYPE_FP32);
  EXPECT_EQ(DTypeToProto(DType::kF16), v1::DTYPE_FP16);
  EXPECT_EQ(DTypeToProto(DType::kBF16), v1::DTYPE_BF16);
}

TEST(ProtoConvertTest, UnspecifiedAndUnknownDTypesAreRejected) {
  EXPECT_FALSE(DTypeFromProto(v1::DTYPE_UNSPECIFIED).has_value());
  EXPECT_FALSE(DTypeFromProto(static_cast<v1::DType>(4)).has_value());
  EXPECT_FALSE(DTypeFromProto(static_cast<v1::DType>(-1)).has_value());
}

TEST(ProtoConvertTest, SchemesRoundTrip) {
  for (Scheme s : kAllSchemes) EXPECT_EQ(SchemeFromProto(SchemeToProto(s)), s);
  EXPECT_EQ(SchemeToProto(Scheme::kW2A8), v1::SCHEME_W2A8);
  EXPECT_EQ(SchemeToProto(Scheme::kW4A16), v1::SCHEME_W4A16);
  EXPECT_FALSE(SchemeFromProto(v1::SCHEME_UNSPECIFIED).has_value());
  EXPECT_FALSE(SchemeFromProto(static_cast<v1::Scheme>(6)).has_value());
}

class SizedWeight : public BackendWeight {
 public:
  Scheme scheme() const override { return Scheme::kW4A16; }
  const WeightShape& shape() const override { return shape_; }
  int64_t device_bytes() const override { return 12345; }

 private:
  WeightShape shape_{16, 256, 128};
};

TEST(ProtoConvertTest, FillWeightInfoCopiesEveryField) {
  const WeightDesc desc{Scheme::kW4A16, WeightShape{16, 256, 128}, 2112};
  StoredWeight weight("a/b", desc, std::make_unique<SizedWeight>(),
                      std::make_shared<MemoryBudget>(0), 0);
  v1::WeightInfo info;
  FillWeightInfo(weight, &info);
  EXPECT_EQ(info.name(), "a/b");
  EXPECT_EQ(info.n(), 16);
  EXPECT_EQ(info.k(), 256);
  EXPECT_EQ(info.scheme(), v1::SCHEME_W4A16);
  EXPECT_EQ(info.group_size(), 128);
  EXPECT_EQ(info.device_bytes(), 12345);
  EXPECT_EQ(info.packed_bytes(), 2112);
}

}  // namespace
}  // namespace qmm
