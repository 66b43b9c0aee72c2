//===- ElementwiseTest.cpp - broadcasting add and mul ---------------------===//

#include "runtime/kernels/Kernels.h"
#include "tests/unit/runtime/kernels/Reference.h"

namespace mtrt::test {
namespace {

using namespace mtrt::cpu;

using Shape = std::vector<int64_t>;

int64_t numel(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

Shape broadcast_shape(const Shape &a, const Shape &b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    const size_t from_end = out.size() - 1 - i;
    const int64_t da = from_end < a.size() ? a[a.size() - 1 - from_end] : 1;
    const int64_t db = from_end < b.size() ? b[b.size() - 1 - from_end] : 1;
    out[i] = std::max(da, db);
  }
  return out;
}

// The element of an operand (right-aligned, size-1 dims repeated) that
// output element `linear` reads.
int64_t operand_index(const Shape &operand, const Shape &out, int64_t linear) {
  int64_t index = 0, stride = 1;
  for (size_t k = 0; k < out.size(); ++k) {
    const size_t dim = out.size() - 1 - k;
    const int64_t coord = linear % out[dim];
    linear /= out[dim];
    if (k < operand.size()) {
      const int64_t size = operand[operand.size() - 1 - k];
      index += (size == 1 ? 0 : coord) * stride;
      stride *= size;
    }
  }
  return index;
}

struct Case {
  Shape lhs, rhs;
};

// Bias-like, [S, D] against [B, S, D], per-row scalars, scalar-like and
// rank-0 operands on either side, both operands broadcasting, same shapes.
const Case kCases[] = {
    {{2, 3, 4}, {4}},          {{2, 3, 4}, {3, 4}},    {{2, 3, 4}, {2, 3, 1}},
    {{2, 3, 4}, {1}},          {{2, 3, 4}, {}},        {{1}, {2, 3, 4}},
    {{2, 1, 4}, {3, 1}},       {{2, 3, 4}, {2, 3, 4}}, {{3, 1, 1}, {1, 1, 5}},
    {{2, 1, 3, 1}, {4, 1, 5}},
};

// inputs: a, b.
Doubles ref_forward(const std::vector<Doubles> &in, const Case &c, bool mul) {
  const Shape out = broadcast_shape(c.lhs, c.rhs);
  Doubles y(numel(out));
  for (int64_t o = 0; o < numel(out); ++o) {
    const double a = in[0][operand_index(c.lhs, out, o)];
    const double b = in[1][operand_index(c.rhs, out, o)];
    y[o] = mul ? a * b : a + b;
  }
  return y;
}

// Each output's derivative flows back to the one element of each operand it
// read: da += dy (· b), db += dy (· a).
std::vector<Doubles> ref_backward(const Doubles &dy,
                                  const std::vector<Doubles> &in, const Case &c,
                                  bool mul) {
  const Shape out = broadcast_shape(c.lhs, c.rhs);
  Doubles da(in[0].size()), db(in[1].size());
  for (int64_t o = 0; o < numel(out); ++o) {
    const int64_t ia = operand_index(c.lhs, out, o);
    const int64_t ib = operand_index(c.rhs, out, o);
    da[ia] += dy[o] * (mul ? in[1][ib] : 1);
    db[ib] += dy[o] * (mul ? in[0][ia] : 1);
  }
  return {da, db};
}

Broadcast describe(const Case &c) {
  Broadcast bc;
  EXPECT_TRUE(make_broadcast(bc, c.lhs.data(), int(c.lhs.size()), c.rhs.data(),
                             int(c.rhs.size())));
  return bc;
}

std::string name(const Case &c, bool mul) {
  std::string s = mul ? "mul [" : "add [";
  for (int64_t d : c.lhs)
    s += std::to_string(d) + " ";
  s += "] [";
  for (int64_t d : c.rhs)
    s += std::to_string(d) + " ";
  return s + "]";
}

TEST(Broadcast, DescribesShapesAndStrides) {
  const Shape lhs = {2, 1, 4}, rhs = {3, 1};
  Broadcast bc;
  ASSERT_TRUE(make_broadcast(bc, lhs.data(), 3, rhs.data(), 2));
  ASSERT_EQ(bc.rank, 3);
  EXPECT_EQ(Shape(bc.shape, bc.shape + 3), Shape({2, 3, 4}));
  EXPECT_EQ(Shape(bc.lhs_stride, bc.lhs_stride + 3), Shape({4, 0, 1}));
  EXPECT_EQ(Shape(bc.rhs_stride, bc.rhs_stride + 3), Shape({0, 1, 0}));

  const Shape bad = {3}, seven(7, 2);
  EXPECT_FALSE(make_broadcast(bc, lhs.data(), 3, bad.data(), 1));
  EXPECT_FALSE(make_broadcast(bc, seven.data(), 7, bad.data(), 0));

  ASSERT_TRUE(make_broadcast(bc, nullptr, 0, nullptr, 0));
  EXPECT_EQ(bc.rank, 0);
}

TEST(Broadcast, ReferenceBackwardMatchesFiniteDifferences) {
  for (const Case &c : kCases)
    for (bool mul : {false, true}) {
      const std::vector<Doubles> in = {widen(random_floats(numel(c.lhs), 81)),
                                       widen(random_floats(numel(c.rhs), 82))};
      const Doubles dy =
          widen(random_floats(numel(broadcast_shape(c.lhs, c.rhs)), 83));
      EXPECT_TRUE(matches_finite_differences(
          [&](const std::vector<Doubles> &x) { return ref_forward(x, c, mul); },
          in, dy, ref_backward(dy, in, c, mul)))
          << name(c, mul);
    }
}

void check_kernels(const Case &c, bool mul) {
  const Broadcast bc = describe(c);
  const std::vector<Floats> in = {random_floats(numel(c.lhs), 84),
                                  random_floats(numel(c.rhs), 85)};
  const int64_t n = numel(broadcast_shape(c.lhs, c.rhs));
  Floats y(n);
  (mul ? mul_forward : add_forward)(y.data(), in[0].data(), in[1].data(), bc);
  // One rounding per element.
  EXPECT_TRUE(close(y, ref_forward(widen(in), c, mul), 1e-7)) << name(c, mul);

  const Floats dy = random_floats(n, 86);
  const std::vector<Doubles> want = ref_backward(widen(dy), widen(in), c, mul);
  Floats da = random_floats(in[0].size(), 87),
         db = random_floats(in[1].size(), 88);
  const Floats da0 = da, db0 = db;
  if (mul)
    mul_backward(da.data(), db.data(), dy.data(), in[0].data(), in[1].data(),
                 bc);
  else
    add_backward(da.data(), db.data(), dy.data(), bc);
  // Reductions are summed in double and rounded once (plus the prior's add).
  EXPECT_TRUE(close(added(da, da0), want[0], 1e-6)) << name(c, mul);
  EXPECT_TRUE(close(added(db, db0), want[1], 1e-6)) << name(c, mul);
}

TEST(Broadcast, AddAndMulMatchReference) {
  for (const Case &c : kCases)
    for (bool mul : {false, true})
      check_kernels(c, mul);
}

// Large enough for several parallel chunks and reduction slices.
TEST(Broadcast, LargeShapesMatchReference) {
  const Case large[] = {
      {{4, 64, 300}, {300}},      {{4, 64, 300}, {64, 300}},
      {{4, 64, 300}, {4, 64, 1}}, {{4, 1, 300}, {1, 64, 1}},
      {{1}, {4, 64, 300}},        {{4, 64, 300}, {4, 64, 300}}};
  for (const Case &c : large)
    for (bool mul : {false, true})
      check_kernels(c, mul);
}

TEST(Broadcast, AccumulatesSkipsNullAndDeterministic) {
  const Case c = {{4, 64, 300}, {64, 1}};
  const Broadcast bc = describe(c);
  const Floats a = random_floats(numel(c.lhs), 89), b = random_floats(64, 90);
  const Floats dy = random_floats(numel(c.lhs), 91);
  const auto backward = [&](bool mul, float *da, float *db) {
    if (mul)
      mul_backward(da, db, dy.data(), a.data(), b.data(), bc);
    else
      add_backward(da, db, dy.data(), bc);
  };
  for (bool mul : {false, true}) {
    Floats da(a.size()), db(b.size());
    expect_accumulates({&da, &db},
                       [&] { backward(mul, da.data(), db.data()); });
    Floats fa(a.size()), fb(b.size()), ga(a.size()), gb(b.size());
    backward(mul, fa.data(), fb.data());
    backward(mul, ga.data(), gb.data());
    EXPECT_TRUE(bitwise_equal(fa, ga));
    EXPECT_TRUE(bitwise_equal(fb, gb));
    Floats only_a(a.size()), only_b(b.size());
    backward(mul, only_a.data(), nullptr);
    backward(mul, nullptr, only_b.data());
    EXPECT_TRUE(bitwise_equal(only_a, fa));
    EXPECT_TRUE(bitwise_equal(only_b, fb));
  }
}

} // namespace
} // namespace mtrt::test
