#include "patterns/attention/realize/spec.hpp"

#include <algorithm>
#include <stdexcept>

#include "fact/realize/cutlass_names.hpp"

namespace fact::attention {

namespace {

using nlohmann::json;

const json& field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) throw std::invalid_argument(std::string("attention spec: missing field '") + key + "'");
  return *it;
}

int int_field(const json& j, const char* key) {
  const json& v = field(j, key);
  if (!v.is_number_integer()) throw std::invalid_argument(std::string("attention spec: '") + key + "' is not an integer");
  return v.get<int>();
}

bool bool_field(const json& j, const char* key) {
  const json& v = field(j, key);
  if (!v.is_boolean()) throw std::invalid_argument(std::string("attention spec: '") + key + "' is not a boolean");
  return v.get<bool>();
}

int round_up(int v, int to) { return (v + to - 1) / to * to; }

}  // namespace

std::string AttentionSpec::name() const {
  if (dtype == DType::Float32) {
    return "attn_f32_d" + std::to_string(head_dim) + (causal ? "_causal" : "_noncausal") + "_m" +
           std::to_string(block_m) + "n" + std::to_string(block_n) + (products == 1 ? "_tf32" : "_3xtf32");
  }
  std::string n = "attn_" + std::string(realize::dtype_token(dtype) == "f16" ? "fp16" : realize::dtype_token(dtype)) +
                  "_d" + std::to_string(head_dim) + (causal ? "_causal" : "_noncausal") + "_m" +
                  std::to_string(block_m) + "n" + std::to_string(block_n) + "s" + std::to_string(stages) +
                  "_coop" + (dynamic_schedule ? "_dyn" : "_static");
  n += "_q" + std::to_string(q_stages) + "_o" + std::to_string(tile_order);
  if (!persistent) n += "_np";
  if (o_alias_q) n += "_oq";
  if (l2_percent != 40) n += "_l2" + std::to_string(l2_percent);
  if (tile_head_dim != 0) n += "_t" + std::to_string(tile_head_dim);
  if (key_mask) n += "_km";
  return n;
}

json AttentionSpec::to_json() const {
  json j = {{"dtype", realize::dtype_token(dtype)},
          {"head_dim", head_dim},
          {"v_head_dim", head_dim},
          {"causal", causal},
          {"block_m", block_m},
          {"block_n", block_n},
          {"stages", stages},
          {"scheduler", dynamic_schedule ? "dynamic" : "static"},
          {"persistent", persistent},
          {"q_stages", q_stages},
          {"l2_percent", l2_percent},
          {"tile_order", tile_order},
          {"o_alias_q", o_alias_q}};
  if (tile_head_dim != 0) j["tile_head_dim"] = tile_head_dim;
  if (key_mask) j["key_mask"] = true;
  if (dtype == DType::Float32) j["products"] = products == 1 ? "tf32" : products == 3 ? "3xtf32" : "none";
  return j;
}

AttentionSpec AttentionSpec::from_json(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("attention spec: expected a JSON object");
  AttentionSpec s;
  const json& dtype = field(j, "dtype");
  if (!dtype.is_string()) throw std::invalid_argument("attention spec: 'dtype' is not a string");
  s.dtype = realize::parse_dtype_token(dtype.get<std::string>());
  s.head_dim = int_field(j, "head_dim");
  if (j.contains("v_head_dim") && int_field(j, "v_head_dim") != s.head_dim) {
    throw std::invalid_argument("attention spec: v_head_dim differs from head_dim (one head dim per kernel)");
  }
  s.causal = bool_field(j, "causal");
  s.block_m = int_field(j, "block_m");
  s.block_n = int_field(j, "block_n");
  s.stages = int_field(j, "stages");
  // Specs written before the ping-pong schedule and the deferred PV wait were removed carry
  // both fields: only their cooperative, undeferred values still name a kernel.
  if (j.contains("schedule") && j.at("schedule") != "cooperative") {
    throw std::invalid_argument("attention spec: schedule is 'cooperative' (the only one)");
  }
  if (j.contains("defer_pv_wait") && j.at("defer_pv_wait") != false) {
    throw std::invalid_argument("attention spec: the deferred PV wait no longer exists");
  }
  const json& scheduler = field(j, "scheduler");
  if (scheduler != "dynamic" && scheduler != "static") {
    throw std::invalid_argument("attention spec: scheduler is 'dynamic' or 'static'");
  }
  s.dynamic_schedule = scheduler == "dynamic";
  s.persistent = bool_field(j, "persistent");
  s.q_stages = int_field(j, "q_stages");
  s.l2_percent = int_field(j, "l2_percent");
  s.tile_order = int_field(j, "tile_order");
  s.o_alias_q = bool_field(j, "o_alias_q");
  if (j.contains("tile_head_dim")) s.tile_head_dim = int_field(j, "tile_head_dim");
  if (j.contains("key_mask")) s.key_mask = bool_field(j, "key_mask");
  if (j.contains("products")) {
    const json& products = j.at("products");
    if (products == "3xtf32") {
      s.products = 3;
    } else if (products == "tf32") {
      s.products = 1;
    } else {
      throw std::invalid_argument("attention spec: products is '3xtf32' or 'tf32'");
    }
  }
  return s;
}

