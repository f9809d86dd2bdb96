#include "server/proto_convert.h"

#include <gtest/gtest.h>

namespace qmm {
namespace {

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
