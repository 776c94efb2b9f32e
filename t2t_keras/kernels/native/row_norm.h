// Layer normalisation of rows given by a loader, forward and backward, float32 arithmetic on
// float32 or bfloat16 tensors; shared by the plain layer norm and the fused residual one.
#ifndef T2T_KERAS_KERNELS_NATIVE_ROW_NORM_H_
#define T2T_KERAS_KERNELS_NATIVE_ROW_NORM_H_

#include "rows.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace t2t_keras {

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
  std::vector<float> totals(2 * depth);
  // Each row's values to sum: dy * x^ (dgamma's), then dy (dbeta's).
  auto row_gradient = [&](int64_t r, float* values) {
    thread_local std::vector<float> normalized, scaled, gradient;
    normalized.resize(depth), scaled.resize(depth), gradient.resize(depth);
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
      values[i] = g * normalized[i];
      values[depth + i] = g;
    }
    const float mean_scaled = sum_scaled / depth, mean_scaled_normalized = sum_scaled_normalized / depth;
    for (int64_t i = 0; i < depth; ++i) {
      gradient[i] = inverse * (scaled[i] - mean_scaled - normalized[i] * mean_scaled_normalized);
    }
    store(r, gradient.data());
  };
  SumRowsInBlocks(context, rows, 2 * depth, 14 * depth, row_gradient, totals.data());
  std::copy(totals.begin(), totals.begin() + depth, dgamma);
  std::copy(totals.begin() + depth, totals.end(), dbeta);
}

}  // namespace t2t_keras

#endif  // T2T_KERAS_KERNELS_NATIVE_ROW_NORM_H_
