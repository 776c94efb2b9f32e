// One beam-search step's work over the vocabulary, for each hypothesis's row of next-token
// logits: its k best tokens and their log-probabilities, and the log-probability of EOS. Where
// the graph casts the logits to float32, masks each sentence's shortlist, takes their softmax
// (writing [rows, vocab] probabilities only to read one per row back) and a top-k in separate
// passes, this reads each row twice in its own dtype, the second time from the cache: its top k
// with its maximum (row_top_k.h), then the sum of exponentials of the normaliser (with AVX-512,
// a cheaper exponential than ExpOfNonPositive's: 1.2x the kernel on [128, 8192] logits).
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

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define T2T_SUM_BY_AVX512 1
// exp(x) of 16 values x <= 0, within 2.1e-7 relative of exp (x = n ln2 + r, |r| <= ln2 / 2, a
// degree-5 polynomial fitted to exp's relative error in r, times 2^n by vscalefps): 1.8x
// ExpOfNonPositive's vectorised loop, whose 2^n by bit arithmetic and degree-6 form cost more
// instructions. Below -87.3, exp(-87.3) (~1e-38, nothing beside a row's exp(0) = 1); NaN stays NaN.
inline __m512 ExpOfNonPositive16(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-87.3f), x);  // the second operand when either is NaN
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(8.29762127e-3f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.19153795e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.66675746e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.99988943e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(9.99999702e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.00000012f));
  return _mm512_scalef_ps(p, n);
}
#endif

#ifdef T2T_SUM_BY_AVX512
// 16 values of a row from `row + i` as float32 (`lanes` of them), masked_logit where `allowed`
// (when given) is zero.
inline __m512 Load16(const float* row, __mmask16 lanes) { return _mm512_maskz_loadu_ps(lanes, row); }
inline __m512 Load16(const Eigen::bfloat16* row, __mmask16 lanes) {
  const __m512i widened = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, row));
  return _mm512_castsi512_ps(_mm512_slli_epi32(widened, 16));
}
#endif

// The sum of exp(z_i - largest) over a row of logits z (`row`, masked_logit where `allowed`, if
// given, is zero): the normaliser's, the kernel's second pass.
template <typename T>
float SumOfExponentials(const T* row, const uint8_t* allowed, uint32_t masked_bits, int64_t width, float largest) {
#ifdef T2T_SUM_BY_AVX512
  const __m512 shift = _mm512_set1_ps(largest);
  float masked_logit;
  std::memcpy(&masked_logit, &masked_bits, sizeof(masked_logit));
  const __m512 masked = _mm512_set1_ps(masked_logit);
  const auto exponentials = [&](int64_t i, __mmask16 lanes) {
    __m512 z = Load16(row + i, lanes);
    if (allowed != nullptr) {
      const __mmask16 kept = _mm_test_epi8_mask(_mm_maskz_loadu_epi8(lanes, allowed + i), _mm_set1_epi8(-1));
      z = _mm512_mask_blend_ps(kept, masked, z);
    }
    return ExpOfNonPositive16(_mm512_sub_ps(z, shift));
  };
  // Four sums side by side: independent additions, and shorter chains of float32 rounding.
  __m512 sums[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t i = 0;
  for (; i + 64 <= width; i += 64) {
    for (int j = 0; j < 4; ++j) sums[j] = _mm512_add_ps(sums[j], exponentials(i + 16 * j, __mmask16(0xFFFF)));
  }
  for (; i < width; i += 16) {
    const __mmask16 lanes = width - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (width - i)) - 1);
    sums[0] = _mm512_mask_add_ps(sums[0], lanes, sums[0], exponentials(i, lanes));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(sums[0], sums[1]), _mm512_add_ps(sums[2], sums[3])));
#else
  float sum = 0.f;
  if (allowed == nullptr) {
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < width; ++i) sum += ExpOfNonPositive(ToFloat(row[i]) - largest);
  } else {
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < width; ++i) sum += ExpOfNonPositive(Allowed(allowed[i], ToFloat(row[i]), masked_bits) - largest);
  }
  return sum;
#endif
}

// The row's candidates from its logits (`row`, masked_logit where `allowed`, if given, is
// zero), into values[k], indices[k] and *eos_value.
template <bool kMasked, typename T>
void RowCandidates(const T* row, const uint8_t* allowed, uint32_t masked_bits, int64_t width, int64_t k, int64_t eos,
                   float* values, int32_t* indices, float* eos_value) {
  RowTopK best(k, values, indices);
  const auto value = [row, allowed, masked_bits](int64_t i) {
    if constexpr (kMasked) {
      return Allowed(allowed[i], ToFloat(row[i]), masked_bits);
    } else {
      return ToFloat(row[i]);
    }
  };
  const float largest = OfferRow(value, width, &best);
  const float normalizer = largest + std::log(SumOfExponentials(row, allowed, masked_bits, width, largest));
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
          RowCandidates<false>(row, nullptr, masked_bits, width, k, eos, values_out + r * k, indices_out + r * k,
                               eos_out + r);
        } else {
          RowCandidates<true>(row, mask_data + (r / rows_per_sentence) * width, masked_bits, width, k, eos,
                              values_out + r * k, indices_out + r * k, eos_out + r);
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
