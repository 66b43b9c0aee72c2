//===- LayoutTest.cpp - transpose and slice -------------------------------===//

#include "runtime/kernels/Kernels.h"
#include "tests/unit/runtime/kernels/Reference.h"

namespace mtrt::test {
namespace {

using namespace mtrt::cpu;

using Shape = std::vector<int64_t>;

struct Case {
  Shape x_shape, perm;
};

// Heads to the front ([B, S, H, D] → [B, H, S, D]), a matrix transpose, a
// rotation, the identity, unit dims, rank 1.
const Case kCases[] = {{{2, 3, 4, 5}, {0, 2, 1, 3}}, {{7, 9}, {1, 0}},
                       {{3, 4, 5}, {2, 0, 1}},       {{3, 4, 5}, {0, 1, 2}},
                       {{1, 4, 1, 3}, {3, 1, 2, 0}}, {{6}, {0}}};

int64_t numel(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

// y[i_0, ..., i_r] = x[j] with j's dim perm[k] set to i_k.
Doubles ref_transpose(const Doubles &x, const Case &c) {
  const int rank = int(c.x_shape.size());
  Shape y_shape(rank);
  for (int k = 0; k < rank; ++k)
    y_shape[k] = c.x_shape[c.perm[k]];
  Doubles y(x.size());
  for (int64_t o = 0; o < numel(y_shape); ++o) {
    Shape x_index(rank);
    for (int64_t k = rank - 1, rest = o; k >= 0; --k) {
      x_index[c.perm[k]] = rest % y_shape[k];
      rest /= y_shape[k];
    }
    int64_t j = 0;
    for (int d = 0; d < rank; ++d)
      j = j * c.x_shape[d] + x_index[d];
    y[o] = x[j];
  }
  return y;
}

TEST(Transpose, ForwardAndBackwardMatchReference) {
  for (const Case &c : kCases) {
    const int rank = int(c.x_shape.size());
    const Floats x = random_floats(numel(c.x_shape), 131);
    Floats y(x.size());
    transpose_forward(y.data(), x.data(), c.x_shape.data(), c.perm.data(),
                      rank);
    EXPECT_TRUE(close(y, ref_transpose(widen(x), c), 0.0)) << "rank " << rank;

    // A permutation's vector-Jacobian product: dx[j] = dy[o] where y[o]
    // read x[j]; central differences confirm the reference routes it right.
    const Floats dy = random_floats(x.size(), 132);
    Doubles want(x.size());
    {
      Doubles position(x.size());
      for (size_t j = 0; j < x.size(); ++j)
        position[j] = double(j);
      const Doubles source = ref_transpose(position, c);
      for (size_t o = 0; o < x.size(); ++o)
        want[size_t(source[o])] = dy[o];
    }
    EXPECT_TRUE(matches_finite_differences(
        [&](const std::vector<Doubles> &in) { return ref_transpose(in[0], c); },
        {widen(x)}, widen(dy), {want}));

    Floats dx = random_floats(x.size(), 133);
    const Floats dx0 = dx;
    transpose_backward(dx.data(), dy.data(), c.x_shape.data(), c.perm.data(),
                       rank);
    // Exact but for the add onto the prior: half an ulp of values below 2.
    EXPECT_TRUE(close(added(dx, dx0), want, 2e-7)) << "rank " << rank;
  }
}

TEST(Transpose, LargeAndAccumulates) {
  const Case c = {{3, 70, 8, 64}, {0, 2, 1, 3}}; // several parallel chunks
  const Floats x = random_floats(numel(c.x_shape), 134);
  Floats y(x.size());
  transpose_forward(y.data(), x.data(), c.x_shape.data(), c.perm.data(), 4);
  EXPECT_TRUE(close(y, ref_transpose(widen(x), c), 0.0));
  Floats dx(x.size());
  expect_accumulates({&dx}, [&] {
    transpose_backward(dx.data(), y.data(), c.x_shape.data(), c.perm.data(), 4);
  });
}

struct SliceCase {
  int64_t outer, dim, inner, start, n;
};

// y (outer, n, inner) = x (outer, dim, inner) [:, start : start + n, :]
Doubles ref_slice(const Doubles &x, const SliceCase &c) {
  Doubles y(c.outer * c.n * c.inner);
  for (int64_t o = 0; o < c.outer; ++o)
    for (int64_t i = 0; i < c.n; ++i)
      for (int64_t e = 0; e < c.inner; ++e)
        y[(o * c.n + i) * c.inner + e] =
            x[(o * c.dim + c.start + i) * c.inner + e];
  return y;
}

// dx takes dy where the slice read x and nothing elsewhere.
Doubles ref_slice_backward(const Doubles &dy, const SliceCase &c) {
  Doubles dx(c.outer * c.dim * c.inner);
  for (int64_t o = 0; o < c.outer; ++o)
    for (int64_t i = 0; i < c.n; ++i)
      for (int64_t e = 0; e < c.inner; ++e)
        dx[(o * c.dim + c.start + i) * c.inner + e] +=
            dy[(o * c.n + i) * c.inner + e];
  return dx;
}

// The middle third of a fused QKV's last dim, a leading-dim slice, a slice
// of an inner dim.
const SliceCase kSlices[] = {
    {2 * 5, 12, 1, 4, 4}, {1, 6, 8, 0, 2}, {3, 7, 5, 6, 1}};

TEST(Slice, ForwardAndBackwardMatchReference) {
  for (const SliceCase &c : kSlices) {
    const Floats x = random_floats(c.outer * c.dim * c.inner, 135);
    Floats y(c.outer * c.n * c.inner);
    slice_forward(y.data(), x.data(), c.outer, c.dim, c.inner, c.start, c.n);
    EXPECT_TRUE(close(y, ref_slice(widen(x), c), 0.0));

    const Floats dy = random_floats(y.size(), 136);
    const Doubles want = ref_slice_backward(widen(dy), c);
    EXPECT_TRUE(matches_finite_differences(
        [&](const std::vector<Doubles> &in) { return ref_slice(in[0], c); },
        {widen(x)}, widen(dy), {want}));

    Floats dx = random_floats(x.size(), 137);
    const Floats dx0 = dx;
    slice_backward(dx.data(), dy.data(), c.outer, c.dim, c.inner, c.start, c.n);
    // Exact but for the add onto the prior: half an ulp of values below 2.
    EXPECT_TRUE(close(added(dx, dx0), want, 2e-7));
    Floats acc(x.size());
    expect_accumulates({&acc}, [&] {
      slice_backward(acc.data(), dy.data(), c.outer, c.dim, c.inner, c.start,
                     c.n);
    });
  }
}

} // namespace
} // namespace mtrt::test
