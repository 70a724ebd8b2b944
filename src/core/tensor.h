// Tensors on the CPU: a read-only typed view into bytes someone else owns (a checkpoint mmap), and an
// owned float32 buffer with a shape (the CPU backend's working type).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace dsv4 {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3]"

// A typed view of bytes owned elsewhere. `data` points at element 0; row-major, contiguous.
struct TensorView {
  DType dtype = DType::F32;
  Shape shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const { return dsv4::numel(shape); }
  int64_t dim(int i) const { return shape.at(size_t(i < 0 ? int(shape.size()) + i : i)); }
};

// An owned, contiguous, row-major float32 tensor.
struct Tensor {
  Shape shape;
  std::vector<float> data;

  Tensor() = default;
  explicit Tensor(Shape s, float fill = 0.0f) : shape(std::move(s)), data(size_t(dsv4::numel(shape)), fill) {}

  int64_t numel() const { return int64_t(data.size()); }
  int64_t dim(int i) const { return shape.at(size_t(i < 0 ? int(shape.size()) + i : i)); }
  float* ptr() { return data.data(); }
  const float* ptr() const { return data.data(); }
  // Row r of a tensor viewed as [rows, last-dim].
  float* row(int64_t r) { return data.data() + r * shape.back(); }
  const float* row(int64_t r) const { return data.data() + r * shape.back(); }
};

// Decodes any view (float, integer or packed FP4 codes) to float32 element by element, no scaling.
Tensor to_tensor(const TensorView& v);

}  // namespace dsv4
