// One beam-search step's work over the vocabulary, for each hypothesis's row of next-token
// logits: its k best tokens and their log-probabilities, and the log-probability of EOS. Where
// the graph casts the logits to float32, masks each sentence's shortlist, takes their softmax
// (writing [rows, vocab] probabilities only to read one per row back) and a top-k in separate
// passes, this reads each row twice in its own dtype, the second time from the cache: its top k
// with its maximum (row_top_k.h), then the sum of exponentials of the normaliser.
//
//   z_n = the row's logits, masked_logit where its sentence's column_mask is false
//   top_log_probs[n, j] = z_n[top_indices[n, j]] - logsumexp(z_n),   eos_log_probs[n] = z_n[eos] - logsumexp(z_n)
//
// The tokens are tf.math.top_k's of the float32 logits (ties to the lower index); the
// normaliser is the graph's to float32 rounding (its sum is added in another order).
#include "row_top_k.h"

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace t2t_keras {
namespace {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;

// `value` where `allowed` is nonzero, else the float32 of `masked_bits`, by a select on the bits:
// gcc kept a loop over a bool test scalar (11x slower), and a branch on a scattered mask
// mispredicts where the top-k offers values one by one (1.5x).
inline float Allowed(uint8_t allowed, float value, uint32_t masked_bits) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint32_t keep = 0u - static_cast<uint32_t>(allowed != 0);
  bits = (bits & keep) | (masked_bits & ~keep);
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

// The row's candidates from its values value(i), into values[k], indices[k] and *eos_value.
template <typename RowValue>
void RowCandidates(const RowValue& value, int64_t width, int64_t k, int64_t eos, float* values, int32_t* indices,
                   float* eos_value) {
  RowTopK best(k, values, indices);
  const float largest = OfferRow(value, width, &best);
  float exponentials = 0.f;
#pragma omp simd reduction(+ : exponentials)
  for (int64_t i = 0; i < width; ++i) exponentials += ExpOfNonPositive(value(i) - largest);
  const float normalizer = largest + std::log(exponentials);
  for (int64_t j = 0; j < k; ++j) values[j] -= normalizer;
  *eos_value = value(eos) - normalizer;
}

template <typename T>
class BeamCandidatesOp : public tensorflow::OpKernel {
 public:
  explicit BeamCandidatesOp(tensorflow::OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("k", &k_));
    OP_REQUIRES_OK(context, context->GetAttr("masked_logit", &masked_logit_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor &logits = context->input(0), &eos_tensor = context->input(1), &mask = context->input(2);
    OP_REQUIRES(context, logits.dims() == 2 && eos_tensor.dims() == 0 && mask.dims() == 2,
                tensorflow::errors::InvalidArgument(
                    "T2tBeamCandidates: logits must be [rows, vocab], eos_column a scalar and column_mask [sentences, vocab]"));
    const int64_t rows = logits.dim_size(0), width = logits.dim_size(1), sentences = mask.dim_size(0);
    const int64_t eos = eos_tensor.scalar<int32_t>()();
    OP_REQUIRES(context, k_ >= 1 && k_ <= width,
                tensorflow::errors::InvalidArgument("T2tBeamCandidates: k = ", k_, " must be 1 to the row width ", width));
    OP_REQUIRES(context, eos >= 0 && eos < width,
                tensorflow::errors::InvalidArgument("T2tBeamCandidates: eos_column ", eos, " is outside the rows' ", width, " columns"));
    OP_REQUIRES(context, sentences == 0 || (mask.dim_size(1) == width && rows % sentences == 0),
                tensorflow::errors::InvalidArgument("T2tBeamCandidates: column_mask [", sentences, ", ", mask.dim_size(1),
                                                    "] must be [0, any] or have the ", width, " columns of ", rows,
                                                    " rows' sentences"));
    Tensor *top_log_probs, *top_indices, *eos_log_probs;
    OP_REQUIRES_OK(context, context->allocate_output(0, tensorflow::TensorShape({rows, k_}), &top_log_probs));
    OP_REQUIRES_OK(context, context->allocate_output(1, tensorflow::TensorShape({rows, k_}), &top_indices));
    OP_REQUIRES_OK(context, context->allocate_output(2, tensorflow::TensorShape({rows}), &eos_log_probs));
    const T* data = logits.flat<T>().data();
    const uint8_t* mask_data = reinterpret_cast<const uint8_t*>(mask.flat<bool>().data());
    const int64_t rows_per_sentence = sentences == 0 ? 1 : rows / sentences;
    float* values_out = top_log_probs->flat<float>().data();
    int32_t* indices_out = top_indices->flat<int32_t>().data();
    float* eos_out = eos_log_probs->flat<float>().data();
    const int64_t k = k_;
    uint32_t masked_bits;
    std::memcpy(&masked_bits, &masked_logit_, sizeof(masked_bits));
    ParallelFor(context, rows, 12 * width, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* row = data + r * width;
        if (sentences == 0) {
          RowCandidates([row](int64_t i) { return ToFloat(row[i]); }, width, k, eos, values_out + r * k,
                        indices_out + r * k, eos_out + r);
        } else {
          const uint8_t* allowed = mask_data + (r / rows_per_sentence) * width;
          RowCandidates([row, allowed, masked_bits](int64_t i) { return Allowed(allowed[i], ToFloat(row[i]), masked_bits); },
                        width, k, eos, values_out + r * k, indices_out + r * k, eos_out + r);
        }
      }
    });
  }

 private:
  int k_;
  float masked_logit_;
};

}  // namespace

REGISTER_OP("T2tBeamCandidates")
    .Input("logits: T")
    .Input("eos_column: int32")
    .Input("column_mask: bool")
    .Output("top_log_probs: float")
    .Output("top_indices: int32")
    .Output("eos_log_probs: float")
    .Attr("k: int >= 1")
    .Attr("masked_logit: float")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle logits, eos, mask;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &logits));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &eos));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &mask));
      int k;
      TF_RETURN_IF_ERROR(c->GetAttr("k", &k));
      c->set_output(0, c->Matrix(c->Dim(logits, 0), k));
      c->set_output(1, c->Matrix(c->Dim(logits, 0), k));
      c->set_output(2, c->Vector(c->Dim(logits, 0)));
      return absl::OkStatus();
    });

#define T2T_REGISTER(T) \
  REGISTER_KERNEL_BUILDER(Name("T2tBeamCandidates").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), BeamCandidatesOp<T>);
T2T_REGISTER(float)
T2T_REGISTER(Eigen::bfloat16)
#undef T2T_REGISTER

}  // namespace t2t_keras
