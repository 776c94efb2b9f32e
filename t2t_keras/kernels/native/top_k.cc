// tf.math.top_k of each row of [rows, width] float32 values, for a beam-sized k over a
// vocabulary-sized row: the same values and indices, from one pass over the row (row_top_k.h).
#include "row_top_k.h"

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace t2t_keras {
namespace {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;

class TopKRowsOp : public tensorflow::OpKernel {
 public:
  explicit TopKRowsOp(tensorflow::OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("k", &k_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& input = context->input(0);
    OP_REQUIRES(context, input.dims() == 2,
                tensorflow::errors::InvalidArgument("T2tTopKRows: values must be [rows, width]"));
    const int64_t rows = input.dim_size(0), width = input.dim_size(1);
    OP_REQUIRES(context, k_ >= 1 && k_ <= width,
                tensorflow::errors::InvalidArgument("T2tTopKRows: k = ", k_, " must be 1 to the row width ", width));
    Tensor *top_values, *top_indices;
    OP_REQUIRES_OK(context, context->allocate_output(0, tensorflow::TensorShape({rows, k_}), &top_values));
    OP_REQUIRES_OK(context, context->allocate_output(1, tensorflow::TensorShape({rows, k_}), &top_indices));
    const float* data = input.flat<float>().data();
    float* values_out = top_values->flat<float>().data();
    int32_t* indices_out = top_indices->flat<int32_t>().data();
    const int64_t k = k_;
    ParallelFor(context, rows, 2 * width, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        RowTopK best(k, values_out + r * k, indices_out + r * k);
        const float* row = data + r * width;
        OfferRow([row](int64_t i) { return row[i]; }, width, &best);
      }
    });
  }

 private:
  int k_;
};

}  // namespace

REGISTER_OP("T2tTopKRows")
    .Input("values: float")
    .Output("top_values: float")
    .Output("top_indices: int32")
    .Attr("k: int >= 1")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle values;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &values));
      int k;
      TF_RETURN_IF_ERROR(c->GetAttr("k", &k));
      c->set_output(0, c->Matrix(c->Dim(values, 0), k));
      c->set_output(1, c->Matrix(c->Dim(values, 0), k));
      return absl::OkStatus();
    });

REGISTER_KERNEL_BUILDER(Name("T2tTopKRows").Device(tensorflow::DEVICE_CPU), TopKRowsOp);

}  // namespace t2t_keras
