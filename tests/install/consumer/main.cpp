// Links against an installed wick and uses the tensor runtime; prints the result for the test.
#include <wick/runtime/tensor.h>

#include <cstdio>

int main() {
  wick::Tensor x = wick::Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  std::vector<float> t = x.transpose(0, 1).to(wick::DType::BF16).to_vector<float>();
  std::printf("consumer: %s -> %g %g %g %g %g %g\n", x.describe().c_str(), t[0], t[1], t[2], t[3], t[4], t[5]);
  return t[1] == 4.0f ? 0 : 1;
}
