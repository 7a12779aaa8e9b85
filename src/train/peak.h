// The peak FLOP/s a run's model FLOPs utilisation (MFU) is measured against (docs/PERFORMANCE.md
// "MFU"), and how it was found. No torch here.
//
//   CPU   physical cores used x fp32 vector lanes x FMA units x 2 flops per FMA x clock, from
//         /proc/cpuinfo (flags, cores, vendor, family, model, model name) and cpufreq (clock);
//         the cores used are the run's threads, at most the physical cores (hyper-threads share
//         a core's FMA units). The lanes and units of AVX-512 depend on the part, not the flag:
//         a table by vendor, family, model and model name (avx512_units below; its sources in
//         peak.cpp and docs/PERFORMANCE.md "MFU")
//   CUDA  a table of the vendor datasheets' dense figures by device name and compute capability;
//         the name from the driver API (libcuda.so.1 opened at run time: nothing links CUDA)
//   given --peak-flops or AMPTUNE_PEAK_FLOPS: FLOP/s of one device, when detection is wrong
//
// The peak of a job is one device's x its processes (world size).
#pragma once

#include <optional>
#include <string>

namespace amptune::train {

// A peak figure: FLOP/s (0: not known), the arithmetic it is for ("fp32" | "fp16" | "bf16") and
// how it was found, e.g. "cpu: 2 cores x 16 fp32 lanes (avx512f) x 2 FMA units x 2 flop x
// 2.60 GHz (/proc/cpuinfo cpu MHz)".
struct Peak {
  double flops = 0;
  std::string precision = "fp32";
  std::string source;
};

// What the CPU's vector units can do, as /proc/cpuinfo and cpufreq say.
struct CpuVector {
  int physical_cores = 0;  // distinct (physical id, core id); the processors when not given
  int fp32_lanes = 4;      // avx512f 16 (8 where the part runs it on 256-bit units), avx2 + fma
                           // 8, avx 8, else 4 (SSE)
  int fma_units = 1;       // 2 with avx2 + fma, and with avx512f unless the part has one
                           // 512-bit FMA unit (avx512_units)
  bool fma = false;        // fused multiply-add; without it a multiply and an add per cycle
  std::string isa;         // "avx512f", "avx512f on 256-bit units", "avx2+fma", "avx", "sse"
  std::string part;        // why the AVX-512 lanes / units are what they are (avx512_units:
                           // "AMD Zen 4 runs AVX-512 as 2 x 256 bits", ...); "" by default
  bool amx_bf16 = false, avx512_bf16 = false;
  std::string vendor;           // vendor_id: "GenuineIntel", "AuthenticAMD"
  int family = -1, model = -1;  // cpu family, model (decimal in /proc/cpuinfo); -1 not given
  std::string model_name;
  bool hypervisor = false;  // flag "hypervisor": a virtual machine
  double ghz = 0;           // 0: not known
  std::string clock_from;   // "cpufreq cpuinfo_max_freq", "/proc/cpuinfo cpu MHz", "model name"
};

// The AVX-512 datapath of a part: fp32 lanes per FMA and FMA units per core, with the reason.
struct Avx512Units {
  int lanes = 16;
  int units = 2;
  std::string part;  // "" when the default (two full 512-bit FMA units) applies
};
// The table (sources in peak.cpp): AMD family 0x19 (Zen 4) runs AVX-512 on its two 256-bit FMA
// pipes (8 lanes x 2); family 0x1a (Zen 5) has full 512-bit pipes (16 x 2) but for its mobile
// parts (models 0x20-0x2f: 8 x 2); Intel Skylake-SP / Cascade Lake Xeon Bronze, Silver and
// Gold 5xxx but 5122 / 5222, Xeon W-2102 / 2104, and the client cores Cannon Lake, Ice Lake,
// Tiger Lake and Rocket Lake have one 512-bit FMA unit (16 x 1); every other part 16 x 2.
Avx512Units avx512_units(const std::string& vendor, int family, int model,
                         const std::string& model_name);

// From the text of /proc/cpuinfo (its first processor's vendor, family, model, flags and clock,
// every processor's core), of cpufreq's cpuinfo_max_freq (kHz; "" when the file is absent) and the
// value of ONEDNN_MAX_CPU_ISA ("" when unset; "AVX2" caps the lanes at 8: oneDNN then computes with
// AVX2).
CpuVector parse_cpu(const std::string& cpuinfo, const std::string& max_freq_khz,
                    const std::string& isa_limit = "");

// The peak of `threads` threads (at most the physical cores) of `cpu` in `precision`. The source
// says where the clock came from, and that it is the nominal clock a hypervisor reports when the
// CPU is a VM's and the clock is its `cpu MHz` (its cores may run faster or slower). fp32 and
// fp16 (emulated on a CPU: it computes in fp32) at the fp32 rate; bf16 with amx_bf16 at 1024
// flop per cycle and core, with avx512_bf16 at twice the fp32 rate (each lane a pair of bf16
// products), else fp32's. flops 0 when the clock is not known.
Peak cpu_peak(const CpuVector& cpu, int threads, const std::string& precision);

// A CUDA device as the driver names it.
struct CudaDevice {
  std::string name;  // "NVIDIA H200"
  int major = 0, minor = 0;
};
// Device `ordinal` of the driver API (libcuda.so.1 through dlopen; CUDA_VISIBLE_DEVICES applies);
// unset when the library, the driver or the device is not there.
std::optional<CudaDevice> cuda_device(int ordinal);

// The table's dense peak of `device` in `precision` ("fp32": CUDA cores, no TF32); flops 0 with
// the source saying so when the device is not in the table or its compute capability is not the
// table's (then give --peak-flops).
Peak cuda_peak(const CudaDevice& device, const std::string& precision);

// `text` as a peak in FLOP/s ("3.2e11", "989e12"): the whole text a finite number > 0; unset
// otherwise.
std::optional<double> parse_peak_flops(const std::string& text);

// Where a run's peak comes from.
struct PeakRequest {
  bool cuda = false;
  int device_index = 0;         // the CUDA ordinal
  int threads = 1;              // LibTorch threads of each process
  int world = 1;                // processes of the job
  std::string precision;        // "fp32" | "fp16" | "bf16"
  std::optional<double> given;  // --peak-flops / AMPTUNE_PEAK_FLOPS: one device's FLOP/s
  std::string given_by;         // "--peak-flops" | "AMPTUNE_PEAK_FLOPS"
};
// The job's peak: one device's (given, or detected from this machine) x world.
Peak run_peak(const PeakRequest& request);

}  // namespace amptune::train
