// A decode step's output product in int8, as CTranslate2's int8 decoding does it: each row of the
// step's states quantised to int8 by its own absolute maximum (at every step), each output
// token's weights by theirs (once per search, kernels/int8_logits.py), the products summed in
// int32 and scaled back to logits in the states' dtype. Rows come in groups (a shortlist's), each multiplied
// by its own tokens' weights.
//
// The weights are packed for AVX-512 VNNI's vpdpbusd (unsigned bytes times signed bytes, four
// at a time into 32-bit sums): per group, per block of 16 tokens, per 4 consecutive depths, the
// 16 tokens' 4 bytes. vpdpbusd wants the row's bytes unsigned: a row is stored as q + 128, and
// the 128 x (the token's weight sum) this adds is subtracted after the sum (`sums`). Without
// VNNI the same integer sums are computed by plain loops (slower than the float product).
#ifdef __AVX512VNNI__
#include <immintrin.h>
#endif

#include "rows.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace t2t_keras {
namespace {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;

constexpr int64_t kBlock = 16;  // tokens a block: one 512-bit register of int32 sums

// x rounded to the nearest integer, ties to even, for |x| <= 2^22: adding and subtracting
// 1.5 * 2^23 leaves it so in float32 arithmetic the compiler vectorises (std::nearbyint did not).
inline float RoundedToInteger(float x) {
  constexpr float kRounder = 12582912.f;
  return (x + kRounder) - kRounder;
}

// What a row (states or a token's weights) is quantised by: max |row| / 127, 1 for a zero row;
// q = round-half-even(v / scale) in [-127, 127]. (A division, not a product with 1 / scale: gcc
// contracts a product and the rounder's sum into one FMA, which rounds ties otherwise.)
template <typename T>
float QuantizationScale(const T* row, int64_t depth) {
  float largest = 0.f;
  for (int64_t i = 0; i < depth; ++i) largest = std::max(largest, std::fabs(ToFloat(row[i])));
  return largest > 0.f ? largest / 127.f : 1.f;
}

// Row r of x as bytes q + 128 (vpdpbusd's unsigned operand); returns its scale.
template <typename T>
float QuantizedRow(const T* row, int64_t depth, uint8_t* out) {
  const float scale = QuantizationScale(row, depth);
  for (int64_t i = 0; i < depth; ++i) {
    out[i] = static_cast<uint8_t>(static_cast<int32_t>(RoundedToInteger(ToFloat(row[i]) / scale)) + 128);
  }
  return scale;
}

// The logits of one group: quantised rows x [rows, depth], its packed weights, the token scales
// and sums of its `width` tokens; out [rows, width], in the states' dtype (bfloat16 logits halve
// what the step writes and the beam kernel reads back).
template <typename OutT>
struct Group {
  const uint8_t* x;
  const float* row_scales;
  int64_t rows, depth;
  const int8_t* packed;
  const float* scales;
  const int32_t* sums;
  OutT* out;
  int64_t width;
};

#ifdef __AVX512VNNI__
// The 16 logits of `logits` where `mask` is set, at `to`: float32, or rounded to bfloat16 (to
// nearest even, as FromFloat; the AVX512_BF16 conversion flushes subnormals, which logits never are).
inline void StoreLogits(float* to, __m512 logits, __mmask16 mask) { _mm512_mask_storeu_ps(to, mask, logits); }
inline void StoreLogits(Eigen::bfloat16* to, __m512 logits, __mmask16 mask) {
#ifdef __AVX512BF16__
  _mm256_mask_storeu_epi16(to, mask, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(logits)));
#else
  alignas(64) float values[kBlock];
  _mm512_store_ps(values, logits);
  for (int i = 0; i < kBlock; ++i) {
    if ((mask >> i) & 1) to[i] = FromFloat<Eigen::bfloat16>(values[i]);
  }
#endif
}

constexpr int kRowTile = 4;    // rows sharing each weight load
constexpr int kBlockTile = 2;  // blocks sharing each row's broadcast (4 x 2 was the fastest tile on a Zen 4)

