// The graph builder (gpu/graph_builder.hpp).
#include "gpu/graph_builder.hpp"

#include <chrono>

namespace rz::gpu {

GraphBuilder::GraphBuilder(int device) : device_(device), thread_([this] { run(); }) {}

GraphBuilder::~GraphBuilder() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& [ticket, g] : todo_) cudaGraphDestroy(g);
  for (Built& b : ready_)
    if (b.exec) cudaGraphExecDestroy(b.exec);
}

void GraphBuilder::submit(uint64_t ticket, cudaGraph_t graph) {
  {
    std::lock_guard lock(m_);
    todo_.emplace_back(ticket, graph);
  }
  cv_.notify_all();
}

std::vector<GraphBuilder::Built> GraphBuilder::take_ready() {
  std::lock_guard lock(m_);
  std::vector<Built> out;
  out.swap(ready_);
  return out;
}

void GraphBuilder::wait_idle() {
  std::unique_lock lock(m_);
  cv_.wait(lock, [&] { return todo_.empty() && !busy_; });
}

void GraphBuilder::run() {
  std::string setup_error;
  if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess)
    setup_error = std::string("cudaSetDevice: ") + cudaGetErrorString(e);
  std::unique_lock lock(m_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !todo_.empty(); });
    if (stop_) break;
    auto [ticket, graph] = todo_.front();
    todo_.pop_front();
    busy_ = true;
    lock.unlock();
    Built b;
    b.ticket = ticket;
    const auto t0 = std::chrono::steady_clock::now();
    if (!setup_error.empty()) {
      b.error = setup_error;
    } else if (cudaError_t e = cudaGraphInstantiate(&b.exec, graph, 0); e != cudaSuccess) {
      b.error = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(e);
      b.exec = nullptr;
    }
    cudaGraphDestroy(graph);
    b.instantiate_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    lock.lock();
    ready_.push_back(std::move(b));
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace rz::gpu
