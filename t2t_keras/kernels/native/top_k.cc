// tf.math.top_k of each row of [rows, width] float32 values, for a beam-sized k over a
// vocabulary-sized row: the same values and indices (descending; among equal values the lower
// index first), from one pass over the row. TensorFlow's TopKV2 heaps every value of the row;
// here a block of kBlock values whose maximum does not beat the k-th best so far is skipped after
// one vectorised maximum, which is almost every block after the first few.
#include "rows.h"

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace t2t_keras {
namespace {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;

constexpr int64_t kBlock = 64;  // 16 and 128 were slower (8000 columns, k = 8, Zen 4)

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
        const float* row = data + r * width;
        RowTopK best(k, values_out + r * k, indices_out + r * k);
        int64_t i = 0;
        for (; i + kBlock <= width; i += kBlock) {
          if (best.Full()) {
            float block_max = row[i];
#pragma omp simd reduction(max : block_max)
            for (int64_t j = 0; j < kBlock; ++j) block_max = row[i + j] > block_max ? row[i + j] : block_max;
            if (!(block_max > best.Threshold())) continue;
          }
          for (int64_t j = 0; j < kBlock; ++j) best.Offer(row[i + j], static_cast<int32_t>(i + j));
        }
        for (; i < width; ++i) best.Offer(row[i], static_cast<int32_t>(i));
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
