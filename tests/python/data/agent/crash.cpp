// FACT gate test: a kernel that crashes (a null dereference).
#include "fact/runtime/fact_subgraph_abi.h"
extern "C" int fact_entry(const FactCallHeader* h, void* ws, size_t* ws_size, void* stream) {
  if (ws_size) { *ws_size = 0; return FACT_OK; }
  volatile int* nowhere = nullptr;
  *nowhere = 1;
  return FACT_OK;
}
