// Layer normalisation over the last axis, forward and backward, float32 arithmetic on
// float32 or bfloat16 tensors: one pass over memory each way where TensorFlow's graph
// takes about ten elementwise ops and their casts.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace t2t_keras {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

// bfloat16 <-> float32 by bit operations the compiler vectorises; to bfloat16 rounds to
// nearest even and keeps NaNs quiet, as TensorFlow's Cast does.
inline float ToFloat(float value) { return value; }
inline float ToFloat(Eigen::bfloat16 value) {
  uint32_t bits = static_cast<uint32_t>(Eigen::numext::bit_cast<uint16_t>(value)) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}
template <typename T> inline T FromFloat(float value);
template <> inline float FromFloat<float>(float value) { return value; }
template <> inline Eigen::bfloat16 FromFloat<Eigen::bfloat16>(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  uint32_t quiet_nan = (bits >> 16) | 0x40u;
  bool is_nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return Eigen::numext::bit_cast<Eigen::bfloat16>(static_cast<uint16_t>(is_nan ? quiet_nan : rounded));
}

// Rows are split into this many fixed blocks for the parameter gradients' partial sums, so
// that they are summed in the same order whatever the thread pool does (bit-exact resumes).
constexpr int64_t kGradientBlocks = 16;

void ParallelRows(OpKernelContext* context, int64_t rows, int64_t cost_per_row,
                  const std::function<void(int64_t, int64_t)>& work) {
  auto* pool = context->device()->tensorflow_cpu_worker_threads()->workers;
  pool->ParallelFor(rows, cost_per_row, work);
}

absl::Status LastAxisShapes(InferenceContext* c) {
  ShapeHandle x = c->input(0);
  c->set_output(0, x);
  if (c->RankKnown(x)) {
    ShapeHandle rows;
    TF_RETURN_IF_ERROR(c->Subshape(x, 0, -1, &rows));
    c->set_output(1, rows);
    c->set_output(2, rows);
  } else {
    c->set_output(1, c->UnknownShape());
    c->set_output(2, c->UnknownShape());
  }
  return absl::OkStatus();
}

template <typename T>
class LayerNormOp : public OpKernel {
 public:
  explicit LayerNormOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    const Tensor& gamma = context->input(1);
    const Tensor& beta = context->input(2);
    OP_REQUIRES(context, x.dims() >= 1, tensorflow::errors::InvalidArgument("T2tLayerNorm: x needs an axis to normalise"));
    const int64_t depth = x.dim_size(x.dims() - 1);
    OP_REQUIRES(context, gamma.NumElements() == depth && beta.NumElements() == depth,
                tensorflow::errors::InvalidArgument("T2tLayerNorm: gamma and beta must have the last axis' size ", depth));
    TensorShape rows_shape = x.shape();
    rows_shape.RemoveLastDims(1);
    Tensor *y, *mean, *inverse_std;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &y));
    OP_REQUIRES_OK(context, context->allocate_output(1, rows_shape, &mean));
    OP_REQUIRES_OK(context, context->allocate_output(2, rows_shape, &inverse_std));
    const int64_t rows = depth == 0 ? 0 : x.NumElements() / depth;
    const T* x_data = x.flat<T>().data();
    const float* gamma_data = gamma.flat<float>().data();
    const float* beta_data = beta.flat<float>().data();
    T* y_data = y->flat<T>().data();
    float* mean_data = mean->flat<float>().data();
    float* inverse_std_data = inverse_std->flat<float>().data();
    const float epsilon = epsilon_;
    ParallelRows(context, rows, 8 * depth, [&](int64_t begin, int64_t end) {
      std::vector<float> row(depth);
      for (int64_t r = begin; r < end; ++r) {
        const T* in = x_data + r * depth;
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < depth; ++i) {
          row[i] = ToFloat(in[i]);
          sum += row[i];
        }
        const float row_mean = sum / depth;
        float squares = 0.f;
#pragma omp simd reduction(+ : squares)
        for (int64_t i = 0; i < depth; ++i) {
          const float centered = row[i] - row_mean;
          squares += centered * centered;
        }
        const float inverse = 1.f / std::sqrt(squares / depth + epsilon);
        T* out = y_data + r * depth;
        for (int64_t i = 0; i < depth; ++i) {
          out[i] = FromFloat<T>((row[i] - row_mean) * inverse * gamma_data[i] + beta_data[i]);
        }
        mean_data[r] = row_mean;
        inverse_std_data[r] = inverse;
      }
    });
  }

 private:
  float epsilon_;
};

