// max(0, x + bias) over the last axis, forward and backward as one kernel each (the FFN's inner
// layer): where the graph adds, rectifies, then takes ReluGrad and sums the bias gradient in
// separate passes. The bias is rounded to x's dtype before the add, as the graph's cast does,
// so the outputs equal the graph's; its gradient is summed in float32.
#include "rows.h"

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace t2t_keras {
namespace {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;

template <typename T>
class BiasReluOp : public tensorflow::OpKernel {
 public:
  explicit BiasReluOp(tensorflow::OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor &x = context->input(0), &bias = context->input(1);
    OP_REQUIRES(context, x.dims() >= 1 && bias.NumElements() == x.dim_size(x.dims() - 1),
                tensorflow::errors::InvalidArgument("T2tBiasRelu: the bias must have x's last axis' size"));
    Tensor* y;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &y));
    const int64_t depth = bias.NumElements();
    const int64_t rows = depth == 0 ? 0 : x.NumElements() / depth;
    const T* x_data = x.flat<T>().data();
    const float* bias_data = bias.flat<float>().data();
    T* y_data = y->flat<T>().data();
    ParallelFor(context, rows, 3 * depth, [&](int64_t begin, int64_t end) {
      std::vector<float> rounded_bias(depth);
      for (int64_t i = 0; i < depth; ++i) rounded_bias[i] = RoundedTo<T>(bias_data[i]);
      for (int64_t r = begin; r < end; ++r) {
        const T* in = x_data + r * depth;
        T* out = y_data + r * depth;
        for (int64_t i = 0; i < depth; ++i) out[i] = FromFloat<T>(std::max(ToFloat(in[i]) + rounded_bias[i], 0.f));
      }
    });
  }
};

template <typename T>
class BiasReluGradOp : public tensorflow::OpKernel {
 public:
  explicit BiasReluGradOp(tensorflow::OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor &upstream = context->input(0), &y = context->input(1);
    OP_REQUIRES(context, upstream.shape() == y.shape() && y.dims() >= 1,
                tensorflow::errors::InvalidArgument("T2tBiasReluGrad: upstream and y differ in shape"));
    const int64_t depth = y.dim_size(y.dims() - 1);
    const int64_t rows = depth == 0 ? 0 : y.NumElements() / depth;
    Tensor *dx, *dbias;
    OP_REQUIRES_OK(context, context->allocate_output(0, y.shape(), &dx));
    OP_REQUIRES_OK(context, context->allocate_output(1, tensorflow::TensorShape({depth}), &dbias));
    const T *dy_data = upstream.flat<T>().data(), *y_data = y.flat<T>().data();
    T* dx_data = dx->flat<T>().data();
    auto row_gradient = [&](int64_t r, float* values) {
      const T *dy = dy_data + r * depth, *out = y_data + r * depth;
      T* grad = dx_data + r * depth;
      for (int64_t i = 0; i < depth; ++i) {
        values[i] = ToFloat(out[i]) > 0.f ? ToFloat(dy[i]) : 0.f;
        grad[i] = FromFloat<T>(values[i]);
      }
    };
    SumRowsInBlocks(context, rows, depth, 4 * depth, row_gradient, dbias->flat<float>().data());
  }
};

}  // namespace

REGISTER_OP("T2tBiasRelu")
    .Input("x: T")
    .Input("bias: float")
    .Output("y: T")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });

REGISTER_OP("T2tBiasReluGrad")
    .Input("upstream: T")
    .Input("y: T")
    .Output("dx: T")
    .Output("dbias: float")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(1));
      tensorflow::shape_inference::ShapeHandle y = c->input(1);
      c->set_output(1, c->RankKnown(y) ? c->Vector(c->Dim(y, -1)) : c->UnknownShape());
      return absl::OkStatus();
    });

#define T2T_REGISTER(T)                                                                                \
  REGISTER_KERNEL_BUILDER(Name("T2tBiasRelu").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),     \
                          BiasReluOp<T>);                                                              \
  REGISTER_KERNEL_BUILDER(Name("T2tBiasReluGrad").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
                          BiasReluGradOp<T>);
T2T_REGISTER(float)
T2T_REGISTER(Eigen::bfloat16)
#undef T2T_REGISTER

}  // namespace t2t_keras
