//===- MoeTest.cpp - the mixture of experts against float64 loops ---------===//
//
// The oracle is a naive float64 forward (softmax or sigmoid routing, the
// best groups of experts by sorting, top k, SwiGLU experts or gpt-oss's
// clamped ones with biases, in either layout, weighed on their outputs or
// inputs; Gemma 4's GeGLU experts with their trained scales, routed on a
// copy of the token of its own); the kernel's
// gradients are checked against its central differences, which see through
// the scaling, renormalization and softmax or sigmoid as long as no
// perturbation changes which experts a token chooses (the random values
// keep the k-th and (k+1)-th scores, and the groups' sums, apart).
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/Kernels.h"
#include "tests/unit/runtime/kernels/Reference.h"

#include <algorithm>

namespace mtrt::test {
namespace {

using namespace mtrt::cpu;

struct MoeShape {
  int64_t T, H, E, I, k;
  bool normalize, bias;
  bool sigmoid = false;
  int64_t groups = 1, top_groups = 1;
  float scale = 1.f;
  // gpt-oss's experts: stored x · W, g and u interleaved, clamped at
  // `limit` (low enough that the random values cross it), biases on the
  // router and both products.
  bool oss = false;
  float limit = 0.6f;
  // Llama 4: the weights scale the experts' inputs.
  bool weigh_inputs = false;
  // Gemma 4: GeGLU experts, each with a trained scale on its weight, and
  // a router that reads router_x.
  bool gemma4 = false;

  MoeRouting routing() const {
    MoeRouting r;
    r.sigmoid = sigmoid, r.normalize = normalize, r.groups = groups;
    r.top_groups = top_groups, r.scale = scale;
    r.weigh_inputs = weigh_inputs;
    return r;
  }
  MoeExperts experts() const {
    MoeExperts f;
    if (oss)
      f = {true, true, 1.702f, limit, 1.f};
    f.gelu = gemma4;
    return f;
  }
};

// The inputs' order: x, router, gate_up, down, then the selection bias,
// the router's, gate_up's and down's biases, the router's input and the
// experts' scales.
enum Input {
  kX,
  kRouter,
  kGateUp,
  kDown,
  kBias,
  kRouterBias,
  kGateUpBias,
  kDownBias,
  kRouterX,
  kExpertScale,
  kInputs
};

// The experts of the top_groups groups with the largest sums of their two
// best scores (stable: ties to the lower group).
std::vector<bool> competing(const MoeShape &s, const Doubles &score) {
  std::vector<bool> in(s.E, true);
  if (s.groups == 1)
    return in;
  const int64_t n = s.E / s.groups;
  Doubles sums(s.groups);
  for (int64_t g = 0; g < s.groups; ++g) {
    Doubles v(score.begin() + g * n, score.begin() + (g + 1) * n);
    std::sort(v.begin(), v.end(), std::greater<double>());
    sums[g] = v[0] + v[1];
  }
  std::vector<int64_t> order(s.groups);
  for (int64_t g = 0; g < s.groups; ++g)
    order[g] = g;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return sums[a] > sums[b]; });
  for (int64_t e = 0; e < s.E; ++e)
    in[e] = std::find(order.begin(), order.begin() + s.top_groups, e / n) !=
            order.begin() + s.top_groups;
  return in;
}

