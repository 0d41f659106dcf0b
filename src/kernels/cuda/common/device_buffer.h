// DeviceBuffer: an owning cudaMalloc allocation (RAII, move-only). Plain device memory, never
// managed memory (the device machines can hang on oversubscribed managed memory).
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cuda/common/cuda_check.h"

namespace fp4moe {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) FP4MOE_CUDA_CHECK(cudaMalloc(&data_, bytes_));
  }
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      if (data_) cudaFree(data_);
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return data_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  size_t bytes() const { return bytes_; }

  // Synchronous helpers for set-up and tests (not for the hot path).
  static DeviceBuffer from_host(const void* host, size_t bytes) {
    DeviceBuffer buffer(bytes);
    if (bytes > 0) FP4MOE_CUDA_CHECK(cudaMemcpy(buffer.get(), host, bytes, cudaMemcpyHostToDevice));
    return buffer;
  }
  template <typename T>
  static DeviceBuffer from_host(const std::vector<T>& host) {
    return from_host(host.data(), host.size() * sizeof(T));
  }
  template <typename T>
  std::vector<T> to_host() const {
    std::vector<T> host(bytes_ / sizeof(T));
    if (!host.empty()) FP4MOE_CUDA_CHECK(cudaMemcpy(host.data(), data_, host.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace fp4moe
