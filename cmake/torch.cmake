# LibTorch for amptune: where it comes from, that its C++ ABI matches the Debian libraries we
# link next to it, and which c10d process groups (Gloo, NCCL) this build can use.
#
# Where: CMAKE_PREFIX_PATH / Torch_DIR as any CMake package (Debian's libtorch-dev, an unpacked
# LibTorch zip); when that finds nothing, the PyTorch of a Python interpreter
# (Python3_EXECUTABLE, else python3 on PATH): torch.utils.cmake_prefix_path of a pip / conda
# installation. Sets Torch_FOUND, TORCH_* (TorchConfig), AMPTUNE_TORCH_ORIGIN, and
# AMPTUNE_HAVE_GLOO / AMPTUNE_HAVE_NCCL with GLOO_INCLUDE_DIR / NCCL_INCLUDE_DIR.

find_package(Torch QUIET)
set(AMPTUNE_TORCH_ORIGIN "CMAKE_PREFIX_PATH")
if(NOT Torch_FOUND)
  if(Python3_EXECUTABLE)
    set(_amptune_python "${Python3_EXECUTABLE}")
  else()
    find_program(_amptune_python NAMES python3)
  endif()
  set(_why "no python3 on PATH and Python3_EXECUTABLE not set")
  if(_amptune_python)
    execute_process(
      COMMAND "${_amptune_python}" -c "import torch; print(torch.utils.cmake_prefix_path)"
      OUTPUT_VARIABLE _torch_prefix ERROR_VARIABLE _torch_err RESULT_VARIABLE _torch_rc
      OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(_torch_rc EQUAL 0)
      list(APPEND CMAKE_PREFIX_PATH "${_torch_prefix}")
      find_package(Torch QUIET)
      string(CONCAT _why "torch.utils.cmake_prefix_path of ${_amptune_python} is "
             "${_torch_prefix}, which holds no TorchConfig.cmake (a PyTorch packaged without its "
             "CMake files)")
      set(AMPTUNE_TORCH_ORIGIN "${_amptune_python} (${_torch_prefix})")
    else()
      string(REGEX REPLACE "\n+$" "" _torch_err "${_torch_err}")
      string(REGEX REPLACE ".*\n" "" _torch_err "${_torch_err}")
      set(_why "${_amptune_python} cannot import torch: ${_torch_err}")
    endif()
  endif()
  if(NOT Torch_FOUND)
    message(FATAL_ERROR
      "amptune: LibTorch not found. Tried (1) CMAKE_PREFIX_PATH / Torch_DIR: no "
      "TorchConfig.cmake there (install Debian's libtorch-dev with tools/install-deps.sh, or pass "
      "-DCMAKE_PREFIX_PATH=/path/to/libtorch of an unpacked LibTorch), and (2) a Python "
      "PyTorch: ${_why} (pass -DPython3_EXECUTABLE=/path/to/python3 of an environment where "
      "'import torch' works). See README.md \"Building against another LibTorch\".")
  endif()
endif()
message(STATUS "amptune: LibTorch ${Torch_VERSION} from ${AMPTUNE_TORCH_ORIGIN} (${Torch_DIR})")

# The C++ ABI: yaml-cpp, Boost, GoogleTest of Debian use the C++11 std::string; a LibTorch built
# with the old one (older pip wheels, "pre-cxx11 ABI" zips) cannot link next to them.
if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
  message(FATAL_ERROR
    "amptune: the LibTorch in ${Torch_DIR} uses the pre-C++11 ABI (TORCH_CXX_FLAGS: "
    "${TORCH_CXX_FLAGS}); the system's yaml-cpp, Boost and GoogleTest use the C++11 ABI, so "
    "they cannot be linked together. Use a LibTorch with the C++11 ABI: the 'cxx11 ABI' LibTorch "
    "zip, or a PyTorch whose python3 -c 'import torch; print(torch._C._GLIBCXX_USE_CXX11_ABI)' "
    "prints True.")
endif()

# Torch's imported target adds its include dirs as normal (-I) ones; mark them SYSTEM so our
# warning flags do not fire inside LibTorch headers.
get_target_property(_torch_inc torch INTERFACE_INCLUDE_DIRECTORIES)
if(_torch_inc)
  set_target_properties(torch PROPERTIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${_torch_inc}")
endif()

# c10d process groups for data-parallel training (docs/DISTRIBUTED.md). A backend is used when
# LibTorch was built with it and its headers are here. "Built with it": the compile definition
# LibTorch exports (USE_C10D_GLOO on torch_cpu; USE_C10D_NCCL on torch_cpu in 1.13, on torch_cuda
# in 2.x), or, where a package's TorchConfig does not say, the backend's class in the library's
# dynamic symbols. Headers: c10d's under the torch include dirs, Gloo's (Debian: libgloo-dev; some
# LibTorch packages carry them) and nccl.h (CUDA toolkit, LibTorch, or the nvidia-nccl wheel
# next to a pip PyTorch).
set(_torch_defs "")
foreach(_t torch_cpu torch_cuda torch)
  if(TARGET ${_t})
    get_target_property(_d ${_t} INTERFACE_COMPILE_DEFINITIONS)
    if(_d)
      list(APPEND _torch_defs ${_d})
    endif()
  endif()
endforeach()
list(APPEND _torch_defs ${TORCH_CXX_FLAGS})

# amptune_torch_exports(<var> <library target> <symbol text>): whether the library's dynamic
# symbol table holds <symbol text> (nm -D, searched with grep; OFF when either tool is missing).
function(amptune_torch_exports var target text)
  set(${var} OFF PARENT_SCOPE)
  if(NOT TARGET ${target} OR NOT CMAKE_NM)
    return()
  endif()
  get_target_property(_lib ${target} IMPORTED_LOCATION)
  get_target_property(_configs ${target} IMPORTED_CONFIGURATIONS)
  foreach(_c IN LISTS _configs)
    if(NOT _lib)
      get_target_property(_lib ${target} IMPORTED_LOCATION_${_c})
    endif()
  endforeach()
  find_program(_amptune_grep grep)
  if(NOT _lib OR NOT EXISTS "${_lib}" OR NOT _amptune_grep)
    return()
  endif()
  execute_process(COMMAND "${CMAKE_NM}" -D --defined-only "${_lib}"
                  COMMAND "${_amptune_grep}" -m 1 -c "${text}"
                  OUTPUT_VARIABLE _n OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_n GREATER 0)
    set(${var} ON PARENT_SCOPE)
  endif()
endfunction()

# PyTorch wheels since 2.5 export std::filesystem functions of a statically linked libstdc++ from
# libtorch.so (pytorch/pytorch#133437): amptune's executables then need libstdc++ first
# (amptune_libstdcxx_first, cmake/amptune.cmake).
amptune_torch_exports(AMPTUNE_TORCH_EXPORTS_STDFS torch "_ZNSt10filesystem")
if(AMPTUNE_TORCH_EXPORTS_STDFS)
  message(STATUS "amptune: libtorch.so exports std::filesystem functions; libstdc++ goes first "
                 "in the executables' DT_NEEDED")
endif()

set(_python_site "")
if(TORCH_INSTALL_PREFIX)
  get_filename_component(_python_site "${TORCH_INSTALL_PREFIX}/.." ABSOLUTE)
endif()

# amptune_c10d_backend(<Name> <library target> <library header var> <header hint>): sets
# AMPTUNE_HAVE_<NAME> and, when OFF, _<name>_why (the reason, for the configure line).
macro(amptune_c10d_backend name target header_var header_hint)
  string(TOUPPER ${name} _up)
  string(TOLOWER ${name} _low)
  set(AMPTUNE_HAVE_${_up} OFF)
  set(_${_low}_why "")
  set(_built OFF)
  if(_torch_defs MATCHES "USE_C10D_${_up}")
    set(_built ON)
  else()
    amptune_torch_exports(_built ${target} "ProcessGroup${name}")
  endif()
  find_path(C10D_${_up}_HPP torch/csrc/distributed/c10d/ProcessGroup${name}.hpp
            HINTS ${TORCH_INCLUDE_DIRS})
  if(NOT _built)
    set(_${_low}_why " (LibTorch built without it)")
  elseif(NOT C10D_${_up}_HPP)
    set(_${_low}_why " (c10d/ProcessGroup${name}.hpp not in LibTorch's include dirs)")
  elseif(NOT ${header_var})
    set(_${_low}_why " (${header_hint})")
  else()
    set(AMPTUNE_HAVE_${_up} ON)
  endif()
endmacro()

find_path(GLOO_INCLUDE_DIR gloo/algorithm.h HINTS ${TORCH_INCLUDE_DIRS})
amptune_c10d_backend(Gloo torch_cpu GLOO_INCLUDE_DIR "gloo headers missing: Debian libgloo-dev")
find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS ${TORCH_INCLUDE_DIRS} ${TORCH_INSTALL_PREFIX}/include ${_python_site}/nvidia/nccl/include
        ${CUDAToolkit_INCLUDE_DIRS} ${CUDA_INCLUDE_DIRS})
amptune_c10d_backend(NCCL torch_cuda NCCL_INCLUDE_DIR "nccl.h not found: set -DNCCL_INCLUDE_DIR=...")
message(STATUS "amptune: c10d Gloo ${AMPTUNE_HAVE_GLOO}${_gloo_why}, NCCL ${AMPTUNE_HAVE_NCCL}${_nccl_why}")
