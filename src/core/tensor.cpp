#include "core/tensor.h"

#include <sstream>

namespace dsv4 {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

Tensor to_tensor(const TensorView& v) {
  Tensor t(v.shape);
  to_f32(v.dtype, v.data, 0, size_t(t.numel()), t.ptr());
  return t;
}

}  // namespace dsv4