// Rows [r, r + rows) x blocks [b, b + blocks): their int32 sums held in registers over all depth
// quads, then scaled; the last block of the group masked to its width.
template <int rows, int blocks, typename OutT>
inline void Tile(const Group<OutT>& g, int64_t r, int64_t b) {
  const int64_t block_stride = g.depth * kBlock;
  const int8_t* packed = g.packed + b * block_stride;
  const uint8_t* x = g.x + r * g.depth;
  __m512i acc[rows][blocks];
#pragma GCC unroll 4
  for (int i = 0; i < rows; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < blocks; ++j) acc[i][j] = _mm512_setzero_si512();
  for (int64_t q = 0; q < g.depth / 4; ++q) {
    __m512i w[blocks];
#pragma GCC unroll 4
    for (int j = 0; j < blocks; ++j) w[j] = _mm512_loadu_si512(packed + j * block_stride + q * 64);
#pragma GCC unroll 4
    for (int i = 0; i < rows; ++i) {
      const __m512i broadcast = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(x + i * g.depth + q * 4));
#pragma GCC unroll 4
      for (int j = 0; j < blocks; ++j) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], broadcast, w[j]);
    }
  }
  for (int j = 0; j < blocks; ++j) {
    const int64_t column = (b + j) * kBlock;
    const int64_t left = g.width - column;
    const __mmask16 mask = left >= kBlock ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
    const __m512i sums = _mm512_maskz_loadu_epi32(mask, g.sums + column);
    const __m512 scales = _mm512_maskz_loadu_ps(mask, g.scales + column);
    for (int i = 0; i < rows; ++i) {
      const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(g.row_scales[r + i]), scales);
      const __m512 logits = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i][j], sums)), scale);
      StoreLogits(g.out + (r + i) * g.width + column, logits, mask);
    }
  }
}

// Blocks [b, b + blocks) for all of the group's rows: the tile's weights stay in L1 meanwhile.
template <int blocks, typename OutT>
inline void BlockColumn(const Group<OutT>& g, int64_t b) {
  int64_t r = 0;
  for (; r + kRowTile <= g.rows; r += kRowTile) Tile<kRowTile, blocks, OutT>(g, r, b);
  switch (g.rows - r) {
    case 3: Tile<3, blocks, OutT>(g, r, b); break;
    case 2: Tile<2, blocks, OutT>(g, r, b); break;
    case 1: Tile<1, blocks, OutT>(g, r, b); break;
    default: break;
  }
}

template <typename OutT>
void GroupLogits(const Group<OutT>& g, int64_t block_begin, int64_t block_end) {
  int64_t b = block_begin;
  for (; b + kBlockTile <= block_end; b += kBlockTile) BlockColumn<kBlockTile, OutT>(g, b);
  if (b < block_end) BlockColumn<1, OutT>(g, b);
}
#else
template <typename OutT>
void GroupLogits(const Group<OutT>& g, int64_t block_begin, int64_t block_end) {
  const int64_t block_stride = g.depth * kBlock;
  for (int64_t r = 0; r < g.rows; ++r) {
    const uint8_t* x = g.x + r * g.depth;
    for (int64_t column = block_begin * kBlock; column < std::min(g.width, block_end * kBlock); ++column) {
      const int8_t* block = g.packed + (column / kBlock) * block_stride + (column % kBlock) * 4;
      int32_t sum = 0;
      for (int64_t i = 0; i < g.depth; ++i) sum += int32_t{x[i]} * int32_t{block[(i / 4) * 64 + i % 4]};
      g.out[r * g.width + column] =
          FromFloat<OutT>(static_cast<float>(sum - g.sums[column]) * (g.row_scales[r] * g.scales[column]));
    }
  }
}
#endif

