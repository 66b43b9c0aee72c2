//===- ScatterTest.cpp - ScatterElements and ScatterND folded -------------===//
//
// Expected values worked out by hand from the ONNX spec's definitions, on
// data = arange(12).reshape(3, 4).
//
//===----------------------------------------------------------------------===//

#include "frontend/Error.h"
#include "tests/unit/frontend/FoldHarness.h"

#include <gtest/gtest.h>

#include <functional>
#include <numeric>

using namespace mt::onnx_import;

namespace {

class ScatterTest : public FoldHarness {
protected:
  Value *data() {
    std::vector<double> v(12);
    std::iota(v.begin(), v.end(), 0.0);
    return constant({3, 4}, v, DType::F32);
  }
  Value *scatter(const char *op, Value *indices, Value *updates,
                 int64_t axis = 0) {
    Node *n = g.newNode(op, std::string("/") + op, {data(), indices, updates},
                        nullptr);
    if (std::string(op) == "ScatterElements")
      n->setInt("axis", axis);
    return fold(n, 13);
  }
  static std::string error(const std::function<void()> &f) {
    try {
      f();
    } catch (const ImportError &e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(ScatterTest, ElementsLandAlongTheAxis) {
  // axis 1: out[i][idx[i][j]] = upd[i][j]; -1 is the last column.
  Value *cols =
      scatter("ScatterElements", constant({2, 2}, {3, 0, -1, 1}, DType::I64),
              constant({2, 2}, {100, 101, 102, 103}, DType::F32), 1);
  EXPECT_EQ(values(cols), (std::vector<double>{101, 1, 2, 100, 4, 103, 6, 102,
                                               8, 9, 10, 11}));
  // axis 0: out[idx[i][j]][j] = upd[i][j].
  Value *rows =
      scatter("ScatterElements", constant({1, 3}, {2, 0, 1}, DType::I64),
              constant({1, 3}, {100, 101, 102}, DType::F32), 0);
  EXPECT_EQ(values(rows),
            (std::vector<double>{0, 101, 2, 3, 4, 5, 102, 7, 100, 9, 10, 11}));
}

TEST_F(ScatterTest, NDWritesRowsOrElements) {
  // Tuples of one coordinate replace rows 2 and 0.
  Value *rows = scatter(
      "ScatterND", constant({2, 1}, {2, 0}, DType::I64),
      constant({2, 4}, {20, 21, 22, 23, 0.5, 1.5, 2.5, 3.5}, DType::F32));
  EXPECT_EQ(values(rows), (std::vector<double>{0.5, 1.5, 2.5, 3.5, 4, 5, 6, 7,
                                               20, 21, 22, 23}));
  // Full tuples replace elements [1, 2] and [-1, 0] = [2, 0].
  Value *points =
      scatter("ScatterND", constant({2, 2}, {1, 2, -1, 0}, DType::I64),
              constant({2}, {-1, -2}, DType::F32));
  EXPECT_EQ(values(points),
            (std::vector<double>{0, 1, 2, 3, 4, 5, -1, 7, -2, 9, 10, 11}));
}

TEST_F(ScatterTest, IndicesOutOfRangeAreErrors) {
  EXPECT_NE(error([&] {
              scatter("ScatterElements", constant({1, 1}, {4}, DType::I64),
                      constant({1, 1}, {1}, DType::F32), 1);
            }).find("index 4 is out of range for axis 1 of size 4"),
            std::string::npos);
  EXPECT_NE(error([&] {
              scatter("ScatterND", constant({1, 1}, {-4}, DType::I64),
                      constant({1, 4}, {1, 1, 1, 1}, DType::F32));
            }).find("index -4 is out of range for dim 0 of size 3"),
            std::string::npos);
}

} // namespace
