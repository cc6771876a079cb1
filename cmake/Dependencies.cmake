# Third-party dependencies: nlohmann-json, CLI11, OpenSSL (libcrypto), GoogleTest (system packages), the CUDA toolkit
# (optional: nvcc for compiling generated kernels, cudart/cuBLAS for the runtime), and the
# CUTLASS headers from the pinned `nvidia-cutlass` pip package.

find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)  # SHA-256 for content keys and checksums

# Where a scikit-build-core build installs the CLI (into the environment's bin/) and libfact
# (into the Python package, where python/fact/_engine.py finds it); a plain CMake install puts
# them in bin/ and lib/.
if(DEFINED SKBUILD_SCRIPTS_DIR)
  set(FACT_INSTALL_BINDIR ${SKBUILD_SCRIPTS_DIR})
  set(FACT_INSTALL_LIBDIR ${SKBUILD_PLATLIB_DIR}/fact)
else()
  set(FACT_INSTALL_BINDIR bin)
  set(FACT_INSTALL_LIBDIR lib)
endif()

# --- CUDA toolkit -------------------------------------------------------------------------
find_package(CUDAToolkit QUIET)
if(CUDAToolkit_FOUND)
  set(FACT_HAVE_CUDA_TOOLKIT ON)
  set(FACT_NVCC ${CUDAToolkit_NVCC_EXECUTABLE})
  list(GET CUDAToolkit_INCLUDE_DIRS 0 FACT_CUDA_INCLUDE)
  if(NOT FACT_NVCC)
    set(FACT_NVCC ${CUDAToolkit_BIN_DIR}/nvcc)
  endif()
  if(NOT DEFINED CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER ${FACT_NVCC})
  endif()
  message(STATUS "FACT: CUDA toolkit ${CUDAToolkit_VERSION} (nvcc: ${FACT_NVCC})")
else()
  set(FACT_HAVE_CUDA_TOOLKIT OFF)
  set(FACT_NVCC "")
  set(FACT_CUDA_INCLUDE "")
  message(STATUS "FACT: no CUDA toolkit found; kernels can be rendered but not compiled")
endif()
if(FACT_WITH_CUDA STREQUAL "OFF")
  set(FACT_HAVE_CUDA_TOOLKIT OFF)
endif()

# --- CUTLASS headers ----------------------------------------------------------------------
# Order: -DFACT_CUTLASS_DIR / $FACT_CUTLASS_DIR (a folder holding include/cutlass), then the
# `nvidia-cutlass` package of the Python interpreter in use (cutlass_library/source).
# The interpreter also becomes `fact optimize`'s default Python (the one with torch and `fact`).
find_package(Python3 COMPONENTS Interpreter QUIET)
set(FACT_CUTLASS_DIR "$ENV{FACT_CUTLASS_DIR}" CACHE PATH "CUTLASS source root (holds include/cutlass)")
if(NOT FACT_CUTLASS_DIR)
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c
              "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source'))"
      OUTPUT_VARIABLE _fact_cutlass_root OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
      RESULT_VARIABLE _fact_cutlass_rc)
    if(_fact_cutlass_rc EQUAL 0 AND EXISTS "${_fact_cutlass_root}/include/cutlass/cutlass.h")
      set(FACT_CUTLASS_DIR "${_fact_cutlass_root}" CACHE PATH "" FORCE)
    endif()
  endif()
endif()
if(FACT_CUTLASS_DIR AND EXISTS "${FACT_CUTLASS_DIR}/include/cutlass/version.h")
  set(FACT_CUTLASS_INCLUDE "${FACT_CUTLASS_DIR}/include")
  set(FACT_CUTLASS_UTIL_INCLUDE "${FACT_CUTLASS_DIR}/tools/util/include")
  file(STRINGS "${FACT_CUTLASS_INCLUDE}/cutlass/version.h" _v REGEX "#define CUTLASS_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*CUTLASS_MAJOR ([0-9]+).*" "\\1" _maj "${_v}")
  string(REGEX REPLACE ".*CUTLASS_MINOR ([0-9]+).*" "\\1" _min "${_v}")
  string(REGEX REPLACE ".*CUTLASS_PATCH ([0-9]+).*" "\\1" _pat "${_v}")
  set(FACT_CUTLASS_VERSION "${_maj}.${_min}.${_pat}")
  message(STATUS "FACT: CUTLASS ${FACT_CUTLASS_VERSION} at ${FACT_CUTLASS_DIR}")
else()
  set(FACT_CUTLASS_INCLUDE "")
  set(FACT_CUTLASS_UTIL_INCLUDE "")
  set(FACT_CUTLASS_VERSION "")
  message(WARNING "FACT: CUTLASS headers not found (pip install nvidia-cutlass, or set "
                  "FACT_CUTLASS_DIR); kernels can be rendered but not compiled")
endif()
