// What the native kernels share: bfloat16 <-> float32 conversions and an exponential the compiler
// vectorises, the thread pool's parallel loop, and parameter gradients summed over rows in a fixed order.
#ifndef T2T_KERAS_KERNELS_NATIVE_ROWS_H_
#define T2T_KERAS_KERNELS_NATIVE_ROWS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"

namespace t2t_keras {

// bfloat16 <-> float32 by bit operations the compiler vectorises; to bfloat16 rounds to
// nearest even and keeps NaNs quiet, as TensorFlow's Cast does.
inline float ToFloat(float value) { return value; }
inline float ToFloat(Eigen::bfloat16 value) {
  uint32_t bits = static_cast<uint32_t>(Eigen::numext::bit_cast<uint16_t>(value)) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}
inline uint32_t RoundedBfloat16Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  uint32_t quiet_nan = (bits >> 16) | 0x40u;
  bool is_nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return is_nan ? quiet_nan : rounded;
}
template <typename T> inline T FromFloat(float value);
template <> inline float FromFloat<float>(float value) { return value; }
template <> inline Eigen::bfloat16 FromFloat<Eigen::bfloat16>(float value) {
  return Eigen::numext::bit_cast<Eigen::bfloat16>(static_cast<uint16_t>(RoundedBfloat16Bits(value)));
}
// ToFloat(FromFloat<T>(value)) without a T in between (which keeps loops from vectorising).
template <typename T> inline float RoundedTo(float value);
template <> inline float RoundedTo<float>(float value) { return value; }
template <> inline float RoundedTo<Eigen::bfloat16>(float value) {
  const uint32_t bits = RoundedBfloat16Bits(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

// exp(x) for x <= 0 (a logit minus its row's maximum) in float32 arithmetic the compiler
// vectorises, within 2 ulp of std::exp (Cephes' expf: x = n ln2 + r, a degree-6 polynomial in
// r, scaled by 2^n); below -87.3 it returns 0, as exp's float32 result underflows there.
// n is rounded by adding and subtracting 1.5 * 2^23, which leaves n in the low bits of the
// sum: std::floor and a float-to-int conversion kept gcc's loop scalar (9x slower).
inline float ExpOfNonPositive(float x) {
  constexpr float kRounder = 12582912.f;  // 1.5 * 2^23
  constexpr uint32_t kRounderBits = 0x4B400000u;
  const float clamped = std::max(x, -87.3f);
  const float shifted = clamped * 1.44269504088896341f + kRounder;
  const float n = shifted - kRounder;
  uint32_t shifted_bits;
  std::memcpy(&shifted_bits, &shifted, sizeof(shifted_bits));
  float r = clamped - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const uint32_t scale_bits = (shifted_bits - kRounderBits + 127u) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &scale_bits, sizeof(scale));
  return x < -87.3f ? 0.f : p * scale;
}

// Rows are split into this many fixed blocks for the parameter gradients' partial sums, so
// that they are summed in the same order whatever the thread pool does (bit-exact resumes).
constexpr int64_t kGradientBlocks = 16;

inline void ParallelFor(tensorflow::OpKernelContext* context, int64_t units, int64_t cost_per_unit,
                        const std::function<void(int64_t, int64_t)>& work) {
  context->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(units, cost_per_unit, work);
}

// Row r of a [rows, depth] tensor as float32: what the row-wise kernels load.
template <typename T>
inline void LoadRow(const T* data, int64_t depth, int64_t r, float* row) {
  const T* in = data + r * depth;
  for (int64_t i = 0; i < depth; ++i) row[i] = ToFloat(in[i]);
}

// The sum over rows of the `width` values row_values(r, float* values) fills for each row r (and
// whatever else it does with the row), into total[width]: rows in kGradientBlocks fixed blocks
// in parallel, the blocks' sums added in block order.
template <typename RowValues>
void SumRowsInBlocks(tensorflow::OpKernelContext* context, int64_t rows, int64_t width, int64_t cost_per_row,
                     const RowValues& row_values, float* total) {
  const int64_t blocks = std::min<int64_t>(kGradientBlocks, std::max<int64_t>(rows, 1));
  const int64_t rows_per_block = (rows + blocks - 1) / blocks;
  std::vector<float> partial(blocks * width, 0.f);
  ParallelFor(context, blocks, cost_per_row * rows_per_block, [&](int64_t first_block, int64_t end_block) {
    std::vector<float> values(width);
    for (int64_t block = first_block; block < end_block; ++block) {
      float* block_sum = partial.data() + block * width;
      for (int64_t r = block * rows_per_block, end = std::min(rows, (block + 1) * rows_per_block); r < end; ++r) {
        row_values(r, values.data());
        for (int64_t i = 0; i < width; ++i) block_sum[i] += values[i];
      }
    }
  });
  for (int64_t i = 0; i < width; ++i) {
    float sum = 0.f;
    for (int64_t block = 0; block < blocks; ++block) sum += partial[block * width + i];
    total[i] = sum;
  }
}

}  // namespace t2t_keras

#endif  // T2T_KERAS_KERNELS_NATIVE_ROWS_H_
