// Attention of a decoding step's few queries per row over cached keys and values, in one pass:
// where the graph runs a batched product (Q K^T), a mask add, a softmax, a cast and a second
// batched product (weights V) and then moves the heads behind the queries, this reads each
// row's keys and values once. For the step's self-attention (one query per hypothesis over its
// cache) and cross-attention (a sentence's beams over its encoder output), whose shapes change at
// every step: oneDNN creates a kernel for each new shape of the graph's products, and a file's
// first decoding met thousands (docs/results/decoding_speed.md, "The command's view").
//
//   queries [B, h, Q, d] (already scaled by d^-0.5), keys [B, h, L, d], values [B, h, L, dv],
//   key_bias [B, L] float32 (0 where a key may be attended, masked_logit where not; [0, 0]: none)
//   context[b, q, n, :] = sum_j softmax_j(queries[b, n, q] . keys[b, n, j] + key_bias[b, j]) values[b, n, j]
//
// The context is [B, Q, h, dv]: the layout the output projection reads as [B * Q, h * dv]. In
// bfloat16 the products' results and the weights are rounded to bfloat16 where the graph
// rounds them (its products' outputs, its cast of the float32 softmax), so the two agree to
// the order of float32 sums.
#include <limits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "rows.h"

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace t2t_keras {
namespace {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;

template <typename T>
float Dot(const float* query, const T* key, int64_t depth) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < depth; ++i) sum += query[i] * ToFloat(key[i]);
  return sum;
}

// One (sentence, head)'s queries over its keys, any depth: `scores`, `query` and `accumulated`
// are scratch of L, d and dv floats.
template <typename T>
void AttendHead(const T* queries, const T* keys, const T* values, const float* bias, int64_t num_queries,
                int64_t length, int64_t depth, int64_t value_depth, int64_t query_stride, T* context,
                float* scores, float* query, float* accumulated) {
  for (int64_t q = 0; q < num_queries; ++q) {
    for (int64_t i = 0; i < depth; ++i) query[i] = ToFloat(queries[q * depth + i]);
    float largest = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < length; ++j) {
      float logit = RoundedTo<T>(Dot(query, keys + j * depth, depth));
      if (bias != nullptr) logit += bias[j];
      scores[j] = logit;
      largest = std::max(largest, logit);
    }
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < length; ++j) {
      scores[j] = ExpOfNonPositive(scores[j] - largest);
      sum += scores[j];
    }
    const float inverse = 1.f / sum;
    for (int64_t i = 0; i < value_depth; ++i) accumulated[i] = 0.f;
    for (int64_t j = 0; j < length; ++j) {
      const float weight = RoundedTo<T>(scores[j] * inverse);
      const T* value = values + j * value_depth;
#pragma omp simd
      for (int64_t i = 0; i < value_depth; ++i) accumulated[i] += weight * ToFloat(value[i]);
    }
    T* out = context + q * query_stride;
    for (int64_t i = 0; i < value_depth; ++i) out[i] = FromFloat<T>(accumulated[i]);
  }
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define T2T_ATTEND_BY_AVX512 1
inline __m512 Load16(const float* data) { return _mm512_loadu_ps(data); }
inline __m512 Load16(const Eigen::bfloat16* data) {
  const __m512i widened = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(data)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(widened, 16));
}
inline void Store16(float* data, __m512 values) { _mm512_storeu_ps(data, values); }
inline void Store16(Eigen::bfloat16* data, __m512 values) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, values);
  for (int i = 0; i < 16; ++i) data[i] = FromFloat<Eigen::bfloat16>(lanes[i]);
}

// AttendHead for depths of kChunks x 16 (the query, the context and each key's and value's
// chunks in registers): the graph's products are memory-bound at these sizes, and so is this,
// once bfloat16 is widened by a shift instead of value by value.
template <int kChunks, typename T>
void AttendHead16(const T* queries, const T* keys, const T* values, const float* bias, int64_t num_queries,
                  int64_t length, int64_t query_stride, T* context, float* scores) {
  constexpr int64_t kDepth = 16 * kChunks;
  for (int64_t q = 0; q < num_queries; ++q) {
    __m512 query[kChunks];
    for (int c = 0; c < kChunks; ++c) query[c] = Load16(queries + q * kDepth + 16 * c);
    float largest = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < length; ++j) {
      const T* key = keys + j * kDepth;
      __m512 sum = _mm512_mul_ps(query[0], Load16(key));
      for (int c = 1; c < kChunks; ++c) sum = _mm512_fmadd_ps(query[c], Load16(key + 16 * c), sum);
      float logit = RoundedTo<T>(_mm512_reduce_add_ps(sum));
      if (bias != nullptr) logit += bias[j];
      scores[j] = logit;
      largest = std::max(largest, logit);
    }
    float total = 0.f;
#pragma omp simd reduction(+ : total)
    for (int64_t j = 0; j < length; ++j) {
      scores[j] = ExpOfNonPositive(scores[j] - largest);
      total += scores[j];
    }
    const float inverse = 1.f / total;
    __m512 accumulated[kChunks];
    for (int c = 0; c < kChunks; ++c) accumulated[c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < length; ++j) {
      const __m512 weight = _mm512_set1_ps(RoundedTo<T>(scores[j] * inverse));
      const T* value = values + j * kDepth;
      for (int c = 0; c < kChunks; ++c) accumulated[c] = _mm512_fmadd_ps(weight, Load16(value + 16 * c), accumulated[c]);
    }
    T* out = context + q * query_stride;
    for (int c = 0; c < kChunks; ++c) Store16(out + 16 * c, accumulated[c]);
  }
}
#endif