realize::KernelSpec AttentionSpec::to_kernel_spec() const {
  return realize::KernelSpec(kKindName, "attention", name(), to_json());
}

AttentionSpec AttentionSpec::of(const realize::KernelSpec& spec) {
  if (spec.kind() != kKindName) {
    throw std::invalid_argument("expected an attention kernel spec, not one of kind '" + spec.kind() + "'");
  }
  return from_json(spec.params());
}

int shared_memory_bytes(const AttentionSpec& s) {
  if (s.dtype == DType::Float32) {  // F32Fmha::kSmemBytes: its Q/K and V row pitches (floats)
    const int pitch_qk = s.head_dim % 16 == 0 ? s.head_dim + 8 : s.head_dim;
    return 4 * ((s.block_m + s.block_n) * pitch_qk + s.block_n * (s.head_dim + 4));
  }
  const int element = 2;
  const int warpgroups = s.block_m / 64;
  const int d = s.tile_head_dim != 0 ? s.tile_head_dim : s.head_dim;  // of the tiles
  const int q = round_up(s.block_m * d * element * s.q_stages, 1024);
  const int k = round_up(s.block_n * d * element * s.stages, 1024);
  const int v = k;
  // O's own buffer; with O in the Q stages an empty member that still takes one 1024-byte slot.
  const int o = s.o_alias_q ? 1024 : round_up(64 * d * element * warpgroups, 1024);
  const int barriers = 8 * (2 * s.q_stages + 4 * s.stages) + 8;  // mbarriers and the next tile
  // SharedStorage's 1024-byte aligned members round its size up to 1024; +1 KB for the kernel's
  // alignment of the dynamic base.
  return round_up(q + k + v + o + barriers, 1024) + 1024;
}

