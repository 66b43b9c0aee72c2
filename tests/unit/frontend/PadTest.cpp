//===- PadTest.cpp - Pad's shape inference and folding --------------------===//
//
// Expected values picked by hand from data = [[1, 2, 3], [4, 5, 6]], per the
// ONNX spec: pads are every padded axis's begins, then its ends; negative
// ones crop.
//
//===----------------------------------------------------------------------===//

#include "frontend/Error.h"
#include "tests/unit/frontend/FoldHarness.h"

using namespace mt::onnx_import;

namespace {

class PadTest : public FoldHarness {
protected:
  /// Pad of the 2 x 3 data, folded at `opset`; its output.
  Value *pad(std::vector<double> pads, Value *value = nullptr,
             Value *axes = nullptr, int64_t opset = 17,
             const char *mode = nullptr) {
    Value *data = constant({2, 3}, {1, 2, 3, 4, 5, 6}, DType::F32);
    Value *p = constant({int64_t(pads.size())}, pads, DType::I64);
    Node *n = g.newNode("Pad", "/Pad", {data, p, value, axes}, nullptr);
    if (mode)
      n->setString("mode", mode);
    return fold(n, opset);
  }
  std::string error(std::vector<double> pads, const char *mode = nullptr) {
    try {
      pad(std::move(pads), nullptr, nullptr, 17, mode);
    } catch (const ImportError &e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(PadTest, ZerosBeforeAndAfter) {
  // One zero row before; one zero column after.
  Value *y = pad({1, 0, 0, 1});
  EXPECT_EQ(y->shape, (Shape{3, 4}));
  EXPECT_EQ(values(y),
            (std::vector<double>{0, 0, 0, 0, 1, 2, 3, 0, 4, 5, 6, 0}));
}

TEST_F(PadTest, NegativePadsCrop) {
  // A shift down by one row: a zero row before, the last row cropped; the
  // first column cropped.
  Value *y = pad({1, -1, -1, 0});
  EXPECT_EQ(y->shape, (Shape{2, 2}));
  EXPECT_EQ(values(y), (std::vector<double>{0, 0, 2, 3}));
}

TEST_F(PadTest, ConstantValueAndAxes) {
  // Opset 18: pads for the last axis only, filled with 7.
  Value *y = pad({2, 0}, constant({}, {7}, DType::F32),
                 constant({1}, {-1}, DType::I64), 18);
  EXPECT_EQ(y->shape, (Shape{2, 5}));
  EXPECT_EQ(values(y), (std::vector<double>{7, 7, 1, 2, 3, 7, 7, 4, 5, 6}));
}

TEST_F(PadTest, BadPadsAreErrors) {
  EXPECT_NE(error({1, 0, 0}).find("pads has 3 values for 2 axes (needs 4)"),
            std::string::npos);
  EXPECT_NE(error({0, -2, 0, -2}).find("crop dim 1 of size 3 below nothing"),
            std::string::npos);
  EXPECT_NE(error({1, 0, 0, 0}, "reflect")
                .find("mode 'reflect' is not supported (only constant)"),
            std::string::npos);
}

} // namespace