template <typename T>
class Int8LogitsOp : public tensorflow::OpKernel {
 public:
  explicit Int8LogitsOp(tensorflow::OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    const Tensor& packed = context->input(1);
    const Tensor& scales = context->input(2);
    const Tensor& sums = context->input(3);
    const Tensor& group_rows = context->input(4);
    OP_REQUIRES(context, x.dims() == 2 && packed.dims() == 4 && scales.dims() == 2 && sums.dims() == 2 && group_rows.dims() == 1,
                tensorflow::errors::InvalidArgument("T2tInt8Logits: x [N, d], packed [G, ceil(U / 16), d / 4, 64], "
                                                    "scales and sums [G, U], group_rows [G]"));
    const int64_t n = x.dim_size(0), depth = x.dim_size(1), groups = packed.dim_size(0);
    const int64_t blocks = packed.dim_size(1), width = scales.dim_size(1);
    OP_REQUIRES(context, depth % 4 == 0 && packed.dim_size(2) * 4 == depth && packed.dim_size(3) == 64 &&
                blocks == (width + kBlock - 1) / kBlock && scales.dim_size(0) == groups && sums.dim_size(0) == groups &&
                sums.dim_size(1) == width && group_rows.dim_size(0) == groups,
                tensorflow::errors::InvalidArgument("T2tInt8Logits: shapes disagree (depth ", depth, ", ", groups,
                                                    " groups of ", width, " tokens in ", blocks, " blocks)"));
    const auto counts = group_rows.flat<int32_t>();
    std::vector<int64_t> starts(groups + 1, 0);
    for (int64_t g = 0; g < groups; ++g) starts[g + 1] = starts[g] + counts(g);
    OP_REQUIRES(context, starts[groups] == n,
                tensorflow::errors::InvalidArgument("T2tInt8Logits: group_rows sum to ", starts[groups], ", not ", n));
    Tensor* logits;
    OP_REQUIRES_OK(context, context->allocate_output(0, tensorflow::TensorShape({n, width}), &logits));
    std::vector<uint8_t> quantized(n * depth);
    std::vector<float> row_scales(n);
    const T* x_data = x.flat<T>().data();
    for (int64_t r = 0; r < n; ++r) row_scales[r] = QuantizedRow(x_data + r * depth, depth, quantized.data() + r * depth);
    std::vector<Group<T>> group_of(groups);
    for (int64_t g = 0; g < groups; ++g) {
      group_of[g] = Group<T>{quantized.data() + starts[g] * depth, row_scales.data() + starts[g], starts[g + 1] - starts[g],
                          depth, packed.flat<int8_t>().data() + g * blocks * depth * kBlock,
                          scales.flat<float>().data() + g * width, sums.flat<int32_t>().data() + g * width,
                          logits->flat<T>().data() + starts[g] * width, width};
    }
    // Work items: a group's rows against 8 of its blocks (128 tokens).
    constexpr int64_t kItemBlocks = 8;
    const int64_t items_per_group = (blocks + kItemBlocks - 1) / kItemBlocks;
    const int64_t cost = (n / std::max<int64_t>(groups, 1) + 1) * depth * kBlock * kItemBlocks / 16;
    ParallelFor(context, groups * items_per_group, cost, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        const Group<T>& g = group_of[item / items_per_group];
        const int64_t first = (item % items_per_group) * kItemBlocks;
        if (g.rows > 0) GroupLogits(g, first, std::min(blocks, first + kItemBlocks));
      }
    });
  }
};

