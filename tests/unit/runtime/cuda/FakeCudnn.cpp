//===- FakeCudnn.cpp - a cuDNN that answers as a test tells it -----------===//
//
// The entry points runtime/cuda/CudnnAttention.cpp loads, built as a shared
// library that $MEGATRAIN_CUDNN names, so that what the runtime does with
// cuDNN's answers (an engine, a graph refused, every plan refused, an error)
// is tested on machines without a GPU. Each operation graph finalized takes
// the next answer the test queued (fake_cudnn_answer), an engine when none
// is queued; nothing runs (cudnnBackendExecute fails, saying whether the
// plan's engine configuration was still alive and whether the call bound
// exactly the graph's tensors that are not virtual, as cuDNN checks, and
// keeping the by-value scalars it was passed). The version it reports is
// the test's to set; the strides of each tensor it was given are kept.
//
//===----------------------------------------------------------------------===//

#include <cudnn_graph.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

struct Descriptor {
  cudnnBackendDescriptorType_t type;
  std::vector<const Descriptor *> refs; // descriptors set into this one
  std::vector<int64_t> uids;            // a variant pack's
  std::vector<void *> pointers;
  int64_t uid = 0; // a tensor's
  bool is_virtual = false;
  std::vector<int64_t> strides; // a tensor's
};

std::set<const Descriptor *> alive;
size_t version = CUDNN_VERSION;
std::set<int64_t> by_value;       // unique ids of tensors passed by value
std::map<int64_t, float> scalars; // the last execution's, by unique id
// The strides of the last tensor finalized with each unique id.
std::map<int64_t, std::vector<int64_t>> strides_of;

/// 'e': an engine; 'g': the graph refused; 'p': engines offered, every plan
/// refused; 'x': the graph's next descriptor fails to be made.
std::deque<char> answers;
char current = 'e';
int graphs = 0;
std::string last_word;

cudnnStatus_t refuse(const char *word) {
  last_word = word;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

/// The unique ids of the tensors, not virtual, that `d` reaches.
void bound_tensors(const Descriptor *d, std::set<const Descriptor *> &seen,
                   std::set<int64_t> &uids) {
  if (!alive.count(d) || !seen.insert(d).second)
    return;
  if (d->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR && !d->is_virtual)
    uids.insert(d->uid);
  for (const Descriptor *r : d->refs)
    bound_tensors(r, seen, uids);
}

} // namespace

