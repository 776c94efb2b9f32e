// The k largest values of a vocabulary-sized row, for a beam-sized k, as tf.math.top_k gives
// them (descending; among equal values the lower index first), from one pass over the row:
// TensorFlow's TopKV2 heaps every value, while here a block of kTopKBlock values whose maximum does
// not beat the k-th best so far is skipped after one vectorised maximum (almost every block
// after the first few).
#ifndef T2T_KERAS_KERNELS_NATIVE_ROW_TOP_K_H_
#define T2T_KERAS_KERNELS_NATIVE_ROW_TOP_K_H_

#include <cstdint>
#include <limits>

#include "rows.h"

namespace t2t_keras {

constexpr int64_t kTopKBlock = 64;  // 16 and 128 were slower (8000 columns, k = 8, Zen 4)

// The k best of one row so far, best first: a value enters after every kept value at least as
// large (so a lower index wins a tie, as the row is read in order).
class RowTopK {
 public:
  RowTopK(int64_t k, float* values, int32_t* indices) : k_(k), values_(values), indices_(indices) {}

  bool Full() const { return kept_ == k_; }
  float Threshold() const { return values_[k_ - 1]; }

  void Offer(float value, int32_t index) {
    if (Full() && !(value > Threshold())) return;
    int64_t at = Full() ? k_ - 1 : kept_++;
    while (at > 0 && value > values_[at - 1]) {
      values_[at] = values_[at - 1];
      indices_[at] = indices_[at - 1];
      --at;
    }
    values_[at] = value;
    indices_[at] = index;
  }

 private:
  const int64_t k_;
  float* values_;
  int32_t* indices_;
  int64_t kept_ = 0;
};

// Offers the `width` values value(i) of a row (float32) to `best`, block by block, and returns
// the row's maximum (-inf for a row of NaNs: the compare-select maximum passes over them).
template <typename RowValue>
float OfferRow(const RowValue& value, int64_t width, RowTopK* best) {
  float row_max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < width; i += kTopKBlock) {
    const int64_t end = width - i < kTopKBlock ? width : i + kTopKBlock;
    float block_max = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : block_max)
    for (int64_t j = i; j < end; ++j) {
      const float v = value(j);
      block_max = v > block_max ? v : block_max;  // std::max here kept the loop scalar
    }
    row_max = block_max > row_max ? block_max : row_max;
    if (best->Full() && !(block_max > best->Threshold())) continue;
    for (int64_t j = i; j < end; ++j) best->Offer(value(j), static_cast<int32_t>(j));
  }
  return row_max;
}

}  // namespace t2t_keras

#endif  // T2T_KERAS_KERNELS_NATIVE_ROW_TOP_K_H_