// The output weights of tokens vocabulary [G, U] (rows of table [V, d]) quantised and packed for
// T2tInt8Logits: each token's weights by their absolute maximum (scale max / 127, 1 for a zero
// row), q = round-half-even(w / scale); the last block's missing tokens all zero.
template <typename T>
class PackInt8WeightsOp : public tensorflow::OpKernel {
 public:
  explicit PackInt8WeightsOp(tensorflow::OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& table = context->input(0);
    const Tensor& vocabulary = context->input(1);
    OP_REQUIRES(context, table.dims() == 2 && vocabulary.dims() == 2 && table.dim_size(1) % 4 == 0,
                tensorflow::errors::InvalidArgument("T2tPackInt8Weights: table [V, d] (d a multiple of 4), vocabulary [G, U]"));
    const int64_t depth = table.dim_size(1), groups = vocabulary.dim_size(0), width = vocabulary.dim_size(1);
    const int64_t blocks = (width + kBlock - 1) / kBlock, tokens = table.dim_size(0);
    Tensor *packed, *scales, *sums;
    OP_REQUIRES_OK(context, context->allocate_output(0, tensorflow::TensorShape({groups, blocks, depth / 4, 64}), &packed));
    OP_REQUIRES_OK(context, context->allocate_output(1, tensorflow::TensorShape({groups, width}), &scales));
    OP_REQUIRES_OK(context, context->allocate_output(2, tensorflow::TensorShape({groups, width}), &sums));
    const T* rows = table.flat<T>().data();
    const int32_t* ids = vocabulary.flat<int32_t>().data();
    int8_t* packed_data = packed->flat<int8_t>().data();
    float* scale_data = scales->flat<float>().data();
    int32_t* sum_data = sums->flat<int32_t>().data();
    std::memset(packed_data, 0, packed->NumElements());
    for (int64_t i = 0; i < groups * width; ++i) {
      OP_REQUIRES(context, ids[i] >= 0 && ids[i] < tokens,
                  tensorflow::errors::InvalidArgument("T2tPackInt8Weights: token ", ids[i], " is not a row of the table"));
    }
    ParallelFor(context, groups * width, 4 * depth, [&](int64_t begin, int64_t end) {
      std::vector<float> row(depth);
      std::vector<int32_t> quantized(depth);
      std::vector<int8_t> bytes(depth);
      for (int64_t i = begin; i < end; ++i) {
        LoadRow(rows, depth, ids[i], row.data());
        const float scale = QuantizationScale(row.data(), depth);
        // Quantised in loops the compiler vectorises, then laid out 4 bytes at a time.
        for (int64_t k = 0; k < depth; ++k) {
          quantized[k] = static_cast<int32_t>(RoundedToInteger(std::min(127.f, std::max(-127.f, row[k] / scale))));
        }
        int32_t sum = 0;
        for (int64_t k = 0; k < depth; ++k) {
          sum += quantized[k];
          bytes[k] = static_cast<int8_t>(quantized[k]);
        }
        const int64_t g = i / width, u = i % width;
        int8_t* block = packed_data + ((g * blocks + u / kBlock) * depth / 4) * 64 + (u % kBlock) * 4;
        for (int64_t k = 0; k < depth; k += 4) std::memcpy(block + (k / 4) * 64, bytes.data() + k, 4);
        scale_data[i] = scale;
        sum_data[i] = 128 * sum;
      }
    });
  }
};

}  // namespace

REGISTER_OP("T2tInt8Logits")
    .Input("x: T")
    .Input("packed: int8")
    .Input("scales: float")
    .Input("sums: int32")
    .Input("group_rows: int32")
    .Output("logits: T")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle x, scales;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &scales));
      c->set_output(0, c->Matrix(c->Dim(x, 0), c->Dim(scales, 1)));
      return absl::OkStatus();
    });

REGISTER_KERNEL_BUILDER(Name("T2tInt8Logits").Device(tensorflow::DEVICE_CPU).TypeConstraint<float>("T"),
                        Int8LogitsOp<float>);
REGISTER_KERNEL_BUILDER(Name("T2tInt8Logits").Device(tensorflow::DEVICE_CPU).TypeConstraint<Eigen::bfloat16>("T"),
                        Int8LogitsOp<Eigen::bfloat16>);

REGISTER_OP("T2tPackInt8Weights")
    .Input("table: T")
    .Input("vocabulary: int32")
    .Output("packed: int8")
    .Output("scales: float")
    .Output("sums: int32")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle table, vocabulary;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &table));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &vocabulary));
      c->set_output(0, c->UnknownShapeOfRank(4));
      c->set_output(1, vocabulary);
      c->set_output(2, vocabulary);
      return absl::OkStatus();
    });

REGISTER_KERNEL_BUILDER(Name("T2tPackInt8Weights").Device(tensorflow::DEVICE_CPU).TypeConstraint<float>("T"),
                        PackInt8WeightsOp<float>);
REGISTER_KERNEL_BUILDER(Name("T2tPackInt8Weights").Device(tensorflow::DEVICE_CPU).TypeConstraint<Eigen::bfloat16>("T"),
                        PackInt8WeightsOp<Eigen::bfloat16>);

}  // namespace t2t_keras