// inputs (Input): x [T, H], router [E, H], gate_up [E, 2I, H] (oss: [E,
// H, 2I], g and u interleaved), down [E, H, I] (oss: [E, I, H]), the
// selection bias [E] (read when s.bias), with oss the biases [E],
// [E, 2I] (interleaved) and [E, H], and with gemma4 router_x [T, H] and
// the experts' scales [E].
Doubles ref_moe(const MoeShape &s, const std::vector<Doubles> &in) {
  const Doubles &x = in[kX], &router = in[kRouter], &gate_up = in[kGateUp],
                &down = in[kDown];
  Doubles bias(s.E, 0.0);
  if (s.bias)
    bias = in[kBias];
  const int64_t H = s.H, I = s.I;
  // Expert e's weight of gate unit i (up: I + i) on input h, of output h on
  // unit i, and the biases.
  auto G = [&](int64_t e, int64_t r, int64_t h) {
    if (!s.oss)
      return gate_up[(e * 2 * I + r) * H + h];
    const int64_t col = r < I ? 2 * r : 2 * (r - I) + 1;
    return gate_up[(e * H + h) * 2 * I + col];
  };
  auto D = [&](int64_t e, int64_t h, int64_t i) {
    return s.oss ? down[(e * I + i) * H + h] : down[(e * H + h) * I + i];
  };
  auto GB = [&](int64_t e, int64_t r) {
    if (!s.oss)
      return 0.0;
    return in[kGateUpBias][e * 2 * I + (r < I ? 2 * r : 2 * (r - I) + 1)];
  };
  Doubles y(s.T * s.H, 0.0);
  for (int64_t t = 0; t < s.T; ++t) {
    Doubles p(s.E);
    double m = -1e300, sum = 0;
    for (int64_t e = 0; e < s.E; ++e) {
      p[e] = s.oss ? in[kRouterBias][e] : 0.0;
      for (int64_t h = 0; h < s.H; ++h)
        p[e] +=
            router[e * s.H + h] * (s.gemma4 ? in[kRouterX] : x)[t * s.H + h];
      m = std::max(m, p[e]);
    }
    if (s.sigmoid) {
      for (double &v : p)
        v = 1 / (1 + std::exp(-v));
    } else {
      for (double &v : p)
        sum += v = std::exp(v - m);
      for (double &v : p)
        v /= sum;
    }
    Doubles score(s.E);
    for (int64_t e = 0; e < s.E; ++e)
      score[e] = p[e] + bias[e];
    const std::vector<bool> competes = competing(s, score);
    std::vector<int64_t> order;
    for (int64_t e = 0; e < s.E; ++e)
      if (competes[e])
        order.push_back(e);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return score[a] > score[b]; });
    double total = 0;
    for (int64_t j = 0; j < s.k; ++j)
      total += p[order[j]];
    for (int64_t j = 0; j < s.k; ++j) {
      const int64_t e = order[j];
      const double w = (s.normalize ? p[e] / total : p[e]) *
                       (s.gemma4 ? in[kExpertScale][e] : 1.0) * s.scale;
      // The expert sees w · x_t when weighed on its input.
      const double in_w = s.weigh_inputs ? w : 1.0;
      Doubles a(s.I);
      for (int64_t i = 0; i < s.I; ++i) {
        double g = GB(e, i), u = GB(e, I + i);
        for (int64_t h = 0; h < s.H; ++h) {
          g += G(e, i, h) * (in_w * x[t * s.H + h]);
          u += G(e, I + i, h) * (in_w * x[t * s.H + h]);
        }
        if (s.oss) { // gpt-oss's clamps, alpha and the up shift
          g = std::min(g, double(s.limit));
          u = std::clamp(u, -double(s.limit), double(s.limit));
          a[i] = g / (1 + std::exp(-1.702 * g)) * (u + 1);
        } else if (s.gemma4) {
          const double c = std::sqrt(2 / M_PI);
          a[i] = 0.5 * g * (1 + std::tanh(c * (g + 0.044715 * g * g * g))) * u;
        } else {
          a[i] = g / (1 + std::exp(-g)) * u;
        }
      }
      for (int64_t h = 0; h < s.H; ++h) {
        double o = s.oss ? in[kDownBias][e * H + h] : 0.0;
        for (int64_t i = 0; i < s.I; ++i)
          o += D(e, h, i) * a[i];
        y[t * s.H + h] += (s.weigh_inputs ? 1.0 : w) * o;
      }
    }
  }
  return y;
}

