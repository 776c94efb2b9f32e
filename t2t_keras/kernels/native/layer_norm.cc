// Layer normalisation over the last axis, forward and backward, float32 arithmetic on float32
// or bfloat16 tensors: one pass over memory each way where TensorFlow's graph takes about ten
// elementwise ops and their casts.
#include "row_norm.h"

#include "tensorflow/core/framework/op.h"

namespace t2t_keras {
namespace {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;

template <typename T>
class LayerNormOp : public tensorflow::OpKernel {
 public:
  explicit LayerNormOp(tensorflow::OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor &x = context->input(0), &gamma = context->input(1), &beta = context->input(2);
    OP_REQUIRES(context, x.dims() >= 1, tensorflow::errors::InvalidArgument("T2tLayerNorm: x needs an axis to normalise"));
    const int64_t depth = x.dim_size(x.dims() - 1);
    OP_REQUIRES(context, gamma.NumElements() == depth && beta.NumElements() == depth,
                tensorflow::errors::InvalidArgument("T2tLayerNorm: gamma and beta must have the last axis' size ", depth));
    tensorflow::TensorShape rows_shape = x.shape();
    rows_shape.RemoveLastDims(1);
    Tensor *y, *mean, *inverse_std;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &y));
    OP_REQUIRES_OK(context, context->allocate_output(1, rows_shape, &mean));
    OP_REQUIRES_OK(context, context->allocate_output(2, rows_shape, &inverse_std));
    const int64_t rows = depth == 0 ? 0 : x.NumElements() / depth;
    const T* x_data = x.flat<T>().data();
    auto load = [&](int64_t r, float* row) { LoadRow(x_data, depth, r, row); };
    NormalizeRows(context, rows, depth, load, gamma.flat<float>().data(), beta.flat<float>().data(), epsilon_,
                  y->flat<T>().data(), mean->flat<float>().data(), inverse_std->flat<float>().data());
  }

 private:
  float epsilon_;
};

template <typename T>
class LayerNormGradOp : public tensorflow::OpKernel {
 public:
  explicit LayerNormGradOp(tensorflow::OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor &upstream = context->input(0), &x = context->input(1), &gamma = context->input(2);
    const Tensor &mean = context->input(3), &inverse_std = context->input(4);
    OP_REQUIRES(context, upstream.shape() == x.shape() && x.dims() >= 1,
                tensorflow::errors::InvalidArgument("T2tLayerNormGrad: upstream and x differ in shape"));
    const int64_t depth = x.dim_size(x.dims() - 1);
    const int64_t rows = depth == 0 ? 0 : x.NumElements() / depth;
    OP_REQUIRES(context, mean.NumElements() == rows && inverse_std.NumElements() == rows && gamma.NumElements() == depth,
                tensorflow::errors::InvalidArgument("T2tLayerNormGrad: statistics do not match x"));
    Tensor *dx, *dgamma, *dbeta;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &dx));
    OP_REQUIRES_OK(context, context->allocate_output(1, gamma.shape(), &dgamma));
    OP_REQUIRES_OK(context, context->allocate_output(2, gamma.shape(), &dbeta));
    const T* x_data = x.flat<T>().data();
    T* dx_data = dx->flat<T>().data();
    auto load = [&](int64_t r, float* row) { LoadRow(x_data, depth, r, row); };
    auto store = [&](int64_t r, const float* gradient) {
      T* out = dx_data + r * depth;
      for (int64_t i = 0; i < depth; ++i) out[i] = FromFloat<T>(gradient[i]);
    };
    NormalizeRowsGradient(context, rows, depth, load, upstream.flat<T>().data(), gamma.flat<float>().data(),
                          mean.flat<float>().data(), inverse_std.flat<float>().data(), store,
                          dgamma->flat<float>().data(), dbeta->flat<float>().data());
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
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) { return RowStatisticsShapes(c, 0); });

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
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(1));
      c->set_output(1, c->input(2));
      c->set_output(2, c->input(2));
      return absl::OkStatus();
    });

#define T2T_REGISTER(T)                                                                                 \
  REGISTER_KERNEL_BUILDER(Name("T2tLayerNorm").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),     \
                          LayerNormOp<T>);                                                              \
  REGISTER_KERNEL_BUILDER(Name("T2tLayerNormGrad").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
                          LayerNormGradOp<T>);
T2T_REGISTER(float)
T2T_REGISTER(Eigen::bfloat16)
#undef T2T_REGISTER

}  // namespace t2t_keras
