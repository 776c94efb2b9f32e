// Label-smoothed cross-entropy of logit rows, the loss and its unweighted gradient in one op:
// where the graph casts the logits to float32, takes the softmax, its maximum, the target's
// logit, the row sum and scatters the target cells in separate passes over [rows, vocab], this
// reads each row once into float32 and writes d loss / d logits (in the logits' dtype) once.
//
//   loss_n = logsumexp(z_n) - on_weight * z_n[target_n] - off_value * sum_v z_n[v]
//   d loss_n / d z_n = softmax(z_n) - off_value - on_weight * onehot(target_n)
//
// The backward is the caller's: the gradient scaled by each row's upstream weight.
#include "rows.h"

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace t2t_keras {
namespace {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;

template <typename T>
class SmoothedCrossEntropyOp : public tensorflow::OpKernel {
 public:
  explicit SmoothedCrossEntropyOp(tensorflow::OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor &logits = context->input(0), &targets = context->input(1);
    const Tensor &off_value_tensor = context->input(2), &on_weight_tensor = context->input(3);
    OP_REQUIRES(context, logits.dims() == 2 && targets.dims() == 1 && targets.dim_size(0) == logits.dim_size(0),
                tensorflow::errors::InvalidArgument("T2tSmoothedCrossEntropy: logits must be [rows, vocab] and targets [rows]"));
    const int64_t rows = logits.dim_size(0), vocab = logits.dim_size(1);
    Tensor *losses, *gradient;
    OP_REQUIRES_OK(context, context->allocate_output(0, tensorflow::TensorShape({rows}), &losses));
    OP_REQUIRES_OK(context, context->allocate_output(1, logits.shape(), &gradient));
    const T* logits_data = logits.flat<T>().data();
    const int32_t* target_data = targets.flat<int32_t>().data();
    for (int64_t r = 0; r < rows; ++r) {
      OP_REQUIRES(context, target_data[r] >= 0 && target_data[r] < vocab,
                  tensorflow::errors::InvalidArgument("T2tSmoothedCrossEntropy: target ", target_data[r], " of row ", r,
                                                      " is outside the vocabulary of ", vocab));
    }
    const float off_value = off_value_tensor.scalar<float>()(), on_weight = on_weight_tensor.scalar<float>()();
    float* loss_data = losses->flat<float>().data();
    T* gradient_data = gradient->flat<T>().data();
    ParallelFor(context, rows, 12 * vocab, [&](int64_t begin, int64_t end) {
      std::vector<float> row(vocab);
      float* values = row.data();
      for (int64_t r = begin; r < end; ++r) {
        LoadRow(logits_data, vocab, r, values);
        float largest = -std::numeric_limits<float>::infinity(), sum = 0.f;
#pragma omp simd reduction(max : largest) reduction(+ : sum)
        for (int64_t i = 0; i < vocab; ++i) {
          largest = values[i] > largest ? values[i] : largest;  // std::max here kept the loop scalar
          sum += values[i];
        }
        const int64_t target = target_data[r];
        const float target_logit = values[target];
        float exponentials = 0.f;
#pragma omp simd reduction(+ : exponentials)
        for (int64_t i = 0; i < vocab; ++i) {
          values[i] = ExpOfNonPositive(values[i] - largest);
          exponentials += values[i];
        }
        const float normalizer = largest + std::log(exponentials);
        // The max reduction may drop a NaN; the plain sum keeps it, and the loss says so.
        loss_data[r] = std::isnan(sum) ? sum : normalizer - on_weight * target_logit - off_value * sum;
        const float inverse = 1.f / exponentials;
        T* out = gradient_data + r * vocab;
        for (int64_t i = 0; i < vocab; ++i) out[i] = FromFloat<T>(values[i] * inverse - off_value);
        out[target] = FromFloat<T>(values[target] * inverse - off_value - on_weight);
      }
    });
  }
};

}  // namespace

REGISTER_OP("T2tSmoothedCrossEntropy")
    .Input("logits: T")
    .Input("targets: int32")
    .Input("off_value: float")
    .Input("on_weight: float")
    .Output("losses: float")
    .Output("unweighted_gradient: T")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle logits;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &logits));
      c->set_output(0, c->Vector(c->Dim(logits, 0)));
      c->set_output(1, logits);
      return absl::OkStatus();
    });

#define T2T_REGISTER(T)                                                                                          \
  REGISTER_KERNEL_BUILDER(Name("T2tSmoothedCrossEntropy").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
                          SmoothedCrossEntropyOp<T>);
T2T_REGISTER(float)
T2T_REGISTER(Eigen::bfloat16)
#undef T2T_REGISTER

}  // namespace t2t_keras
