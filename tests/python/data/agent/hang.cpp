// FACT gate test: a kernel that never returns.
#include "fact/runtime/fact_subgraph_abi.h"
extern "C" int fact_entry(const FactCallHeader* h, void* ws, size_t* ws_size, void* stream) {
  if (ws_size) { *ws_size = 0; return FACT_OK; }
  for (volatile unsigned long i = 0;; ++i) {
  }
  return FACT_OK;
}
