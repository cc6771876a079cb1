// FACT gate test: does not compile (a missing declaration on line 6)
#include "fact/runtime/fact_subgraph_abi.h"

extern "C" int fact_entry(const FactCallHeader* h, void* ws, size_t* ws_size, void* stream) {
  if (ws_size) { *ws_size = 0; return FACT_OK; }
  return attend_causal(h);
}