namespace {

// The float32 kernel's rules (fmha_f32_sm90.cuh's static_asserts, and the tiles it builds without
// spilling: at 128 rows two CTAs share an SM whenever their shared memory fits, capping a thread
// at 128 registers, which O, its per-block partial and S exceed below head dim 128).
std::optional<std::string> float32_spec_error(const AttentionSpec& s) {
  if (s.key_mask) return "the float32 kernel reads no key mask";
  if (s.products != 3 && s.products != 1) return "float32 products " + std::to_string(s.products) + " (3: 3xTF32, 1: TF32)";
  if (!float32_kernel_head_dim(s.head_dim)) {
    return "head dim " + std::to_string(s.head_dim) + " is not a multiple of 8 from 16 to 128 (float32 kernel)";
  }
  if (s.block_m != 64 && s.block_m != 128) return "tile M " + std::to_string(s.block_m) + " (64 or 128, float32 kernel)";
  if (s.block_n != 32 && s.block_n != 64) return "tile N " + std::to_string(s.block_n) + " (32 or 64, float32 kernel)";
  if (s.stages != 1 || s.q_stages != 1 || s.dynamic_schedule || s.persistent || s.o_alias_q || s.tile_order != 0 ||
      s.l2_percent != 40 || s.tile_head_dim != 0) {
    return "the float32 kernel has one K/V stage, one Q stage, no persistent or dynamic schedule, "
           "no O-in-Q staging and no padded tile head dim";
  }
  const int smem = shared_memory_bytes(s);
  if (smem > kSharedMemoryLimit) return "shared memory " + std::to_string(smem / 1024) + " KiB over the limit";
  const bool two_ctas = 2 * (smem + 1024) <= 228 * 1024;
  if (s.block_m == 128 && two_ctas) {
    return "tile M 128 spills at head dim " + std::to_string(s.head_dim) +
           " (two CTAs per SM cap a thread at 128 registers)";
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> attention_spec_error(const AttentionSpec& s) {
  if (s.dtype == DType::Float32) return float32_spec_error(s);
  if (s.dtype != DType::BFloat16 && s.dtype != DType::Float16) {
    return "dtype " + std::string(graph::dtype_name(s.dtype)) + " (the kernels are bf16, fp16 or float32)";
  }
  if (s.products != 0) return "products are a float32 kernel's choice";
  if (s.key_mask && s.causal) return "a key mask is built for non-causal kernels only";
  if (s.head_dim <= 0 || s.head_dim % 16 != 0 || s.head_dim > 256) return "head dim " + std::to_string(s.head_dim) + " is not a multiple of 16 up to 256";
  if (s.block_m % 64 != 0 || s.block_m < 64 || s.block_m > 192) return "tile M " + std::to_string(s.block_m) + " (64, 128 or 192)";
  if (s.block_n % 16 != 0 || s.block_n <= 0 || s.block_n > 256) return "tile N " + std::to_string(s.block_n) + " (a multiple of 16 up to 256)";
  if (s.key_mask && s.block_n > 128) return "tile N " + std::to_string(s.block_n) + " with a key mask (one 4-byte read per lane covers at most 128 keys)";
  if (s.stages < 1 || s.stages > 8) return "stages " + std::to_string(s.stages);
  if (s.q_stages < 1 || s.q_stages > 3) return "Q stages " + std::to_string(s.q_stages) + " (1 to 3)";
  if (s.tile_head_dim != 0 &&
      (s.tile_head_dim <= s.head_dim || s.tile_head_dim % 64 != 0 || s.tile_head_dim > 256)) {
    return "tile head dim " + std::to_string(s.tile_head_dim) + " (0, or a multiple of 64 above head dim " +
           std::to_string(s.head_dim) + " up to 256)";
  }
  if (s.dynamic_schedule && !s.persistent) return "a dynamic schedule needs a persistent grid";
  if (s.tile_order != 0 && s.tile_order != 1) return "tile order " + std::to_string(s.tile_order) + " (0 or 1)";
  if (s.l2_percent <= 0 || s.l2_percent > 100) return "L2 share " + std::to_string(s.l2_percent) + "%";
  const int smem = shared_memory_bytes(s);
  if (smem > kSharedMemoryLimit) {
    return "shared memory " + std::to_string(smem / 1024) + " KiB over the " + std::to_string(kSharedMemoryLimit / 1024) +
           " KiB an sm90 CTA can use";
  }
  return std::nullopt;
}

AttentionSpec default_spec(const AttentionProblem& p, core::PrecisionMode precision) {
  AttentionSpec s;
  s.dtype = p.dtype;
  s.head_dim = static_cast<int>(p.head_dim);
  s.causal = p.mask != MaskKind::None;
  s.key_mask = p.key_mask.has_value();
  if (s.dtype == DType::Float32) {
    // Measured on an H100 (bench/results/attention-nvidia-h100-80gb-hbm3-2026-11-27-f32.json):
    // 64-row tiles at d96 (1.50 vs 1.54 ms with 128), 128 at d128 (3.07 vs 3.27 ms).
    s.products = precision == core::PrecisionMode::Tf32 ? 1 : 3;
    s.block_m = s.head_dim >= 128 ? 128 : 64;
    s.block_n = 64;
    s.stages = 1;
    s.q_stages = 1;
    s.dynamic_schedule = false;
    s.persistent = false;
    s.tile_order = 0;
    return s;
  }
  if (s.head_dim <= 64) {
    // One consumer WG, two CTAs per SM: 0.361 ms against 0.391 with 128-row tiles for causal
    // d64 at B16 T2048 H16 (H200, bench/results/attention-nvidia-h200-2026-11-27.json);
    // non-causal, ViT's 64x12x197: 0.0496 against 0.0537, BERT's 32x12x512: 0.0766 against
    // 0.0809 (bench/results/attention-nvidia-h200-2026-11-29-tiles.json).
    s.block_m = 64;
    s.stages = 2;
    s.q_stages = 2;
    s.tile_order = 1;
  } else if (s.head_dim >= 128) {
    s.stages = 2;
    s.q_stages = s.causal ? 1 : 2;
    s.tile_order = s.causal ? 0 : 1;
  } else if (s.head_dim > 64 && s.head_dim < 128 && s.head_dim % 64 != 0) {
    // Tiles 128 wide, zero-padded by TMA: 128-byte swizzled rows instead of 64-byte (d96) or
    // 32-byte (d80) ones. minGPT's d96 at B128 T512 H8: 0.2163 ms against 0.2459 native (3
    // stages); d80 at B8 T1024 H16: 0.0993 against 0.1653 (H200,
    // bench/results/attention-nvidia-h200-2026-11-27-padded.json).
    s.tile_head_dim = 128;
    s.stages = 2;
    s.q_stages = 2;
    s.tile_order = 1;
  } else {
    s.stages = 3;
    s.q_stages = 2;
    s.tile_order = 1;
  }
  // Larger head dims than measured: fewer stages until it fits.
  while (attention_spec_error(s) && s.stages > 1) --s.stages;
  if (attention_spec_error(s) && s.q_stages == 2) s.q_stages = 1;
  return s;
}

}  // namespace fact::attention
