// Layer normalisation of rows given by a loader, forward and backward, float32 arithmetic on
// float32 or bfloat16 tensors; shared by the plain layer norm and the fused residual one.
#ifndef T2T_KERAS_KERNELS_NATIVE_ROW_NORM_H_
#define T2T_KERAS_KERNELS_NATIVE_ROW_NORM_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

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

// Rows are split into this many fixed blocks for the parameter gradients' partial sums, so
// that they are summed in the same order whatever the thread pool does (bit-exact resumes).
constexpr int64_t kGradientBlocks = 16;

inline void ParallelFor(tensorflow::OpKernelContext* context, int64_t units, int64_t cost_per_unit,
                        const std::function<void(int64_t, int64_t)>& work) {
  context->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(units, cost_per_unit, work);
}

// x's shape to y, x's shape without its last axis to the two per-row statistics.
inline absl::Status RowStatisticsShapes(tensorflow::shape_inference::InferenceContext* c, int x_input) {
  tensorflow::shape_inference::ShapeHandle x = c->input(x_input), rows = c->UnknownShape();
  if (c->RankKnown(x)) TF_RETURN_IF_ERROR(c->Subshape(x, 0, -1, &rows));
  c->set_output(0, x);
  c->set_output(c->num_outputs() - 2, rows);
  c->set_output(c->num_outputs() - 1, rows);
  return absl::OkStatus();
}

// y = (row - mean) / sqrt(var + epsilon) * gamma + beta for each row that load(r, float* row)
// fills; the mean and 1/std of each row kept for the backward.
template <typename T, typename Load>
void NormalizeRows(tensorflow::OpKernelContext* context, int64_t rows, int64_t depth, const Load& load,
                   const float* gamma, const float* beta, float epsilon, T* y, float* mean, float* inverse_std) {
  ParallelFor(context, rows, 10 * depth, [&](int64_t begin, int64_t end) {
    std::vector<float> row(depth);
    for (int64_t r = begin; r < end; ++r) {
      load(r, row.data());
      float sum = 0.f;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < depth; ++i) sum += row[i];
      const float row_mean = sum / depth;
      float squares = 0.f;
#pragma omp simd reduction(+ : squares)
      for (int64_t i = 0; i < depth; ++i) squares += (row[i] - row_mean) * (row[i] - row_mean);
      const float inverse = 1.f / std::sqrt(squares / depth + epsilon);
      T* out = y + r * depth;
      for (int64_t i = 0; i < depth; ++i) out[i] = FromFloat<T>((row[i] - row_mean) * inverse * gamma[i] + beta[i]);
      mean[r] = row_mean;
      inverse_std[r] = inverse;
    }
  });
}

// The backward of NormalizeRows: for each row (load(r, row) as forward, upstream dy), the
// gradient with respect to the row, (g - mean(g) - x^ * mean(g * x^)) / std with g = dy * gamma,
// handed to store(r, const float* d); dgamma = sum dy * x^, dbeta = sum dy over rows.
template <typename T, typename Load, typename Store>
void NormalizeRowsGradient(tensorflow::OpKernelContext* context, int64_t rows, int64_t depth, const Load& load,
                           const T* upstream, const float* gamma, const float* mean, const float* inverse_std,
                           const Store& store, float* dgamma, float* dbeta) {
  const int64_t blocks = std::min<int64_t>(kGradientBlocks, std::max<int64_t>(rows, 1));
  const int64_t rows_per_block = (rows + blocks - 1) / blocks;
  std::vector<float> partial_gamma(blocks * depth, 0.f), partial_beta(blocks * depth, 0.f);
  ParallelFor(context, blocks, 14 * depth * rows_per_block, [&](int64_t first_block, int64_t end_block) {
    std::vector<float> normalized(depth), scaled(depth), gradient(depth);
    for (int64_t block = first_block; block < end_block; ++block) {
      float* block_gamma = partial_gamma.data() + block * depth;
      float* block_beta = partial_beta.data() + block * depth;
      for (int64_t r = block * rows_per_block, end = std::min(rows, (block + 1) * rows_per_block); r < end; ++r) {
        load(r, normalized.data());
        const T* dy = upstream + r * depth;
        const float row_mean = mean[r], inverse = inverse_std[r];
        float sum_scaled = 0.f, sum_scaled_normalized = 0.f;
#pragma omp simd reduction(+ : sum_scaled, sum_scaled_normalized)
        for (int64_t i = 0; i < depth; ++i) {
          const float g = ToFloat(dy[i]);
          normalized[i] = (normalized[i] - row_mean) * inverse;
          scaled[i] = g * gamma[i];
          sum_scaled += scaled[i];
          sum_scaled_normalized += scaled[i] * normalized[i];
          block_gamma[i] += g * normalized[i];
          block_beta[i] += g;
        }
        const float mean_scaled = sum_scaled / depth, mean_scaled_normalized = sum_scaled_normalized / depth;
        for (int64_t i = 0; i < depth; ++i) {
          gradient[i] = inverse * (scaled[i] - mean_scaled - normalized[i] * mean_scaled_normalized);
        }
        store(r, gradient.data());
      }
    }
  });
  for (int64_t i = 0; i < depth; ++i) {
    float total_gamma = 0.f, total_beta = 0.f;
    for (int64_t block = 0; block < blocks; ++block) {
      total_gamma += partial_gamma[block * depth + i];
      total_beta += partial_beta[block * depth + i];
    }
    dgamma[i] = total_gamma;
    dbeta[i] = total_beta;
  }
}

}  // namespace t2t_keras

#endif  // T2T_KERAS_KERNELS_NATIVE_ROW_NORM_H_
