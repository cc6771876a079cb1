"""fact.kernel_profile.kernel_source: who wrote a kernel, from the names the profiler reports
(FACT's entry namespaces, cuBLAS / cuDNN / FlashAttention kernels, cuDNN's convolutions, Inductor's Triton kernels,
the fused optimizer). The kernel profile itself needs a GPU (the benchmarks run it there); the
host profile (host_profile: what holds the host per call, by operator) runs here."""
import pytest
import torch

from fact.kernel_profile import host_profile, kernel_source


@pytest.mark.parametrize("name, source", [
    ("void cutlass::device_kernel<fact_gemm_bias_bf16_tn_128x256x64_kernel::Kernel>(...)", "fact"),
    ("void fact::attention::fmha_kernel<fact::attention::Kernel<128, 128>>(...)", "fact"),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
     "cutlass::gemm::collective::CollectiveMma<...>>>(cutlass::gemm::kernel::GemmUniversal<...>::Params)", "fact"),
    ("_ZN7cutlass13device_kernelIN4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiiEEE", "fact"),
    ("void cutlass::Kernel2<cutlass::gemm::kernel::GemmUniversal<...OpMultiplyAddFastF32...>>(...)", "fact"),
    ("void cutlass::device_kernel<at::cuda::detail::enable_3x_kernel_for_sm9x<...>>(...)", "vendor_gemm"),
    # cuBLAS's float32 SGEMM: a CUTLASS 2.x template named by a plain identifier (not FACT's)
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>(cutlass_80_simt_sgemm_128x256_8x4_nt_align1::Params)",
     "vendor_gemm"),
    ("nvjet_tst_256x128_64x4_2x1_v_bz_coopB_TNT", "vendor_gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "vendor_gemm"),
    ("void cutlass3x_sm90_tensorop_s64x128x16gemm_bf16_bf16_f32_void_bf16_128x128x64_2x1x1_0_tnn_align8_warpspecialized_cooperative_epi_tma<...>", "vendor_gemm"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x128x128_4x1x1", "vendor_attention"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>>(...)", "vendor_attention"),
    ("triton_per_fused_add_mean_mul_pow_rsqrt_0", "triton"),
    ("triton_poi_fused__scaled_dot_product_cudnn_attention_clone_select_squeeze_transpose_unsqueeze_view_3", "triton"),
    ("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_128x128_32x5_nhwc_align8>(...)", "vendor_conv"),
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true>(...)", "vendor_conv"),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64", "vendor_conv"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...FusedAdamMathFunctor...>", "optimizer"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, ...>", "other"),
])
def test_kernel_source_names_who_wrote_a_kernel(name, source):
    assert kernel_source(name) == source


def test_the_host_profile_names_the_operators_a_call_spends_its_host_time_in():
    a, b = torch.randn(64, 64), torch.randn(64, 64)

    def call():
        for _ in range(20):
            torch.mm(a, b)
        return torch.add(a, b)

    profile = host_profile(call, runs=2, top=5)
    assert profile["runs"] == 2 and profile["wall_ms"] > 0
    ops = {row["op"]: row for row in profile["ops"]}
    assert ops["aten::mm"]["calls"] == 20, profile
    assert all(row["self_ms"] >= 0 for row in profile["ops"]) and profile["other_ms"] >= 0
    assert len(profile["ops"]) <= 5