template <typename T>
class AttentionStepOp : public tensorflow::OpKernel {
 public:
  explicit AttentionStepOp(tensorflow::OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor &queries = context->input(0), &keys = context->input(1), &values = context->input(2),
                 &bias = context->input(3);
    OP_REQUIRES(context, queries.dims() == 4 && keys.dims() == 4 && values.dims() == 4 && bias.dims() == 2,
                tensorflow::errors::InvalidArgument("T2tAttentionStep: queries, keys and values must be [B, h, length, "
                                                    "depth] and key_bias [B, L] or [0, 0]"));
    const int64_t batch = queries.dim_size(0), heads = queries.dim_size(1), num_queries = queries.dim_size(2),
                  depth = queries.dim_size(3), length = keys.dim_size(2), value_depth = values.dim_size(3);
    OP_REQUIRES(context, keys.dim_size(0) == batch && keys.dim_size(1) == heads && keys.dim_size(3) == depth &&
                             values.dim_size(0) == batch && values.dim_size(1) == heads && values.dim_size(2) == length,
                tensorflow::errors::InvalidArgument("T2tAttentionStep: keys [", keys.dim_size(0), ", ", keys.dim_size(1),
                                                    ", ", length, ", ", keys.dim_size(3), "] and values must match queries [",
                                                    batch, ", ", heads, ", ", num_queries, ", ", depth, "]"));
    const bool biased = bias.dim_size(0) != 0;
    OP_REQUIRES(context, !biased || (bias.dim_size(0) == batch && bias.dim_size(1) == length),
                tensorflow::errors::InvalidArgument("T2tAttentionStep: key_bias must be [", batch, ", ", length,
                                                    "] or [0, 0]"));
    Tensor* output;
    OP_REQUIRES_OK(context, context->allocate_output(
                                0, tensorflow::TensorShape({batch, num_queries, heads, value_depth}), &output));
    const T* query_data = queries.flat<T>().data();
    const T* key_data = keys.flat<T>().data();
    const T* value_data = values.flat<T>().data();
    const float* bias_data = biased ? bias.flat<float>().data() : nullptr;
    T* out = output->flat<T>().data();
    const int64_t cost = num_queries * length * (depth + value_depth) * 3 + 1;
    ParallelFor(context, batch * heads, cost, [&](int64_t begin, int64_t end) {
      std::vector<float> scratch(length + depth + value_depth);
      for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t b = unit / heads, n = unit % heads;
        const T* unit_queries = query_data + unit * num_queries * depth;
        const T* unit_keys = key_data + unit * length * depth;
        const T* unit_values = value_data + unit * length * value_depth;
        const float* unit_bias = biased ? bias_data + b * length : nullptr;
        T* unit_out = out + (b * num_queries * heads + n) * value_depth;
#ifdef T2T_ATTEND_BY_AVX512
        if (depth == value_depth && (depth == 16 || depth == 32 || depth == 64 || depth == 128)) {
          const auto attend = depth == 16 ? AttendHead16<1, T> : depth == 32 ? AttendHead16<2, T>
                              : depth == 64 ? AttendHead16<4, T> : AttendHead16<8, T>;
          attend(unit_queries, unit_keys, unit_values, unit_bias, num_queries, length, heads * value_depth, unit_out,
                 scratch.data());
          continue;
        }
#endif
        AttendHead(unit_queries, unit_keys, unit_values, unit_bias, num_queries, length, depth, value_depth,
                   heads * value_depth, unit_out, scratch.data(), scratch.data() + length, scratch.data() + length + depth);
      }
    });
  }
};

}  // namespace

REGISTER_OP("T2tAttentionStep")
    .Input("queries: T")
    .Input("keys: T")
    .Input("values: T")
    .Input("key_bias: float")
    .Output("context: T")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle queries, keys, values, bias;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &queries));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &keys));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 4, &values));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 2, &bias));
      c->set_output(0, c->MakeShape({c->Dim(queries, 0), c->Dim(queries, 2), c->Dim(queries, 1), c->Dim(values, 3)}));
      return absl::OkStatus();
    });

#define T2T_REGISTER(T) \
  REGISTER_KERNEL_BUILDER(Name("T2tAttentionStep").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), AttentionStepOp<T>);
T2T_REGISTER(float)
T2T_REGISTER(Eigen::bfloat16)
#undef T2T_REGISTER

}  // namespace t2t_keras
