//===- FakeCudnn.cpp - a cuDNN that answers as a test tells it -----------===//
//
// The entry points runtime/cuda/CudnnAttention.cpp loads, built as a shared
// library that $MEGATRAIN_CUDNN names, so that what the runtime does with
// cuDNN's answers (an engine, a graph refused, every plan refused, an error)
// is tested on machines without a GPU. Each operation graph finalized takes
// the next answer the test queued (fake_cudnn_answer), an engine when none
// is queued; nothing runs (cudnnBackendExecute fails).
//
//===----------------------------------------------------------------------===//

#include <cudnn_graph.h>

#include <cstdio>
#include <deque>
#include <string>

namespace {

struct Descriptor {
  cudnnBackendDescriptorType_t type;
};

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

} // namespace

extern "C" {

/// Queues the answer to the next operation graph finalized.
void fake_cudnn_answer(char answer) { answers.push_back(answer); }
/// Operation graphs finalized so far.
int fake_cudnn_graphs() { return graphs; }
/// The workspace every plan asks for.
int64_t fake_cudnn_workspace() { return int64_t(1) << 20; }

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

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
  *d = reinterpret_cast<cudnnBackendDescriptor_t>(new Descriptor{type});
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d) {
  delete reinterpret_cast<Descriptor *>(d);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t,
                                       cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t,
                                       const void *) {
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t d) {
  switch (reinterpret_cast<Descriptor *>(d)->type) {
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

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t, int64_t,
                                       int64_t *count, void *elements) {
  *count = 1; // one engine configuration; the caller made its descriptor
  if (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)
    *static_cast<int64_t *>(elements) = fake_cudnn_workspace();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t, cudnnBackendDescriptor_t,
                                  cudnnBackendDescriptor_t) {
  last_word = "fake cuDNN: runs nothing";
  return CUDNN_STATUS_EXECUTION_FAILED;
}

} // extern "C"
