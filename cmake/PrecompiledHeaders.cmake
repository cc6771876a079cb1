# Precompiled headers: the standard and third-party headers nearly every translation unit
# parses (nlohmann-json alone costs about 4 s per file at -O3 on the 2-core CI machine), parsed
# once. C++ only (the runtime's .cu files keep their own includes). A header listed here only
# saves time: every file still includes what it uses, so a file compiles the same without the
# precompiled header (FACT_PRECOMPILE_HEADERS=OFF turns them off).
#
# The engine's concerns are OBJECT libraries whose objects travel through $<TARGET_OBJECTS>;
# a precompiled header of their own would travel with them into the link (CMake lists the
# .gch among an OBJECT library's objects), so they reuse the one of fact_precompiled, an
# OBJECT library that nothing links. Executables (the CLI, the test suites) build their own.
option(FACT_PRECOMPILE_HEADERS "Precompile the standard and third-party headers" ON)

set(FACT_PRECOMPILED_HEADERS
    <algorithm> <array> <cstdint> <cstring> <filesystem> <functional> <map> <memory> <optional>
    <set> <sstream> <string> <string_view> <unordered_map> <utility> <variant> <vector>
    <nlohmann/json.hpp>)

function(_fact_add_precompiled_headers target)
  foreach(header IN LISTS FACT_PRECOMPILED_HEADERS ARGN)
    target_precompile_headers(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${header}>")
  endforeach()
endfunction()

if(FACT_PRECOMPILE_HEADERS)
  file(WRITE ${CMAKE_BINARY_DIR}/fact_precompiled.cpp "// the precompiled headers' own translation unit\n")
  add_library(fact_precompiled OBJECT ${CMAKE_BINARY_DIR}/fact_precompiled.cpp)
  target_link_libraries(fact_precompiled PRIVATE nlohmann_json::nlohmann_json)
  target_compile_options(fact_precompiled PRIVATE -Wall -Wextra)
  _fact_add_precompiled_headers(fact_precompiled)
endif()

# fact_reuse_precompiled_headers(target): an engine concern (OBJECT library) reads them.
function(fact_reuse_precompiled_headers target)
  if(FACT_PRECOMPILE_HEADERS)
    target_precompile_headers(${target} REUSE_FROM fact_precompiled)
  endif()
endfunction()

# fact_precompile_headers(target [header...]): an executable builds its own, with the extra
# headers given.
function(fact_precompile_headers target)
  if(FACT_PRECOMPILE_HEADERS)
    _fact_add_precompiled_headers(${target} ${ARGN})
  endif()
endfunction()
