// The post-norm residual connection, LayerNorm(x + dropout(h)), forward and backward as one
// kernel each: the dropout mask is applied from its random bits, the sum is never written
// (the backward recomputes it), and the graph's two masks, add and casts around the layer
// norm disappear. Each step rounds as the graph's ops do (h * scale, then x + that, in T), so
// the values equal those of the graph's dropout, add and `T2tLayerNorm`.
#include "row_norm.h"

#include "tensorflow/core/framework/op.h"

namespace t2t_keras {
namespace {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;

// The dropout of `kernels/dropout.py`: a unit is kept when its 16 random bits are at least
// `threshold`, and scaled by `scale` (rounded to T, as the graph's mask is).
struct DropoutMask {
  int threshold;
  float scale;
};

// Row r of x + dropout(h) as float32, rounded at each step as the graph's ops round it: the
// forward normalises these rows, the backward recomputes them (the sum is never written).
template <typename T>
struct ResidualRows {
  const T *x, *h;
  const uint16_t* bits;
  int64_t depth;
  DropoutMask mask;
  float scale = RoundedTo<T>(mask.scale);

  void operator()(int64_t r, float* row) const {
    const int64_t offset = r * depth;
    const int threshold = mask.threshold;
    const float kept_scale = scale;
    for (int64_t i = 0; i < depth; ++i) {
      const float kept = RoundedTo<T>(ToFloat(h[offset + i]) * kept_scale);  // read whatever the bits: vectorises
      row[i] = RoundedTo<T>(ToFloat(x[offset + i]) + (bits[offset + i] >= threshold ? kept : 0.f));
    }
  }
};

tensorflow::Status ReadMask(tensorflow::OpKernelConstruction* context, DropoutMask* mask) {
  TF_RETURN_IF_ERROR(context->GetAttr("threshold", &mask->threshold));
  return context->GetAttr("scale", &mask->scale);
}

absl::Status CheckShapes(const Tensor& x, const Tensor& h, const Tensor& bits, const Tensor& gamma) {
  if (x.shape() != h.shape() || x.shape() != bits.shape() || x.dims() < 1) {
    return tensorflow::errors::InvalidArgument("T2tDropoutAddLayerNorm: x, h and bits must have one shape");
  }
  if (gamma.NumElements() != x.dim_size(x.dims() - 1)) {
    return tensorflow::errors::InvalidArgument("T2tDropoutAddLayerNorm: gamma must have the last axis' size");
  }
  return absl::OkStatus();
}

template <typename T>
class DropoutAddLayerNormOp : public tensorflow::OpKernel {
 public:
  explicit DropoutAddLayerNormOp(tensorflow::OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("epsilon", &epsilon_));
    OP_REQUIRES_OK(context, ReadMask(context, &mask_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor &x = context->input(0), &h = context->input(1), &bits = context->input(2);
    const Tensor &gamma = context->input(3), &beta = context->input(4);
    OP_REQUIRES_OK(context, CheckShapes(x, h, bits, gamma));
    const int64_t depth = x.dim_size(x.dims() - 1);
    tensorflow::TensorShape rows_shape = x.shape();
    rows_shape.RemoveLastDims(1);
    Tensor *y, *mean, *inverse_std;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &y));
    OP_REQUIRES_OK(context, context->allocate_output(1, rows_shape, &mean));
    OP_REQUIRES_OK(context, context->allocate_output(2, rows_shape, &inverse_std));
    const int64_t rows = depth == 0 ? 0 : x.NumElements() / depth;
    const ResidualRows<T> load{x.flat<T>().data(), h.flat<T>().data(), bits.flat<uint16_t>().data(), depth, mask_};
    NormalizeRows(context, rows, depth, load, gamma.flat<float>().data(), beta.flat<float>().data(), epsilon_,
                  y->flat<T>().data(), mean->flat<float>().data(), inverse_std->flat<float>().data());
  }