template <typename T>
class LayerNormGradOp : public OpKernel {
 public:
  explicit LayerNormGradOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& upstream = context->input(0);
    const Tensor& x = context->input(1);
    const Tensor& gamma = context->input(2);
    const Tensor& mean = context->input(3);
    const Tensor& inverse_std = context->input(4);
    OP_REQUIRES(context, upstream.shape() == x.shape(),
                tensorflow::errors::InvalidArgument("T2tLayerNormGrad: upstream and x differ in shape"));
    const int64_t depth = x.dim_size(x.dims() - 1);
    const int64_t rows = depth == 0 ? 0 : x.NumElements() / depth;
    OP_REQUIRES(context, mean.NumElements() == rows && inverse_std.NumElements() == rows && gamma.NumElements() == depth,
                tensorflow::errors::InvalidArgument("T2tLayerNormGrad: statistics do not match x"));
    Tensor *dx, *dgamma, *dbeta;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &dx));
    OP_REQUIRES_OK(context, context->allocate_output(1, gamma.shape(), &dgamma));
    OP_REQUIRES_OK(context, context->allocate_output(2, gamma.shape(), &dbeta));
    const T* dy_data = upstream.flat<T>().data();
    const T* x_data = x.flat<T>().data();
    const float* gamma_data = gamma.flat<float>().data();
    const float* mean_data = mean.flat<float>().data();
    const float* inverse_std_data = inverse_std.flat<float>().data();
    T* dx_data = dx->flat<T>().data();
    const int64_t blocks = std::min<int64_t>(kGradientBlocks, std::max<int64_t>(rows, 1));
    const int64_t rows_per_block = (rows + blocks - 1) / blocks;
    std::vector<float> partial_gamma(blocks * depth, 0.f), partial_beta(blocks * depth, 0.f);
    ParallelRows(context, blocks, 12 * depth * rows_per_block, [&](int64_t first_block, int64_t end_block) {
      std::vector<float> normalized(depth), scaled(depth);
      for (int64_t block = first_block; block < end_block; ++block) {
        float* block_gamma = partial_gamma.data() + block * depth;
        float* block_beta = partial_beta.data() + block * depth;
        const int64_t end = std::min(rows, (block + 1) * rows_per_block);
        for (int64_t r = block * rows_per_block; r < end; ++r) {
          const T* dy = dy_data + r * depth;
          const T* in = x_data + r * depth;
          const float row_mean = mean_data[r], inverse = inverse_std_data[r];
          float sum_scaled = 0.f, sum_scaled_normalized = 0.f;
#pragma omp simd reduction(+ : sum_scaled, sum_scaled_normalized)
          for (int64_t i = 0; i < depth; ++i) {
            const float g = ToFloat(dy[i]);
            normalized[i] = (ToFloat(in[i]) - row_mean) * inverse;
            scaled[i] = g * gamma_data[i];
            sum_scaled += scaled[i];
            sum_scaled_normalized += scaled[i] * normalized[i];
            block_gamma[i] += g * normalized[i];
            block_beta[i] += g;
          }
          const float mean_scaled = sum_scaled / depth, mean_scaled_normalized = sum_scaled_normalized / depth;
          T* out = dx_data + r * depth;
          for (int64_t i = 0; i < depth; ++i) {
            out[i] = FromFloat<T>(inverse * (scaled[i] - mean_scaled - normalized[i] * mean_scaled_normalized));
          }
        }
      }
    });
    float* dgamma_data = dgamma->flat<float>().data();
    float* dbeta_data = dbeta->flat<float>().data();
    for (int64_t i = 0; i < depth; ++i) {
      float total_gamma = 0.f, total_beta = 0.f;
      for (int64_t block = 0; block < blocks; ++block) {
        total_gamma += partial_gamma[block * depth + i];
        total_beta += partial_beta[block * depth + i];
      }
      dgamma_data[i] = total_gamma;
      dbeta_data[i] = total_beta;
    }
  }
};

}  // namespace

REGISTER_OP("T2tLayerNorm")
    .Input("x: T")
    .Input("gamma: float")
    .Input("beta: float")
    .Output("y: T")
    .Output("mean: float")
    .Output("inverse_std: float")
    .Attr("T: {float, bfloat16}")
    .Attr("epsilon: float")
    .SetShapeFn(LastAxisShapes);

REGISTER_OP("T2tLayerNormGrad")
    .Input("upstream: T")
    .Input("x: T")
    .Input("gamma: float")
    .Input("mean: float")
    .Input("inverse_std: float")
    .Output("dx: T")
    .Output("dgamma: float")
    .Output("dbeta: float")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(1));
      c->set_output(1, c->input(2));
      c->set_output(2, c->input(2));
      return absl::OkStatus();
    });

#define REGISTER(T)                                                                              \
  REGISTER_KERNEL_BUILDER(Name("T2tLayerNorm").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
                          LayerNormOp<T>);                                                      \
  REGISTER_KERNEL_BUILDER(Name("T2tLayerNormGrad").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
                          LayerNormGradOp<T>);
REGISTER(float)
REGISTER(Eigen::bfloat16)

}  // namespace t2t_keras
