// RAII device memory (cudaMalloc / cudaFree) with checked copies. Plain allocations only: never
// managed memory (see the GPU machine notes in docs).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "gpu/cuda_check.hpp"

namespace rz::gpu {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n) RZ_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)));
  }
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (p_) cudaFree(p_);
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

  void upload(const T* src, size_t n, cudaStream_t s = nullptr) {
    RZ_CUDA_CHECK(cudaMemcpyAsync(p_, src, n * sizeof(T), cudaMemcpyHostToDevice, s));
  }
  void upload(const std::vector<T>& v, cudaStream_t s = nullptr) { upload(v.data(), v.size(), s); }
  std::vector<T> download(cudaStream_t s = nullptr) const {
    std::vector<T> out(n_);
    RZ_CUDA_CHECK(cudaMemcpyAsync(out.data(), p_, bytes(), cudaMemcpyDeviceToHost, s));
    RZ_CUDA_CHECK(cudaStreamSynchronize(s));
    return out;
  }
  // Fills every byte with `byte` (tests poison outputs before a kernel runs).
  void fill_bytes(int byte, cudaStream_t s = nullptr) {
    RZ_CUDA_CHECK(cudaMemsetAsync(p_, byte, bytes(), s));
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace rz::gpu
