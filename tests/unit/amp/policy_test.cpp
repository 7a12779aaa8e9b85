// The apex opt_level property table, the levels' order by fp32 work, overrides, refused
// combinations and backend choice.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "amp/policy.h"
#include "core/config.h"
#include "core/error.h"
#include "core/settings.h"

namespace amptune::amp {
namespace {

AmpSettings make(std::initializer_list<std::pair<const char*, const char*>> kv) {
  Config c;
  for (const auto& [k, v] : kv) c.set_yaml(k, v, SourceLoc{"test"});
  return Settings::from(c).amp;
}

std::string error_of(const AmpSettings& c, bool cuda = false) {
  try {
    resolve_policy(c, cuda);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(AmpPolicy, ApexPropertyTable) {
  auto o0 = resolve_policy(make({}), false);
  EXPECT_EQ(o0.opt_level, OptLevel::kO0);
  EXPECT_FALSE(o0.cast_model || o0.patch_ops || o0.master_weights || o0.dynamic_scale);
  EXPECT_EQ(o0.static_scale, 1.0);
  EXPECT_EQ(o0.backend, Backend::kNone);

  auto o1 = resolve_policy(make({{"amp.opt_level", "O1"}}), false);
  EXPECT_TRUE(o1.patch_ops);
  EXPECT_FALSE(o1.cast_model || o1.master_weights);
  EXPECT_TRUE(o1.dynamic_scale);
  EXPECT_EQ(o1.init_scale, 65536.0);
  EXPECT_EQ(o1.backend, Backend::kEmulate);  // CPU + fp16: no kernels

  auto o2 = resolve_policy(make({{"amp.opt_level", "O2"}}), false);
  EXPECT_TRUE(o2.cast_model && o2.keep_batchnorm_fp32 && o2.master_weights && o2.dynamic_scale);
  EXPECT_FALSE(o2.patch_ops);

  auto o3 = resolve_policy(make({{"amp.opt_level", "O3"}}), false);
  EXPECT_TRUE(o3.cast_model);
  EXPECT_FALSE(o3.keep_batchnorm_fp32 || o3.master_weights || o3.dynamic_scale);
  EXPECT_EQ(o3.static_scale, 1.0);
  EXPECT_EQ(o3.loss_scale_text(), "1.0");
  EXPECT_EQ(o2.loss_scale_text(), "dynamic");
}

// The order of the levels by the fp32 work they keep, which amptune tune steps along and ranks
// by: O3 -> O2 -> O1 -> O0, each level once; and it agrees with the property table (a step
// toward fp32 never casts more of the model).
TEST(AmpPolicy, OptLevelsInTheOrderOfTheirFp32Work) {
  std::vector<OptLevel> path = {OptLevel::kO3};
  while (auto next = toward_fp32(path.back())) path.push_back(*next);
  EXPECT_EQ(path,
            (std::vector<OptLevel>{OptLevel::kO3, OptLevel::kO2, OptLevel::kO1, OptLevel::kO0}));
  for (size_t i = 0; i < path.size(); ++i) EXPECT_EQ(fp32_order(path[i]), static_cast<int>(i));
  EXPECT_EQ(fp32_summary(OptLevel::kO2), "fp32 master weights");
  EXPECT_EQ(fp32_summary(OptLevel::kO1), "per-op casts, fp32 weights");
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    const Policy low = apex_properties(make({{"amp.opt_level", to_string(path[i]).c_str()}}));
    const Policy high = apex_properties(make({{"amp.opt_level", to_string(path[i + 1]).c_str()}}));
    EXPECT_GE(low.cast_model, high.cast_model) << to_string(path[i]);
    EXPECT_LE(low.master_weights || !low.cast_model, high.master_weights || !high.cast_model)
        << to_string(path[i]);
  }
}

TEST(AmpPolicy, OverridesApexAllows) {
  auto p = resolve_policy(make({{"amp.opt_level", "O3"}, {"amp.keep_batchnorm_fp32", "true"},
                                {"amp.loss_scale", "128"}}),
                          false);
  EXPECT_TRUE(p.keep_batchnorm_fp32);
  EXPECT_FALSE(p.dynamic_scale);
  EXPECT_EQ(p.static_scale, 128.0);
  auto q = resolve_policy(make({{"amp.opt_level", "O2"}, {"amp.loss_scale", "-1"}}), false);
  EXPECT_TRUE(q.dynamic_scale);  // -1 is the Ascend scripts' dynamic
  auto r = resolve_policy(make({{"amp.opt_level", "O0"}, {"amp.loss_scale", "dynamic"}}), false);
  EXPECT_TRUE(r.dynamic_scale);
  auto m = resolve_policy(make({{"amp.max_loss_scale", "1024"}, {"amp.opt_level", "O1"}}), false);
  EXPECT_EQ(m.init_scale, 1024.0);  // min(2^16, max)
}

TEST(AmpPolicy, RefusedCombinationsNameTheKey) {
  EXPECT_NE(error_of(make({{"amp.opt_level", "O1"}, {"amp.keep_batchnorm_fp32", "true"}}))
                .find("amp.keep_batchnorm_fp32 must be auto with amp.opt_level O1"),
            std::string::npos);
  EXPECT_NE(error_of(make({{"amp.opt_level", "O1"}, {"amp.master_weights", "false"}}))
                .find("amp.master_weights must be auto with amp.opt_level O1"),
            std::string::npos);
  EXPECT_NE(error_of(make({{"amp.opt_level", "O2"}, {"amp.master_weights", "false"},
                           {"amp.combine_grad", "true"}}))
                .find("amp.combine_grad true with amp.opt_level O2 needs master weights"),
            std::string::npos);
  EXPECT_NE(error_of(make({{"amp.master_weights", "true"}})).find("amp.master_weights"),
            std::string::npos);
  EXPECT_NE(error_of(make({{"amp.opt_level", "O1"}, {"amp.backend", "native"}}))
                .find("amp.backend native"),
            std::string::npos);
  EXPECT_NE(error_of(make({{"amp.opt_level", "O2"}, {"amp.dtype", "bf16"},
                           {"amp.backend", "native"}}))
                .find("amp.backend native"),
            std::string::npos);
  EXPECT_NE(error_of(make({{"amp.min_loss_scale", "1e9"}})).find("amp.min_loss_scale"),
            std::string::npos);
  // FP8 keys set in code (past the schema's checks) are held to the schema's bounds.
  AmpSettings fp8 = make({{"amp.fp8.enabled", "true"}});
  fp8.fp8.margin = 65;
  EXPECT_EQ(error_of(fp8), "amp.fp8.margin must be in 0..64, got 65");
  fp8.fp8.margin = 0;
  fp8.fp8.amax_history_len = 0;
  EXPECT_EQ(error_of(fp8), "amp.fp8.amax_history_len must be in 1..16384, got 0");
  // Config typing itself refuses a bad word.
  Config c;
  EXPECT_THROW(c.set_yaml("amp.master_weights", "maybe", SourceLoc{"t"}), ConfigError);
  EXPECT_THROW(c.set_yaml("amp.loss_scale", "0", SourceLoc{"t"}), ConfigError);
}

TEST(AmpPolicy, CpuBf16FlagsFromCpuinfo) {
  EXPECT_FALSE(cpu_caps_from_flags("fpu sse avx2 f16c avx512f avx512bw").bf16());  // Zen 3-like
  const CpuCaps zen4 = cpu_caps_from_flags(" fpu avx512f avx512_bf16 avx512_vnni");
  EXPECT_TRUE(zen4.bf16());
  EXPECT_EQ(zen4.bf16_flags, "avx512_bf16");
  EXPECT_EQ(cpu_caps_from_flags("amx_tile avx512_bf16 amx_bf16").bf16_flags,
            "avx512_bf16 amx_bf16");
  EXPECT_FALSE(cpu_caps_from_flags("xavx512_bf16 avx512_bf16x").bf16());  // whole words only
}

// oneDNN held below its bf16 kernels (ONEDNN_MAX_CPU_ISA=AVX2) on a CPU that has them: PyTorch
// would still send bf16 convolutions to oneDNN, which cannot run them. auto emulates, native is
// refused; a limit that keeps them, or a CPU without them, changes nothing.
TEST(AmpPolicy, AOneDnnIsaLimitBelowBf16RulesNativeBf16Out) {
  const CpuCaps held = cpu_caps_from_flags("avx2 avx512_bf16", "avx2");
  EXPECT_FALSE(held.bf16());
  EXPECT_EQ(held.isa_limit, "ONEDNN_MAX_CPU_ISA=avx2");
  EXPECT_TRUE(cpu_caps_from_flags("avx512_bf16", "AVX512_CORE_BF16").bf16());
  EXPECT_TRUE(cpu_caps_from_flags("avx512_bf16 amx_bf16", "avx512_core_amx").bf16());
  EXPECT_TRUE(cpu_caps_from_flags("avx512_bf16", "ALL").bf16());
  EXPECT_EQ(cpu_caps_from_flags("avx2", "AVX2").isa_limit, "");  // nothing to rule out
  const AmpSettings o1_bf16 = make({{"amp.opt_level", "O1"}, {"amp.dtype", "bf16"}});
  const Policy p = resolve_policy(o1_bf16, false, held);
  EXPECT_EQ(p.backend, Backend::kEmulate);
  EXPECT_EQ(p.backend_reason,
            "auto: oneDNN is held to ONEDNN_MAX_CPU_ISA=avx2, which has no bf16 kernels");
  const AmpSettings native = make({{"amp.opt_level", "O1"}, {"amp.dtype", "bf16"},
                                   {"amp.backend", "native"}});
  EXPECT_THROW(resolve_policy(native, false, held), ConfigError);
  EXPECT_EQ(resolve_policy(native, true, held).backend, Backend::kNative);  // CUDA: not oneDNN
}

TEST(AmpPolicy, AutoPicksNativeBf16OnlyOnACpuWithBf16Instructions) {
  const AmpSettings o1_bf16 = make({{"amp.opt_level", "O1"}, {"amp.dtype", "bf16"}});
  const CpuCaps with = cpu_caps_from_flags("avx2 avx512_bf16"), without = cpu_caps_from_flags("avx2");
  const Policy fast = resolve_policy(o1_bf16, false, with);
  EXPECT_EQ(fast.backend, Backend::kNative);
  EXPECT_EQ(fast.backend_reason, "auto: the CPU has avx512_bf16 (oneDNN bf16 kernels)");
  EXPECT_FALSE(fast.slow_backend);
  const Policy slow = resolve_policy(o1_bf16, false, without);
  EXPECT_EQ(slow.backend, Backend::kEmulate);
  EXPECT_NE(slow.backend_reason.find("lacks avx512_bf16 / amx_bf16"), std::string::npos);
  EXPECT_FALSE(slow.slow_backend);
  // Forcing native where it is slow is allowed, flagged (the trainer warns) and explained.
  const AmpSettings forced = make({{"amp.opt_level", "O1"}, {"amp.dtype", "bf16"},
                              {"amp.backend", "native"}});
  const Policy forced_slow = resolve_policy(forced, false, without);
  EXPECT_EQ(forced_slow.backend, Backend::kNative);
  EXPECT_TRUE(forced_slow.slow_backend);
  EXPECT_NE(forced_slow.backend_reason.find("without avx512_bf16"), std::string::npos);
  EXPECT_FALSE(resolve_policy(forced, false, with).slow_backend);
  EXPECT_FALSE(resolve_policy(forced, true, without).slow_backend);  // CUDA: not the CPU's
  EXPECT_EQ(resolve_policy(o1_bf16, true, without).backend, Backend::kNative);
  EXPECT_EQ(resolve_policy(o1_bf16, true, without).backend_reason, "auto: CUDA kernels");
}

TEST(AmpPolicy, BackendChoice) {
  auto bf16 = resolve_policy(make({{"amp.opt_level", "O1"}, {"amp.dtype", "bf16"}}), false,
                             cpu_caps_from_flags("avx512_bf16"));
  EXPECT_EQ(bf16.backend, Backend::kNative);  // CPU autocast has bf16 kernels
  auto bf16_o2 = resolve_policy(make({{"amp.opt_level", "O2"}, {"amp.dtype", "bf16"}}), false);
  EXPECT_EQ(bf16_o2.backend, Backend::kEmulate);
  auto cuda = resolve_policy(make({{"amp.opt_level", "O2"}}), true);
  EXPECT_EQ(cuda.backend, Backend::kNative);
  auto forced = resolve_policy(make({{"amp.opt_level", "O1"}, {"amp.dtype", "bf16"},
                                     {"amp.backend", "emulate"}}),
                               false);
  EXPECT_EQ(forced.backend, Backend::kEmulate);
  EXPECT_EQ(to_string(forced.backend), "emulate");
}

}  // namespace
}  // namespace amptune::amp
