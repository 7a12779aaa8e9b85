// The peak FLOP/s of train/peak.h: /proc/cpuinfo as crafted text (not this machine's), the CUDA
// table by name and compute capability, the override's parsing, a job's peak.
#include "train/peak.h"

#include <gtest/gtest.h>

#include <string>

namespace amptune::train {
namespace {

// Two processors of one core each on one socket, as a VM shows them, with AVX-512 and AMX.
const char* kTwoCoresAvx512 =
    "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n"
    "cpu MHz\t\t: 2599.996\nphysical id\t: 0\ncore id\t\t: 0\n"
    "flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n\n"
    "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Processor\ncpu MHz\t\t: 2599.996\n"
    "physical id\t: 0\ncore id\t\t: 1\n"
    "flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n\n";

// Four logical processors on two hyper-threaded cores, AVX2 + FMA, the clock in the model name.
const char* kHyperThreadedAvx2 =
    "processor\t: 0\nmodel name\t: Intel(R) Core(TM) i7-4770 CPU @ 3.40GHz\nphysical id\t: 0\n"
    "core id\t\t: 0\nflags\t\t: fpu sse avx fma avx2\n\n"
    "processor\t: 1\nphysical id\t: 0\ncore id\t\t: 1\nflags\t\t: fpu sse avx fma avx2\n\n"
    "processor\t: 2\nphysical id\t: 0\ncore id\t\t: 0\nflags\t\t: fpu sse avx fma avx2\n\n"
    "processor\t: 3\nphysical id\t: 0\ncore id\t\t: 1\nflags\t\t: fpu sse avx fma avx2\n\n";

TEST(CpuPeak, Avx512TwoCoresFromCpuMhz) {
  const CpuVector cpu = parse_cpu(kTwoCoresAvx512, "");
  EXPECT_EQ(cpu.physical_cores, 2);
  EXPECT_EQ(cpu.fp32_lanes, 16);
  EXPECT_EQ(cpu.fma_units, 2);
  EXPECT_TRUE(cpu.amx_bf16);
  EXPECT_DOUBLE_EQ(cpu.ghz, 2.599996);
  // 2 cores x 16 lanes x 2 FMA units x 2 flop x 2.6 GHz = 332.8 GFLOP/s.
  const Peak fp32 = cpu_peak(cpu, 2, "fp32");
  EXPECT_NEAR(fp32.flops, 2 * 16 * 2 * 2 * 2.599996e9, 1);
  EXPECT_EQ(fp32.precision, "fp32");
  EXPECT_EQ(fp32.source,
            "cpu: 2 cores x 16 fp32 lanes (avx512f) x 2 FMA units x 2 flop x 2.60 GHz "
            "(/proc/cpuinfo cpu MHz)");
  // More threads than cores: the cores; one thread: one core.
  EXPECT_EQ(cpu_peak(cpu, 8, "fp32").flops, fp32.flops);
  EXPECT_NEAR(cpu_peak(cpu, 1, "fp32").flops, fp32.flops / 2, 1);
  // bf16 on AMX: 1024 flop per cycle and core.
  EXPECT_NEAR(cpu_peak(cpu, 2, "bf16").flops, 2 * 1024 * 2.599996e9, 1);
  // cpufreq's maximum wins over the current clock.
  EXPECT_DOUBLE_EQ(parse_cpu(kTwoCoresAvx512, "3500000\n").ghz, 3.5);
}

TEST(CpuPeak, OneDnnLimitHoldsTheLanesAndTheBf16Units) {
  const CpuVector cpu = parse_cpu(kTwoCoresAvx512, "", "AVX2");
  EXPECT_EQ(cpu.fp32_lanes, 8);
  EXPECT_EQ(cpu.isa, "avx2+fma, ONEDNN_MAX_CPU_ISA=AVX2");
  EXPECT_FALSE(cpu.amx_bf16);
  EXPECT_FALSE(cpu.avx512_bf16);
  const CpuVector bf16 = parse_cpu(kTwoCoresAvx512, "", "AVX512_CORE_BF16");
  EXPECT_FALSE(bf16.amx_bf16);
  EXPECT_TRUE(bf16.avx512_bf16);
  // Each lane takes a pair of bf16 products: twice the fp32 rate.
  EXPECT_NEAR(cpu_peak(bf16, 2, "bf16").flops, 2 * cpu_peak(bf16, 2, "fp32").flops, 1);
}

TEST(CpuPeak, HyperThreadsShareACore) {
  const CpuVector cpu = parse_cpu(kHyperThreadedAvx2, "");
  EXPECT_EQ(cpu.physical_cores, 2);
  EXPECT_EQ(cpu.isa, "avx2+fma");
  EXPECT_DOUBLE_EQ(cpu.ghz, 3.4);
  EXPECT_EQ(cpu.clock_from, "model name");
  EXPECT_NEAR(cpu_peak(cpu, 4, "fp32").flops, 2 * 8 * 2 * 2 * 3.4e9, 1);
  // fp16 on a CPU is emulated: it computes in fp32.
  EXPECT_EQ(cpu_peak(cpu, 4, "fp16").flops, cpu_peak(cpu, 4, "fp32").flops);
}

TEST(CpuPeak, OldCpuAndUnknownClock) {
  const CpuVector cpu = parse_cpu("processor : 0\nflags : fpu sse sse2\n", "");
  EXPECT_EQ(cpu.physical_cores, 1);
  EXPECT_EQ(cpu.fp32_lanes, 4);
  EXPECT_EQ(cpu.isa, "sse");
  const Peak peak = cpu_peak(cpu, 1, "fp32");
  EXPECT_EQ(peak.flops, 0);
  EXPECT_NE(peak.source.find("unknown clock"), std::string::npos) << peak.source;
}

// One processor of `vendor`, `family`, `model` (decimal, as /proc/cpuinfo writes them) named
// `name`, with AVX-512 (and the hypervisor flag when `vm`), its clock in `cpu MHz`.
std::string one_cpu(const std::string& vendor, int family, int model, const std::string& name,
                    bool vm) {
  return "processor\t: 0\nvendor_id\t: " + vendor + "\ncpu family\t: " + std::to_string(family) +
         "\nmodel\t\t: " + std::to_string(model) + "\nmodel name\t: " + name +
         "\ncpu MHz\t\t: 2600.000\nphysical id\t: 0\ncore id\t\t: 0\n"
         "flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512_bf16" +
         (vm ? " hypervisor" : "") + "\n\n";
}

// AMD Zen 4 (family 0x19 = 25) executes AVX-512 on its two 256-bit FMA pipes: half the peak of
// two 512-bit units (issue 46: a Zen 4 VM's quickstart showed MFU 0.41-0.44 for about 0.85).
// Zen 5 (family 0x1a = 26) has full 512-bit pipes, but for its mobile parts (models 0x20-0x2f).
TEST(CpuPeak, AmdZen4RunsAvx512OnHalfWidthUnitsAndZen5OnFullWidth) {
  const CpuVector zen4 =
      parse_cpu(one_cpu("AuthenticAMD", 25, 17, "AMD EPYC 9R14 96-Core Processor", true), "");
  EXPECT_EQ(zen4.family, 0x19);
  EXPECT_EQ(zen4.model, 17);
  EXPECT_TRUE(zen4.hypervisor);
  EXPECT_EQ(zen4.fp32_lanes * zen4.fma_units, 16);
  const Peak zen4_fp32 = cpu_peak(zen4, 1, "fp32");
  EXPECT_NEAR(zen4_fp32.flops, 8 * 2 * 2 * 2.6e9, 1);  // 83.2 GFLOP/s per core, not 166.4
  EXPECT_EQ(zen4_fp32.source,
            "cpu: 1 core x 8 fp32 lanes (avx512f on 256-bit units: AMD Zen 4 runs AVX-512 as 2 x "
            "256 bits) x 2 FMA units x 2 flop x 2.60 GHz (/proc/cpuinfo cpu MHz: the nominal "
            "clock a VM's hypervisor reports)");
  // Its bf16 dot products (avx512_bf16) on the same pipes: twice its fp32 rate, no more.
  EXPECT_NEAR(cpu_peak(zen4, 1, "bf16").flops, 2 * zen4_fp32.flops, 1);

  const CpuVector zen5 = parse_cpu(one_cpu("AuthenticAMD", 26, 2, "AMD EPYC 9R45", true), "");
  EXPECT_EQ(zen5.fp32_lanes, 16);
  EXPECT_EQ(zen5.fma_units, 2);
  EXPECT_NEAR(cpu_peak(zen5, 1, "fp32").flops, 16 * 2 * 2 * 2.6e9, 1);
  EXPECT_NE(cpu_peak(zen5, 1, "fp32").source.find("AMD Zen 5, 512-bit FMA units"),
            std::string::npos);
  const CpuVector strix =
      parse_cpu(one_cpu("AuthenticAMD", 26, 0x24, "AMD Ryzen AI 9 HX 370", false), "");
  EXPECT_EQ(strix.fp32_lanes * strix.fma_units, 16);
  // Not a VM: the clock is the part's, said without the VM's caveat.
  EXPECT_EQ(cpu_peak(strix, 1, "fp32").source.find("hypervisor"), std::string::npos);
  // An older AMD part with AVX2 only is unchanged: 8 lanes x 2 FMA units.
  const CpuVector zen3 = parse_cpu(
      "processor : 0\nvendor_id : AuthenticAMD\ncpu family : 25\nmodel : 1\n"
      "flags : fpu avx fma avx2\ncpu MHz : 2000\n",
      "");
  EXPECT_EQ(zen3.isa, "avx2+fma");
  EXPECT_EQ(zen3.fp32_lanes * zen3.fma_units, 16);
}

// Intel Xeon parts with one 512-bit FMA unit, told by their model name (ark.intel.com, "# of
// AVX-512 FMA Units"): Skylake-SP / Cascade Lake Bronze, Silver and Gold 5xxx but 5122 / 5222;
// the client cores by model number. The rest, and a VM's generic name, two units.
TEST(CpuPeak, IntelPartsWithOne512BitFmaUnit) {
  const auto units = [](int model, const std::string& name) {
    const CpuVector cpu = parse_cpu(one_cpu("GenuineIntel", 6, model, name, false), "");
    return cpu.fp32_lanes * cpu.fma_units;
  };
  EXPECT_EQ(units(85, "Intel(R) Xeon(R) Silver 4214 CPU @ 2.20GHz"), 16);
  EXPECT_EQ(units(85, "Intel(R) Xeon(R) Bronze 3204 CPU @ 1.90GHz"), 16);
  EXPECT_EQ(units(85, "Intel(R) Xeon(R) Gold 5218 CPU @ 2.30GHz"), 16);
  EXPECT_EQ(units(85, "Intel(R) Xeon(R) Gold 5122 CPU @ 3.60GHz"), 32);
  EXPECT_EQ(units(85, "Intel(R) Xeon(R) Gold 5222 CPU @ 3.80GHz"), 32);
  EXPECT_EQ(units(85, "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz"), 32);
  EXPECT_EQ(units(85, "Intel(R) Xeon(R) Platinum 8280 CPU @ 2.70GHz"), 32);
  EXPECT_EQ(units(85, "Intel(R) Xeon(R) Gold 5320H CPU"), 32);              // Cooper Lake: two
  EXPECT_EQ(units(106, "Intel(R) Xeon(R) Silver 4314 CPU @ 2.40GHz"), 32);  // Ice Lake-SP
  EXPECT_EQ(units(143, "Intel(R) Xeon(R) Platinum 8480+"), 32);             // Sapphire Rapids
  EXPECT_EQ(units(207, "Intel(R) Xeon(R) Processor"), 32);                  // a VM's generic name
  EXPECT_EQ(units(140, "11th Gen Intel(R) Core(TM) i7-1165G7 @ 2.80GHz"), 16);  // Tiger Lake
  EXPECT_EQ(units(126, "Intel(R) Core(TM) i7-1065G7 CPU @ 1.30GHz"), 16);       // Ice Lake
  const CpuVector silver = parse_cpu(
      one_cpu("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Silver 4214 CPU @ 2.20GHz", true), "");
  EXPECT_EQ(cpu_peak(silver, 1, "fp32").source,
            "cpu: 1 core x 16 fp32 lanes (avx512f: Intel Xeon Silver 4214: one 512-bit FMA unit) "
            "x 1 FMA unit x 2 flop x 2.60 GHz (/proc/cpuinfo cpu MHz: the nominal clock a VM's "
            "hypervisor reports)");
  // Held at AVX2 by oneDNN, the part's two 256-bit FMA ports do the work: the same 16 lanes.
  const CpuVector avx2 =
      parse_cpu(one_cpu("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Silver 4214 CPU @ 2.20GHz", false),
                "", "AVX2");
  EXPECT_EQ(avx2.fp32_lanes, 8);
  EXPECT_EQ(avx2.fma_units, 2);
}

TEST(CudaPeak, TableByNameAndComputeCapability) {
  Peak h200 = cuda_peak({"NVIDIA H200", 9, 0}, "bf16");
  EXPECT_DOUBLE_EQ(h200.flops, 989.5e12);
  EXPECT_EQ(h200.source, "cuda table: NVIDIA H200 (cc 9.0) as H200 SXM, bf16 dense 989.5 TFLOP/s");
  EXPECT_DOUBLE_EQ(cuda_peak({"NVIDIA H100 PCIe", 9, 0}, "fp16").flops, 756e12);
  EXPECT_DOUBLE_EQ(cuda_peak({"NVIDIA H100 80GB HBM3", 9, 0}, "fp32").flops, 67e12);
  EXPECT_DOUBLE_EQ(cuda_peak({"NVIDIA A100-SXM4-80GB", 8, 0}, "fp16").flops, 312e12);
  EXPECT_DOUBLE_EQ(cuda_peak({"NVIDIA A10", 8, 6}, "fp16").flops, 125e12);
  EXPECT_DOUBLE_EQ(cuda_peak({"NVIDIA L40S", 8, 9}, "bf16").flops, 362.05e12);
  EXPECT_DOUBLE_EQ(cuda_peak({"NVIDIA L4", 8, 9}, "bf16").flops, 121e12);
  EXPECT_DOUBLE_EQ(cuda_peak({"Tesla V100-SXM2-16GB", 7, 0}, "fp16").flops, 125e12);
  EXPECT_DOUBLE_EQ(cuda_peak({"Tesla V100-PCIE-32GB", 7, 0}, "fp16").flops, 112e12);
  // V100 has no bf16 tensor cores: its fp32 rate.
  EXPECT_DOUBLE_EQ(cuda_peak({"Tesla V100-SXM2-16GB", 7, 0}, "bf16").flops, 15.7e12);
  EXPECT_DOUBLE_EQ(cuda_peak({"NVIDIA B200", 10, 0}, "bf16").flops, 2250e12);
  // Not in the table, or a name with another compute capability: unknown, and what to do.
  const Peak unknown = cuda_peak({"NVIDIA GeForce RTX 4090", 8, 9}, "fp16");
  EXPECT_EQ(unknown.flops, 0);
  EXPECT_NE(unknown.source.find("give --peak-flops"), std::string::npos) << unknown.source;
  EXPECT_EQ(cuda_peak({"NVIDIA A100-SXM4-80GB", 9, 0}, "fp16").flops, 0);
}

TEST(PeakOverride, OnlyAPositiveNumberIsTaken) {
  EXPECT_EQ(parse_peak_flops("3.2e11"), 3.2e11);
  EXPECT_EQ(parse_peak_flops(" 989e12 "), 989e12);
  for (const char* bad : {"", "0", "-1e12", "abc", "1e12x", "inf", "nan", "1e999"}) {
    EXPECT_FALSE(parse_peak_flops(bad)) << bad;
  }
}

TEST(PeakOverride, GivenPeakIsOneDevicesTimesTheProcesses) {
  PeakRequest request;
  request.precision = "bf16";
  request.given = 1e12;
  request.given_by = "AMPTUNE_PEAK_FLOPS";
  const Peak one = run_peak(request);
  EXPECT_EQ(one.flops, 1e12);
  EXPECT_EQ(one.source, "AMPTUNE_PEAK_FLOPS");
  EXPECT_EQ(one.precision, "bf16");
  request.world = 4;
  const Peak four = run_peak(request);
  EXPECT_EQ(four.flops, 4e12);
  EXPECT_EQ(four.source, "AMPTUNE_PEAK_FLOPS x 4 processes");
}

}  // namespace
}  // namespace amptune::train
