// The k largest values of a vocabulary-sized row, for a beam-sized k, as tf.math.top_k gives
// them (descending; among equal values the lower index first), from one pass over the row:
// TensorFlow's TopKV2 heaps every value, while here a block of kTopKBlock values whose maximum does
// not beat the k-th best so far is skipped after one vectorised maximum (almost every block
// after the first few).
#ifndef T2T_KERAS_KERNELS_NATIVE_ROW_TOP_K_H_
#define T2T_KERAS_KERNELS_NATIVE_ROW_TOP_K_H_

#include <algorithm>
#include <cstdint>
#include <limits>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

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

// Bit j of the result: whether values[j] > threshold, for the n <= kTopKBlock values of a block.
inline uint64_t ValuesAbove(const float* values, int64_t n, float threshold) {
  uint64_t above = 0;
  int64_t j = 0;
#if defined(__AVX512F__)
  const __m512 limit = _mm512_set1_ps(threshold);
  for (; j + 16 <= n; j += 16) above |= uint64_t{_mm512_cmp_ps_mask(_mm512_loadu_ps(values + j), limit, _CMP_GT_OQ)} << j;
#elif defined(__AVX2__)
  const __m256 limit = _mm256_set1_ps(threshold);
  for (; j + 8 <= n; j += 8) {
    above |= uint64_t(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(values + j), limit, _CMP_GT_OQ))) << j;
  }
#endif
  for (; j < n; ++j) above |= uint64_t{values[j] > threshold} << j;
  return above;
}

// Offers the `width` values value(i) of a row (float32) to `best`, block by block, and returns
// the row's maximum (-inf for a row of NaNs: the compare-select maximum passes over them). Of a
// block that beats the k-th best so far, only the values above it are offered, in order (a
// scalar offer of each of its values was most of the pass: about a quarter of the blocks of
// 8000 random logits beat it).
template <typename RowValue>
float OfferRow(const RowValue& value, int64_t width, RowTopK* best) {
  float row_max = -std::numeric_limits<float>::infinity();
  float block[kTopKBlock];
  for (int64_t i = 0; i < width; i += kTopKBlock) {
    const int64_t n = std::min(width - i, kTopKBlock);
    float block_max = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : block_max)
    for (int64_t j = 0; j < n; ++j) {
      const float v = value(i + j);
      block_max = v > block_max ? v : block_max;  // std::max here kept the loop scalar
    }
    row_max = block_max > row_max ? block_max : row_max;
    if (best->Full() && !(block_max > best->Threshold())) continue;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) block[j] = value(i + j);
    if (!best->Full()) {
      for (int64_t j = 0; j < n; ++j) best->Offer(block[j], static_cast<int32_t>(i + j));
      continue;
    }
    for (uint64_t above = ValuesAbove(block, n, best->Threshold()); above != 0; above &= above - 1) {
      const int64_t j = __builtin_ctzll(above);
      best->Offer(block[j], static_cast<int32_t>(i + j));  // (the threshold may have risen meanwhile: Offer checks)
    }
  }
  return row_max;
}

}  // namespace t2t_keras

#endif  // T2T_KERAS_KERNELS_NATIVE_ROW_TOP_K_H_