 private:
  float epsilon_;
  DropoutMask mask_;
};

template <typename T>
class DropoutAddLayerNormGradOp : public tensorflow::OpKernel {
 public:
  explicit DropoutAddLayerNormGradOp(tensorflow::OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, ReadMask(context, &mask_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor &upstream = context->input(0), &x = context->input(1), &h = context->input(2);
    const Tensor &bits = context->input(3), &gamma = context->input(4);
    const Tensor &mean = context->input(5), &inverse_std = context->input(6);
    OP_REQUIRES_OK(context, CheckShapes(x, h, bits, gamma));
    OP_REQUIRES(context, upstream.shape() == x.shape(),
                tensorflow::errors::InvalidArgument("T2tDropoutAddLayerNormGrad: upstream and x differ in shape"));
    const int64_t depth = x.dim_size(x.dims() - 1);
    const int64_t rows = depth == 0 ? 0 : x.NumElements() / depth;
    OP_REQUIRES(context, mean.NumElements() == rows && inverse_std.NumElements() == rows,
                tensorflow::errors::InvalidArgument("T2tDropoutAddLayerNormGrad: statistics do not match x"));
    Tensor *dx, *dh, *dgamma, *dbeta;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &dx));
    OP_REQUIRES_OK(context, context->allocate_output(1, x.shape(), &dh));
    OP_REQUIRES_OK(context, context->allocate_output(2, gamma.shape(), &dgamma));
    OP_REQUIRES_OK(context, context->allocate_output(3, gamma.shape(), &dbeta));
    const ResidualRows<T> load{x.flat<T>().data(), h.flat<T>().data(), bits.flat<uint16_t>().data(), depth, mask_};
    const uint16_t* bits_data = load.bits;
    T *dx_data = dx->flat<T>().data(), *dh_data = dh->flat<T>().data();
    const DropoutMask mask = mask_;
    const float scale = load.scale;
    // d(x + dropout(h)) = dsum to x, dsum * mask to h, each rounded to T as the graph's are.
    auto store = [&](int64_t r, const float* gradient) {
      const uint16_t* row_bits = bits_data + r * depth;
      T *row_dx = dx_data + r * depth, *row_dh = dh_data + r * depth;
      const int threshold = mask.threshold;
      const float kept_scale = scale;
      for (int64_t i = 0; i < depth; ++i) {
        const float dsum = RoundedTo<T>(gradient[i]);  // exact in T: stored without a second rounding
        row_dx[i] = FromFloat<T>(dsum);
        row_dh[i] = FromFloat<T>(row_bits[i] >= threshold ? dsum * kept_scale : 0.f);
      }
    };
    NormalizeRowsGradient(context, rows, depth, load, upstream.flat<T>().data(), gamma.flat<float>().data(),
                          mean.flat<float>().data(), inverse_std.flat<float>().data(), store,
                          dgamma->flat<float>().data(), dbeta->flat<float>().data());
  }

 private:
  DropoutMask mask_;
};

}  // namespace

REGISTER_OP("T2tDropoutAddLayerNorm")
    .Input("x: T")
    .Input("h: T")
    .Input("bits: uint16")
    .Input("gamma: float")
    .Input("beta: float")
    .Output("y: T")
    .Output("mean: float")
    .Output("inverse_std: float")
    .Attr("T: {float, bfloat16}")
    .Attr("epsilon: float")
    .Attr("threshold: int")
    .Attr("scale: float")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) { return RowStatisticsShapes(c, 0); });

REGISTER_OP("T2tDropoutAddLayerNormGrad")
    .Input("upstream: T")
    .Input("x: T")
    .Input("h: T")
    .Input("bits: uint16")
    .Input("gamma: float")
    .Input("mean: float")
    .Input("inverse_std: float")
    .Output("dx: T")
    .Output("dh: T")
    .Output("dgamma: float")
    .Output("dbeta: float")
    .Attr("T: {float, bfloat16}")
    .Attr("threshold: int")
    .Attr("scale: float")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(1));
      c->set_output(1, c->input(1));
      c->set_output(2, c->input(4));
      c->set_output(3, c->input(4));
      return absl::OkStatus();
    });

#define T2T_REGISTER(T)                                                                                             \
  REGISTER_KERNEL_BUILDER(Name("T2tDropoutAddLayerNorm").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),     \
                          DropoutAddLayerNormOp<T>);                                                                \
  REGISTER_KERNEL_BUILDER(Name("T2tDropoutAddLayerNormGrad").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
                          DropoutAddLayerNormGradOp<T>);
T2T_REGISTER(float)
T2T_REGISTER(Eigen::bfloat16)
#undef T2T_REGISTER

}  // namespace t2t_keras
