//===- GatherNDTest.cpp - GatherND's shape inference and folding ----------===//
//
// Expected values picked by hand from data = arange(24).reshape(2, 3, 4),
// per the ONNX spec.
//
//===----------------------------------------------------------------------===//

#include "frontend/Error.h"
#include "tests/unit/frontend/FoldHarness.h"

#include <gtest/gtest.h>

#include <numeric>

using namespace mt::onnx_import;

namespace {

class GatherNDTest : public FoldHarness {
protected:
  Value *data() {
    std::vector<double> v(24);
    std::iota(v.begin(), v.end(), 0.0);
    return constant({2, 3, 4}, v, DType::F32);
  }
  /// GatherND folded; its output.
  Value *gather(Value *indices, int64_t batchDims = 0) {
    Node *n = g.newNode("GatherND", "/GatherND", {data(), indices}, nullptr);
    n->setInt("batch_dims", batchDims);
    return fold(n, 17);
  }
};

TEST_F(GatherNDTest, TuplesPickRowsOrElements) {
  Value *rows = gather(constant({2, 2}, {0, 1, 1, 2}, DType::I64));
  EXPECT_EQ(rows->shape, (Shape{2, 4}));
  EXPECT_EQ(values(rows), (std::vector<double>{4, 5, 6, 7, 20, 21, 22, 23}));
  // Full tuples, one negative: x[0, 1, 3] and x[1, 2, 3].
  Value *points = gather(constant({2, 1, 3}, {0, 1, 3, 1, 2, -1}, DType::I64));
  EXPECT_EQ(points->shape, (Shape{2, 1}));
  EXPECT_EQ(values(points), (std::vector<double>{7, 23}));
}

TEST_F(GatherNDTest, BatchDimsAreShared) {
  Value *rows = gather(constant({2, 1}, {1, 2}, DType::I64), 1);
  EXPECT_EQ(rows->shape, (Shape{2, 4}));
  EXPECT_EQ(values(rows), (std::vector<double>{4, 5, 6, 7, 20, 21, 22, 23}));
}

TEST_F(GatherNDTest, BadIndicesAreErrors) {
  auto error = [&](Value *indices, int64_t batchDims) -> std::string {
    try {
      gather(indices, batchDims);
    } catch (const ImportError &e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error(constant({1, 2}, {2, 0}, DType::I64), 0)
                .find("index 2 is out of range for dim 0 of size 2"),
            std::string::npos);
  EXPECT_NE(error(constant({1, 4}, {0, 0, 0, 0}, DType::I64), 0)
                .find("index tuples of 4 entries do not fit data [2,3,4]"),
            std::string::npos);
  EXPECT_NE(error(constant({3, 1}, {0, 0, 0}, DType::I64), 1)
                .find("differ in batch dim 0"),
            std::string::npos);
}

} // namespace