std::vector<Floats> random_inputs(const MoeShape &s, uint32_t seed) {
  return {random_floats(s.T * s.H, seed, -1.f, 1.f),
          random_floats(s.E * s.H, seed + 1, -1.f, 1.f),
          random_floats(s.E * 2 * s.I * s.H, seed + 2, -0.5f, 0.5f),
          random_floats(s.E * s.H * s.I, seed + 3, -0.5f, 0.5f),
          random_floats(s.E, seed + 4, -0.3f, 0.3f),
          random_floats(s.E, seed + 5, -0.3f, 0.3f),
          random_floats(s.E * 2 * s.I, seed + 6, -0.3f, 0.3f),
          random_floats(s.E * s.H, seed + 7, -0.3f, 0.3f),
          random_floats(s.T * s.H, seed + 8, -1.f, 1.f),
          random_floats(s.E, seed + 9, 0.5f, 1.5f)};
}

MoeWeights weights(const MoeShape &s, const std::vector<Floats> &in) {
  auto opt = [&](bool present, Input i) {
    return present ? in[i].data() : nullptr;
  };
  return {in[kRouter].data(),      in[kGateUp].data(),
          in[kDown].data(),        opt(s.bias, kBias),
          opt(s.oss, kRouterBias), opt(s.oss, kGateUpBias),
          opt(s.oss, kDownBias),   opt(s.gemma4, kExpertScale)};
}
const float *router_x(const MoeShape &s, const std::vector<Floats> &in) {
  return s.gemma4 ? in[kRouterX].data() : nullptr;
}

void forward(const MoeShape &s, const std::vector<Floats> &in, Floats &y) {
  moe_forward(y.data(), in[kX].data(), router_x(s, in), weights(s, in), s.T,
              s.H, s.E, s.I, s.k, s.routing(), s.experts());
}

// grads, by Input (none for the selection bias); a null entry is skipped.
void backward(const MoeShape &s, const std::vector<Floats> &in,
              const Floats &dy, std::vector<Floats> &g) {
  moe_backward(ptr(g[kX]), ptr(g[kRouterX]),
               {ptr(g[kRouter]), ptr(g[kGateUp]), ptr(g[kDown]),
                ptr(g[kRouterBias]), ptr(g[kGateUpBias]), ptr(g[kDownBias]),
                ptr(g[kExpertScale])},
               dy.data(), in[kX].data(), router_x(s, in), weights(s, in), s.T,
               s.H, s.E, s.I, s.k, s.routing(), s.experts());
}

// The inputs with gradients under s.
std::vector<size_t> trained(const MoeShape &s) {
  std::vector<size_t> t{kX, kRouter, kGateUp, kDown};
  if (s.oss)
    t.insert(t.end(), {kRouterBias, kGateUpBias, kDownBias});
  if (s.gemma4)
    t.insert(t.end(), {kRouterX, kExpertScale});
  return t;
}
std::vector<Floats> zero_grads(const MoeShape &s,
                               const std::vector<Floats> &in) {
  std::vector<Floats> g(kInputs);
  for (size_t a : trained(s))
    g[a].assign(in[a].size(), 0.f);
  return g;
}