extern "C" {

/// Queues the answer to the next operation graph finalized.
void fake_cudnn_answer(char answer) { answers.push_back(answer); }
/// Operation graphs finalized so far.
int fake_cudnn_graphs() { return graphs; }
/// The workspace every plan asks for.
int64_t fake_cudnn_workspace() { return int64_t(1) << 20; }

/// The version cudnnGetVersion reports from now on; 0: the headers'.
void fake_cudnn_version(size_t v) { version = v ? v : CUDNN_VERSION; }
/// The floats the last execution was passed by value, in the order of their
/// unique ids, up to `max` of them into `out`; how many there were.
int fake_cudnn_scalars(float *out, int max) {
  int n = 0;
  for (const auto &[uid, value] : scalars)
    if (n < max)
      out[n++] = value;
  return int(scalars.size());
}

/// The strides of the last tensor finalized with unique id `uid`, up to
/// `max` into `out`; how many it had (0: no such tensor).
int fake_cudnn_strides(int64_t uid, int64_t *out, int max) {
  const auto it = strides_of.find(uid);
  if (it == strides_of.end())
    return 0;
  for (int i = 0; i < max && i < int(it->second.size()); ++i)
    out[i] = it->second[size_t(i)];
  return int(it->second.size());
}

size_t cudnnGetVersion(void) { return version; }

const char *cudnnGetErrorString(cudnnStatus_t status) {
  return status == CUDNN_STATUS_SUCCESS ? "CUDNN_STATUS_SUCCESS"
                                        : "CUDNN_STATUS_NOT_SUPPORTED";
}

void cudnnGetLastErrorString(char *message, size_t max_size) {
  std::snprintf(message, max_size, "%s", last_word.c_str());
  last_word.clear();
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *handle) {
  *handle = reinterpret_cast<cudnnHandle_t>(&graphs);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t) { return CUDNN_STATUS_SUCCESS; }

cudnnStatus_t cudnnSetStream(cudnnHandle_t, cudaStream_t) {
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                           cudnnBackendDescriptor_t *d) {
  if (!answers.empty() && answers.front() == 'x') {
    answers.pop_front();
    return refuse("fake cuDNN: out of descriptors");
  }
  auto *made = new Descriptor{type, {}, {}, {}};
  alive.insert(made);
  *d = reinterpret_cast<cudnnBackendDescriptor_t>(made);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d) {
  alive.erase(reinterpret_cast<Descriptor *>(d));
  delete reinterpret_cast<Descriptor *>(d);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t d,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type,
                                       int64_t count, const void *values) {
  auto *self = reinterpret_cast<Descriptor *>(d);
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
    for (int64_t i = 0; i < count; ++i)
      self->refs.push_back(static_cast<const Descriptor *const *>(values)[i]);
  if (name == CUDNN_ATTR_TENSOR_UNIQUE_ID)
    self->uid = *static_cast<const int64_t *>(values);
  if (name == CUDNN_ATTR_TENSOR_STRIDES)
    self->strides.assign(static_cast<const int64_t *>(values),
                         static_cast<const int64_t *>(values) + count);
  if (name == CUDNN_ATTR_TENSOR_IS_VIRTUAL &&
      *static_cast<const bool *>(values))
    self->is_virtual = true;
  if (name == CUDNN_ATTR_TENSOR_IS_BY_VALUE &&
      *static_cast<const bool *>(values))
    by_value.insert(self->uid); // set after the id (CudnnAttention.cpp)
  if (name == CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS)
    self->uids.assign(static_cast<const int64_t *>(values),
                      static_cast<const int64_t *>(values) + count);
  if (name == CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)
    self->pointers.assign(static_cast<void *const *>(values),
                          static_cast<void *const *>(values) + count);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t d) {
  const auto *self = reinterpret_cast<Descriptor *>(d);
  switch (self->type) {
  case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
    strides_of[self->uid] = self->strides;
    return CUDNN_STATUS_SUCCESS;
  case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
    ++graphs;
    current = 'e';
    if (!answers.empty()) {
      current = answers.front();
      answers.pop_front();
    }
    return current == 'g' ? refuse("fake cuDNN: no engine for this graph")
                          : CUDNN_STATUS_SUCCESS;
  case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
    return current == 'p' ? refuse("fake cuDNN: this engine cannot run it")
                          : CUDNN_STATUS_SUCCESS;
  default:
    return CUDNN_STATUS_SUCCESS;
  }
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const d,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t, int64_t,
                                       int64_t *count, void *elements) {
  *count = 1; // one engine configuration; the caller made its descriptor
  if (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)
    *static_cast<int64_t *>(elements) = fake_cudnn_workspace();
  // The configuration is of the heuristic's operation graph: a plan made
  // of it reaches the graph's tensors.
  if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS && elements) {
    auto *config = *static_cast<Descriptor **>(elements);
    const auto *heur = reinterpret_cast<const Descriptor *>(d);
    config->refs.insert(config->refs.end(), heur->refs.begin(),
                        heur->refs.end());
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t, cudnnBackendDescriptor_t plan,
                                  cudnnBackendDescriptor_t pack) {
  for (const Descriptor *r : reinterpret_cast<Descriptor *>(plan)->refs)
    if (!alive.count(r))
      return refuse("fake cuDNN: the plan's engine configuration is gone");
  const auto *p = reinterpret_cast<Descriptor *>(pack);
  std::set<const Descriptor *> seen;
  std::set<int64_t> wanted;
  bound_tensors(reinterpret_cast<Descriptor *>(plan), seen, wanted);
  const std::set<int64_t> given(p->uids.begin(), p->uids.end());
  if (given != wanted || given.size() != p->uids.size()) {
    std::string word = "fake cuDNN: the graph's tensors are";
    for (int64_t uid : wanted)
      word += " " + std::to_string(uid);
    word += "; the call bound";
    for (int64_t uid : p->uids)
      word += " " + std::to_string(uid);
    refuse(word.c_str());
    return CUDNN_STATUS_BAD_PARAM;
  }
  scalars.clear(); // every by-value tensor is a float here
  for (size_t i = 0; i < p->uids.size() && i < p->pointers.size(); ++i)
    if (by_value.count(p->uids[i]))
      std::memcpy(&scalars[p->uids[i]], p->pointers[i], sizeof(float));
  last_word = "fake cuDNN: runs nothing";
  return CUDNN_STATUS_EXECUTION_FAILED;
}

} // extern "C"
