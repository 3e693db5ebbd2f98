// Instantiates captured CUDA graphs on a helper thread (GpuExecutorOptions::graphs_in_background).
//
// Capturing a forward pass only records its launches; instantiating the few hundred nodes takes
// milliseconds of host time, during which, on the step thread, the GPU would sit idle and every
// stream in the batch would wait. Here the step thread records such a pass and hands the graph
// over; the helper instantiates it while the steps go on, and the step thread picks it up
// (take_ready) for the next pass of that shape. Not uploaded here (cudaGraphUpload): uploaded
// on another stream than the one it is launched on, every replay ran ~4 % slower (H100, decode
// steps of 32 rows, 2.51 against 2.42 ms); its first launch uploads it instead.
#pragma once
#include <cuda_runtime.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace rz::gpu {

class GraphBuilder {
 public:
  struct Built {
    uint64_t ticket = 0;
    cudaGraphExec_t exec = nullptr;  // null when instantiating failed (error says why)
    double instantiate_ms = 0;       // cudaGraphInstantiate
    std::string error;
  };

  // The helper thread works on `device`.
  explicit GraphBuilder(int device);
  // Waits for the graph in hand, destroys the ones not taken.
  ~GraphBuilder();
  GraphBuilder(const GraphBuilder&) = delete;
  GraphBuilder& operator=(const GraphBuilder&) = delete;

  // Takes `graph` (destroyed once instantiated) to instantiate under `ticket`.
  void submit(uint64_t ticket, cudaGraph_t graph);
  // The graphs built since the last call; the caller owns their execs.
  std::vector<Built> take_ready();
  // Blocks until every submitted graph is built (tests, benchmarks).
  void wait_idle();

 private:
  void run();

  int device_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::pair<uint64_t, cudaGraph_t>> todo_;
  std::vector<Built> ready_;
  bool busy_ = false, stop_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace rz::gpu