const MoeShape kShapes[] = {
    {6, 8, 4, 5, 2, true, false},  // Mixtral, Qwen3-MoE
    {7, 8, 5, 3, 2, false, false}, // OLMoE: the probabilities as they are
    {5, 6, 3, 4, 1, true, false},  // one expert per token: its weight is 1
    {4, 6, 4, 3, 4, false, false}, // every expert
    {8, 8, 6, 4, 2, true, true},   // ERNIE 4.5: chosen by p + bias
    // GLM-4.5: sigmoid scores chosen by p + bias, renormalized and scaled.
    {8, 8, 6, 4, 2, true, true, true, 1, 1, 2.5f},
    // DeepSeek V3: the same within the best 2 of 4 groups of 2 experts.
    {8, 8, 8, 3, 3, true, true, true, 4, 2, 2.5f},
    // Sigmoid weights as they are, one of 3 groups; softmax in groups.
    {7, 8, 6, 3, 2, false, false, true, 3, 1, 1.f},
    {8, 8, 8, 3, 2, true, false, false, 2, 1, 1.5f},
    // gpt-oss: top k of the logits (plus the router's bias), softmax over
    // them; clamped experts with biases, stored x · W, g and u interleaved.
    {7, 8, 6, 3, 2, true, false, false, 1, 1, 1.f, true},
    // Llama 4: the sigmoid of the one chosen logit scales the expert's
    // input; and two experts' renormalized softmax weights on their inputs.
    {8, 8, 4, 3, 1, false, false, true, 1, 1, 1.f, false, 0.6f, true},
    {7, 8, 5, 3, 2, true, false, false, 1, 1, 1.f, false, 0.6f, true},
    // Gemma 4: renormalized softmax weights times each expert's scale on
    // GeGLU experts, the router on its own input.
    {7, 8, 6, 4, 2, true, false, false, 1, 1, 1.f, false, 0.6f, false, true},
};

TEST(Moe, ForwardMatchesFloat64) {
  for (const MoeShape &s : kShapes) {
    const std::vector<Floats> in = random_inputs(s, 11);
    Floats y(s.T * s.H);
    forward(s, in, y);
    EXPECT_TRUE(close(y, ref_moe(s, widen(in)), 1e-5)) << "E=" << s.E;
  }
}

TEST(Moe, GradientsMatchCentralDifferencesOfFloat64) {
  for (const MoeShape &s : kShapes) {
    const std::vector<Floats> in = random_inputs(s, 21);
    const Floats dy = random_floats(s.T * s.H, 25);
    std::vector<Floats> g = zero_grads(s, in);
    backward(s, in, dy, g);
    std::vector<Doubles> at = widen(in);
    constexpr double h = 1e-6;
    for (size_t a : trained(s)) { // the selection bias gets no gradient
      Doubles fd(at[a].size());
      for (size_t e = 0; e < at[a].size(); ++e) {
        const double v = at[a][e];
        at[a][e] = v + h;
        const Doubles up = ref_moe(s, at);
        at[a][e] = v - h;
        const Doubles down = ref_moe(s, at);
        at[a][e] = v;
        double d = 0;
        for (size_t i = 0; i < up.size(); ++i)
          d += dy[i] * (up[i] - down[i]) / (2 * h);
        fd[e] = d;
      }
      EXPECT_TRUE(close(g[a], fd, 1e-4)) << "E=" << s.E << " input " << a;
    }
  }
}

TEST(Moe, BackwardAccumulatesSkipsNullAndIsDeterministic) {
  for (MoeShape s : {kShapes[4], kShapes[9], kShapes[12]}) {
    s.bias = true; // with every param at once
    const std::vector<Floats> in = random_inputs(s, 31);
    const Floats dy = random_floats(s.T * s.H, 35);
    std::vector<Floats> g = zero_grads(s, in);
    std::vector<Floats *> each;
    for (size_t a : trained(s))
      each.push_back(&g[a]);
    expect_accumulates(each, [&] { backward(s, in, dy, g); });

    std::vector<Floats> full = zero_grads(s, in), again = zero_grads(s, in);
    backward(s, in, dy, full);
    backward(s, in, dy, again);
    for (size_t a : trained(s)) {
      EXPECT_TRUE(bitwise_equal(full[a], again[a])) << "input " << a;
      std::vector<Floats> only(kInputs);
      only[a].assign(in[a].size(), 0.f);
      backward(s, in, dy, only);
      EXPECT_TRUE(bitwise_equal(only[a], full[a])) << "input " << a;
    }
  }
}

} // namespace
} // namespace mtrt::test
