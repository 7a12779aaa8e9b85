#include "train/peak.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "core/log.h"

namespace amptune::train {

namespace {

std::string trim(const std::string& text) {
  const auto begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t\r\n") - begin + 1);
}

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

// A decimal number that is the whole of `text` (after trimming); unset otherwise.
std::optional<double> number(const std::string& text) {
  const std::string t = trim(text);
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::string fixed(double value, int digits) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(digits);
  out << value;
  return out.str();
}

// The clock in a model name: "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz" -> 2.1.
std::optional<double> model_name_ghz(const std::string& name) {
  const auto at = name.find('@');
  const auto ghz = name.rfind("GHz");
  if (at == std::string::npos || ghz == std::string::npos || ghz < at) return std::nullopt;
  return number(name.substr(at + 1, ghz - at - 1));
}

// The number after `word` in `name` ("Intel(R) Xeon(R) Gold 5218 CPU" and "Gold" -> 5218); -1
// when the word is not there or no number follows it.
int number_after(const std::string& name, const std::string& word) {
  const auto at = name.find(word + " ");
  if (at == std::string::npos) return -1;
  size_t i = at + word.size() + 1;
  int value = 0, digits = 0;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && digits < 6;
       ++i, ++digits) {
    value = value * 10 + (name[i] - '0');
  }
  return digits > 0 ? value : -1;
}

// The vector lanes and FMA units of `flags` (a /proc/cpuinfo flags line), held at `limit`.
void read_flags(const std::string& flags, const std::string& limit, CpuVector& cpu) {
  std::istringstream words(flags);
  const std::set<std::string> have{std::istream_iterator<std::string>(words), {}};
  const std::string cap = upper(limit);
  const bool limited = !cap.empty() && cap != "ALL" && cap != "DEFAULT";
  const bool avx512 = have.count("avx512f") && !(limited && cap.rfind("AVX512", 0) != 0);
  const bool avx = have.count("avx") && !(limited && cap.rfind("AVX", 0) != 0);
  cpu.fma = have.count("fma") > 0 && avx;
  cpu.hypervisor = have.count("hypervisor") > 0;
  const bool amx_allowed = !limited || cap.find("AMX") != std::string::npos;
  cpu.amx_bf16 = have.count("amx_bf16") && avx512 && amx_allowed;
  cpu.avx512_bf16 =
      have.count("avx512_bf16") && avx512 && (amx_allowed || cap.find("BF16") != std::string::npos);
  if (avx512) {
    const Avx512Units units = avx512_units(cpu.vendor, cpu.family, cpu.model, cpu.model_name);
    cpu.fp32_lanes = units.lanes, cpu.fma_units = units.units, cpu.part = units.part;
    cpu.isa = units.lanes == 8 ? "avx512f on 256-bit units" : "avx512f";
  } else if (avx && have.count("avx2") && cpu.fma) {
    cpu.fp32_lanes = 8, cpu.fma_units = 2, cpu.isa = "avx2+fma";
  } else if (avx) {
    cpu.fp32_lanes = 8, cpu.fma_units = 1, cpu.isa = "avx";
  } else {
    cpu.fp32_lanes = 4, cpu.fma_units = 1, cpu.isa = "sse";
  }
  if (limited) cpu.isa += ", ONEDNN_MAX_CPU_ISA=" + limit;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// One row of the CUDA table: dense TFLOP/s of the vendor's datasheet (with-sparsity figures
// halved), fp32 on the CUDA cores (no TF32), fp16 / bf16 on the tensor cores (a part without
// bf16 tensor cores at its fp32 rate). docs/PERFORMANCE.md "MFU" cites each.
struct CudaRow {
  const char* model;    // a token of the driver's name: "H100"
  const char* variant;  // a further token ("PCIE", "NVL"), "" for the SXM part
  const char* label;    // "H100 SXM"
  int major, minor;
  double fp32, fp16, bf16;
};
constexpr CudaRow kCudaTable[] = {
    {"V100", "PCIE", "V100 PCIe", 7, 0, 14.0, 112.0, 14.0},
    {"V100", "", "V100 SXM2", 7, 0, 15.7, 125.0, 15.7},
    {"A100", "", "A100", 8, 0, 19.5, 312.0, 312.0},
    {"A10", "", "A10", 8, 6, 31.2, 125.0, 125.0},
    {"L4", "", "L4", 8, 9, 30.3, 121.0, 121.0},
    {"L40S", "", "L40S", 8, 9, 91.6, 362.05, 362.05},
    {"H100", "PCIE", "H100 PCIe", 9, 0, 51.0, 756.0, 756.0},
    {"H100", "NVL", "H100 NVL", 9, 0, 60.0, 835.0, 835.0},
    {"H100", "", "H100 SXM", 9, 0, 67.0, 989.5, 989.5},
    {"H200", "NVL", "H200 NVL", 9, 0, 60.0, 835.0, 835.0},
    {"H200", "", "H200 SXM", 9, 0, 67.0, 989.5, 989.5},
    {"B200", "", "B200", 10, 0, 75.0, 2250.0, 2250.0},
};

// The driver's name in tokens: "NVIDIA A100-SXM4-80GB" -> NVIDIA, A100, SXM4, 80GB (upper case).
std::set<std::string> name_tokens(const std::string& name) {
  std::set<std::string> tokens;
  std::string token;
  for (char c : name + " ") {
    if (c == ' ' || c == '-' || c == '_') {
      if (!token.empty()) tokens.insert(upper(token));
      token.clear();
    } else {
      token += c;
    }
  }
  return tokens;
}

}  // namespace

// Sources (docs/PERFORMANCE.md "MFU" lists them too):
// - AMD, Software Optimization Guide for the AMD Zen4 Microarchitecture (pub. 57647, 2023),
//   "Floating-Point Unit": the FP pipes are 256 bits wide and a 512-bit instruction is executed
//   as two 256-bit halves, so AVX-512 doubles the work per instruction, not per cycle: two
//   256-bit FMA pipes, 8 fp32 lanes x 2 per cycle (family 0x19: Zen 3 has no avx512f, every
//   Zen 4 has it).
// - AMD, Software Optimization Guide for the AMD Zen5 Microarchitecture (pub. 58455, 2024): the
//   FP datapath is 512 bits wide (two 512-bit FMA pipes: 16 x 2) in the desktop and server
//   parts; the mobile parts (Strix Point, family 0x1a models 0x20-0x2f) keep 256-bit pipes and
//   run AVX-512 as Zen 4 does (8 x 2).
// - Intel, ark.intel.com, "# of AVX-512 FMA Units" of each Xeon Scalable part: 1 for Bronze
//   31xx / 32xx, Silver 41xx / 42xx and Gold 51xx / 52xx (Skylake-SP and Cascade Lake, family 6
//   model 0x55) but Gold 5122 and 5222 (2); 2 for Gold 6xxx, Platinum, Cooper Lake (Gold 53xx on
//   the same model number) and every later generation.
// - Intel 64 and IA-32 Architectures Optimization Reference Manual (248966), Ice Lake client
//   microarchitecture: one 512-bit FMA unit (ports 0 and 1 fused), as in Cannon Lake (model
//   0x66), Ice Lake client (0x7d, 0x7e), Tiger Lake (0x8c, 0x8d) and Rocket Lake (0xa7).
// A VM whose model name is the generic "Intel(R) Xeon(R) Processor" cannot be told apart: it
// gets the two units of the current server parts (--peak-flops when that is wrong).
Avx512Units avx512_units(const std::string& vendor, int family, int model,
                         const std::string& model_name) {
  Avx512Units u;
  if (vendor == "AuthenticAMD" && family == 0x19) {
    u.lanes = 8, u.part = "AMD Zen 4 runs AVX-512 as 2 x 256 bits";
  } else if (vendor == "AuthenticAMD" && family == 0x1a && model >= 0x20 && model <= 0x2f) {
    u.lanes = 8, u.part = "AMD Zen 5 mobile runs AVX-512 as 2 x 256 bits";
  } else if (vendor == "AuthenticAMD" && family == 0x1a) {
    u.part = "AMD Zen 5, 512-bit FMA units";
  } else if (vendor == "GenuineIntel" && family == 6 &&
             (model == 0x66 || model == 0x7d || model == 0x7e || model == 0x8c || model == 0x8d ||
              model == 0xa7)) {
    u.units = 1, u.part = "Intel client core: one 512-bit FMA unit";
  } else if (vendor == "GenuineIntel" && family == 6 && model == 0x55) {
    const int bronze = number_after(model_name, "Bronze");
    const int silver = number_after(model_name, "Silver");
    const int gold = number_after(model_name, "Gold");
    if (bronze >= 3100 && bronze < 3300) {
      u.units = 1,
      u.part = "Intel Xeon Bronze " + std::to_string(bronze) + ": one 512-bit FMA unit";
    } else if (silver >= 4100 && silver < 4300) {
      u.units = 1,
      u.part = "Intel Xeon Silver " + std::to_string(silver) + ": one 512-bit FMA unit";
    } else if (gold >= 5100 && gold < 5300 && gold != 5122 && gold != 5222) {
      u.units = 1, u.part = "Intel Xeon Gold " + std::to_string(gold) + ": one 512-bit FMA unit";
    }
  }
  return u;
}

CpuVector parse_cpu(const std::string& cpuinfo, const std::string& max_freq_khz,
                    const std::string& isa_limit) {
  CpuVector cpu;
  std::set<std::pair<std::string, std::string>> cores;  // (physical id, core id)
  std::string physical, flags, mhz, model, vendor, family, model_number;
  int processors = 0;
  std::istringstream lines(cpuinfo);
  std::string line;
  while (std::getline(lines, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    if (key == "processor")
      ++processors;
    else if (key == "physical id")
      physical = value;
    else if (key == "core id")
      cores.emplace(physical, value);
    else if (key == "flags" && flags.empty())
      flags = value;
    else if (key == "cpu MHz" && mhz.empty())
      mhz = value;
    else if (key == "model name" && model.empty())
      model = value;
    else if (key == "vendor_id" && vendor.empty())
      vendor = value;
    else if (key == "cpu family" && family.empty())
      family = value;
    else if (key == "model" && model_number.empty())
      model_number = value;
  }
  cpu.vendor = vendor;
  cpu.model_name = model;
  const auto small = [](const std::string& text) {
    const auto v = number(text);
    return v && *v >= 0 && *v < 4096 && *v == std::floor(*v) ? static_cast<int>(*v) : -1;
  };
  cpu.family = small(family);
  cpu.model = small(model_number);
  cpu.physical_cores = cores.empty() ? processors : static_cast<int>(cores.size());
  read_flags(flags, isa_limit, cpu);
  if (const auto khz = number(max_freq_khz); khz && *khz > 0) {
    cpu.ghz = *khz / 1e6, cpu.clock_from = "cpufreq cpuinfo_max_freq";
  } else if (const auto m = number(mhz); m && *m > 0) {
    cpu.ghz = *m / 1e3, cpu.clock_from = "/proc/cpuinfo cpu MHz";
  } else if (const auto g = model_name_ghz(model); g && *g > 0) {
    cpu.ghz = *g, cpu.clock_from = "model name";
  }
  return cpu;
}

Peak cpu_peak(const CpuVector& cpu, int threads, const std::string& precision) {
  const int cores =
      std::max(1, cpu.physical_cores > 0 ? std::min(threads, cpu.physical_cores) : threads);
  // A VM's `cpu MHz` is what the hypervisor reports (often the part's nominal clock), not
  // what its cores run at.
  const bool vm_clock = cpu.hypervisor && cpu.clock_from == "/proc/cpuinfo cpu MHz";
  const std::string clock = fixed(cpu.ghz, 2) + " GHz (" + cpu.clock_from +
                            (vm_clock ? ": the nominal clock a VM's hypervisor reports" : "") + ")";
  Peak peak;
  peak.precision = precision;
  std::string per_core;
  double flop_per_cycle = 0;
  if (precision == "bf16" && cpu.amx_bf16) {
    flop_per_cycle = 1024;
    per_core = "1024 bf16 flop per cycle (amx_bf16)";
  } else {
    const int pairs = precision == "bf16" && cpu.avx512_bf16 ? 2 : 1;
    flop_per_cycle = static_cast<double>(cpu.fp32_lanes * pairs * cpu.fma_units * 2);
    per_core = std::to_string(cpu.fp32_lanes) + " fp32 lanes (" + cpu.isa +
               (cpu.part.empty() ? "" : ": " + cpu.part) + ")" +
               (pairs == 2 ? " x 2 bf16 products (avx512_bf16)" : "") + " x " +
               std::to_string(cpu.fma_units) +
               (!cpu.fma             ? " x mul + add"
                : cpu.fma_units == 1 ? " FMA unit x 2 flop"
                                     : " FMA units x 2 flop");
  }
  peak.flops = static_cast<double>(cores) * flop_per_cycle * cpu.ghz * 1e9;
  peak.source = "cpu: " + std::to_string(cores) + (cores == 1 ? " core x " : " cores x ") +
                per_core + " x " + (cpu.ghz > 0 ? clock : "unknown clock");
  return peak;
}

std::optional<CudaDevice> cuda_device(int ordinal) {
  // The driver API's C functions (cuda.h), looked up by name: CUresult is an int, CUdevice an
  // int; attributes 75 / 76 are the compute capability's major / minor.
  using Init = int (*)(unsigned);
  using Get = int (*)(int*, int);
  using Name = int (*)(char*, int, int);
  using Attribute = int (*)(int*, int, int);
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return std::nullopt;
  std::optional<CudaDevice> device;
  const auto init = reinterpret_cast<Init>(::dlsym(lib, "cuInit"));
  const auto get = reinterpret_cast<Get>(::dlsym(lib, "cuDeviceGet"));
  const auto name = reinterpret_cast<Name>(::dlsym(lib, "cuDeviceGetName"));
  const auto attribute = reinterpret_cast<Attribute>(::dlsym(lib, "cuDeviceGetAttribute"));
  int handle = 0;
  char text[256] = {};
  CudaDevice d;
  if (init && get && name && attribute && init(0) == 0 && get(&handle, ordinal) == 0 &&
      name(text, sizeof(text) - 1, handle) == 0 && attribute(&d.major, 75, handle) == 0 &&
      attribute(&d.minor, 76, handle) == 0) {
    d.name = text;
    device = d;
  }
  ::dlclose(lib);
  return device;
}

Peak cuda_peak(const CudaDevice& device, const std::string& precision) {
  Peak peak;
  peak.precision = precision;
  const std::string cc = std::to_string(device.major) + "." + std::to_string(device.minor);
  const std::set<std::string> tokens = name_tokens(device.name);
  for (const CudaRow& row : kCudaTable) {
    if (!tokens.count(row.model) || (*row.variant && !tokens.count(row.variant))) continue;
    if (row.major != device.major || row.minor != device.minor) break;
    const double tflops = precision == "fp16"   ? row.fp16
                          : precision == "bf16" ? row.bf16
                                                : row.fp32;
    peak.flops = tflops * 1e12;
    peak.source = "cuda table: " + device.name + " (cc " + cc + ") as " + row.label + ", " +
                  precision + " dense " + fixed(tflops, 1) + " TFLOP/s";
    return peak;
  }
  peak.source = "cuda: " + log::clipped(device.name, 120) + " (cc " + cc +
                ") is not in the table; give --peak-flops";
  return peak;
}

std::optional<double> parse_peak_flops(const std::string& text) {
  const auto value = number(text);
  if (!value || !(*value > 0)) return std::nullopt;
  return value;
}

Peak run_peak(const PeakRequest& request) {
  Peak peak;
  if (request.given) {
    peak.flops = *request.given;
    peak.precision = request.precision;
    peak.source = request.given_by;
  } else if (request.cuda) {
    const auto device = cuda_device(request.device_index);
    if (device) {
      peak = cuda_peak(*device, request.precision);
    } else {
      peak.precision = request.precision;
      peak.source = "cuda: the driver did not name the device; give --peak-flops";
    }
  } else {
    const char* limit = std::getenv("ONEDNN_MAX_CPU_ISA");
    if (!limit) limit = std::getenv("DNNL_MAX_CPU_ISA");
    const CpuVector cpu = parse_cpu(
        read_file("/proc/cpuinfo"),
        read_file("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"), limit ? limit : "");
    peak = cpu_peak(cpu, request.threads, request.precision);
  }
  if (request.world > 1) {
    peak.flops *= request.world;
    peak.source += " x " + std::to_string(request.world) + " processes";
  }
  return peak;
}

}  // namespace amptune::train
