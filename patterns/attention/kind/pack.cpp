#include "patterns/attention/kind/pack.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <stdexcept>

namespace fact::attention {

namespace {

// Elements from the value's first element to one past the last one the view addresses (every
// stride non-negative), and the value's own extent.
int64_t view_end(const TensorView& v) {
  int64_t end = v.offset + 1;
  for (size_t d = 0; d < v.shape.size(); ++d) {
    if (v.shape[d] == 0) return v.offset;
    end += (v.shape[d] - 1) * v.stride[d];
  }
  return end;
}

int64_t value_extent(const graph::TensorDesc& desc) {
  int64_t end = 1;
  for (size_t d = 0; d < desc.shape.size(); ++d) {
    if (desc.shape[d] == 0) return 0;
    end += (desc.shape[d] - 1) * desc.stride[d];
  }
  return end;
}

void check_view(const char* name, const TensorView& v, DType dtype, const graph::Graph& captured) {
  if (v.value.empty()) throw std::invalid_argument(std::string(name) + " names no graph value");
  if (v.shape.size() != 4 || v.stride.size() != 4) {
    throw std::invalid_argument(std::string(name) + " is not a [batch, heads, seq, dim] view");
  }
  if (!captured.has_value(v.value)) {
    throw std::invalid_argument(std::string(name) + "'s value '" + v.value + "' is not in the captured graph");
  }
  for (size_t d = 0; d < 4; ++d) {
    if (v.stride[d] < 0) throw std::invalid_argument(std::string(name) + " has a negative stride");
  }
  const graph::TensorDesc& desc = captured.value(v.value).desc;
  if (desc.dtype != dtype) {
    throw std::invalid_argument(std::string(name) + "'s value '" + v.value + "' is " +
                                std::string(graph::dtype_name(desc.dtype)) + ", the attention computes in " +
                                std::string(graph::dtype_name(dtype)));
  }
  if (v.offset < 0 || view_end(v) > value_extent(desc)) {
    throw std::invalid_argument(std::string(name) + " (offset " + std::to_string(v.offset) +
                                ") reaches outside '" + v.value + "' " + desc.to_string());
  }
}

}  // namespace

int32_t abi_dtype(DType dtype) { return core::to_fact_dtype(dtype); }

DType dtype_of_abi(int32_t dtype) { return core::from_fact_dtype(dtype); }

FactAttentionArgs attention_args(const AttentionProblem& p) {
  FactAttentionArgs a;
  std::memset(&a, 0, sizeof(a));
  a.header.abi_version = FACT_ABI_VERSION;
  a.header.kind = fact_kind_id(FACT_ATTENTION_KIND_NAME);
  a.header.size = sizeof(FactAttentionArgs);
  a.batch = static_cast<int32_t>(p.batch);
  a.heads = static_cast<int32_t>(p.heads);
  a.kv_heads = static_cast<int32_t>(p.kv_heads);
  a.seq_q = static_cast<int32_t>(p.seq);
  a.seq_k = static_cast<int32_t>(p.kv_seq);
  a.head_dim = static_cast<int32_t>(p.head_dim);
  a.v_head_dim = static_cast<int32_t>(p.v_head_dim);
  switch (p.mask) {
    case MaskKind::None: a.causal = FACT_ATTN_MASK_NONE; break;
    case MaskKind::CausalTopLeft: a.causal = FACT_ATTN_MASK_CAUSAL_TOP_LEFT; break;
    case MaskKind::CausalBottomRight: a.causal = FACT_ATTN_MASK_CAUSAL_BOTTOM_RIGHT; break;
  }
  if (p.window < 0 || p.window > INT32_MAX || (p.window > 0 && p.mask == MaskKind::None)) {
    throw std::invalid_argument("attention: sliding window " + std::to_string(p.window) +
                                " (needs a causal mask and 0 <= window < 2^31)");
  }
  a.window = static_cast<int32_t>(p.window);
  a.dtype = abi_dtype(p.dtype);
  const std::pair<const TensorView*, int64_t*> views[] = {
      {&p.q, &a.q_batch_stride}, {&p.k, &a.k_batch_stride}, {&p.v, &a.v_batch_stride}, {&p.o, &a.o_batch_stride}};
  for (const auto& [view, strides] : views) {
    if (view->shape.size() != 4 || view->stride.size() != 4) {
      throw std::invalid_argument("attention: a Q/K/V/O view is missing or not rank 4");
    }
    // FactAttentionArgs orders them batch, seq, head; the view is [batch, heads, seq, dim].
    strides[0] = view->stride[0];
    strides[1] = view->stride[2];
    strides[2] = view->stride[1];
  }
  a.lse = nullptr;
  a.scale = static_cast<float>(p.scale);
  a.sm_count = 0;
  a.key_mask = nullptr;
  if (p.key_mask) {
    if (p.mask != MaskKind::None) throw std::invalid_argument("attention: a key mask with a causal mask");
    a.key_mask_batch_stride = p.key_mask->batch_stride;
    a.key_mask_seq_stride = p.key_mask->key_stride;
    a.key_mask_keep = p.key_mask->keep ? 1 : 0;
  }
  return a;
}

namespace {

// Every integer of the struct through ArgImage::put, so that the image records its int fields
// (a declared dynamic range fits them: docs/dynamic_shapes.md); floats stay as copied.
void put_int_fields(ArgImage& image, const FactAttentionArgs& a) {
#define FACT_PUT_FIELD(field) image.put(offsetof(FactAttentionArgs, field), a.field)
  image.put_header(offsetof(FactAttentionArgs, header), a.header);
  FACT_PUT_FIELD(batch);
  FACT_PUT_FIELD(heads);
  FACT_PUT_FIELD(kv_heads);
  FACT_PUT_FIELD(seq_q);
  FACT_PUT_FIELD(seq_k);
  FACT_PUT_FIELD(head_dim);
  FACT_PUT_FIELD(v_head_dim);
  FACT_PUT_FIELD(causal);
  FACT_PUT_FIELD(dtype);
  FACT_PUT_FIELD(window);
  FACT_PUT_FIELD(q_batch_stride);
  FACT_PUT_FIELD(q_seq_stride);
  FACT_PUT_FIELD(q_head_stride);
  FACT_PUT_FIELD(k_batch_stride);
  FACT_PUT_FIELD(k_seq_stride);
  FACT_PUT_FIELD(k_head_stride);
  FACT_PUT_FIELD(v_batch_stride);
  FACT_PUT_FIELD(v_seq_stride);
  FACT_PUT_FIELD(v_head_stride);
  FACT_PUT_FIELD(o_batch_stride);
  FACT_PUT_FIELD(o_seq_stride);
  FACT_PUT_FIELD(o_head_stride);
  FACT_PUT_FIELD(lse_batch_stride);
  FACT_PUT_FIELD(lse_head_stride);
  FACT_PUT_FIELD(sm_count);
  FACT_PUT_FIELD(key_mask_batch_stride);
  FACT_PUT_FIELD(key_mask_seq_stride);
  FACT_PUT_FIELD(key_mask_keep);
  FACT_PUT_FIELD(key_mask_reserved);
#undef FACT_PUT_FIELD
}

}  // namespace

ArgImage pack_attention(const AttentionProblem& p, const graph::Graph& captured) {
  check_view("Q", p.q, p.dtype, captured);
  check_view("K", p.k, p.dtype, captured);
  check_view("V", p.v, p.dtype, captured);
  check_view("O", p.o, p.dtype, captured);
  const graph::TensorDesc& out = captured.value(p.o.value).desc;
  if (out.numel() != p.batch * p.heads * p.seq * p.v_head_dim) {
    throw std::invalid_argument("output '" + p.o.value + "' " + out.to_string() + " does not hold the " +
                                p.shape_string() + " attention output");
  }
  const FactAttentionArgs args = attention_args(p);
  ArgImage image;
  image.bytes.resize(sizeof(FactAttentionArgs));
  std::memcpy(image.bytes.data(), &args, sizeof(args));
  put_int_fields(image, args);
  auto slot = [&](size_t offset, PointerSlot::From from, size_t index, int64_t element_offset) {
    image.pointers.push_back({offset, from, index, element_offset});
  };
  slot(offsetof(FactAttentionArgs, q), PointerSlot::From::Operand, image.operand(p.q.value, p.dtype), p.q.offset);
  slot(offsetof(FactAttentionArgs, k), PointerSlot::From::Operand, image.operand(p.k.value, p.dtype), p.k.offset);
  slot(offsetof(FactAttentionArgs, v), PointerSlot::From::Operand, image.operand(p.v.value, p.dtype), p.v.offset);
  if (p.key_mask) {
    // The mask's row of every batch entry, [batch, 1, 1, kv_seq] over its value's memory.
    const TensorView rows{p.key_mask->value, {p.batch, 1, 1, p.kv_seq},
                          {p.key_mask->batch_stride, 0, 0, p.key_mask->key_stride}, p.key_mask->offset};
    check_view("the key mask", rows, DType::Bool, captured);
    slot(offsetof(FactAttentionArgs, key_mask), PointerSlot::From::Operand,
         image.operand(p.key_mask->value, DType::Bool), p.key_mask->offset);
  }
  image.results.push_back({p.o.value, out.shape, out.stride, p.dtype});
  slot(offsetof(FactAttentionArgs, o), PointerSlot::From::Result, 0, p.o.offset);
  return image;
}

}  // namespace fact::attention
