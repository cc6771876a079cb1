/* Test data: a stand-in for the engine library's planning entry points (include/fact/engine/
 * c_api.h), to test fact.compose.plan()'s in-process call (ctypes, JSON in and out, freeing
 * the response) without the engine. It writes <out_dir>/plan.json saying it planned nothing,
 * or, when the request's precision is "tf32", answers with an error and writes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char* copy(const char* text) {
  char* out = malloc(strlen(text) + 1);
  strcpy(out, text);
  return out;
}

/* The string value of "key": "..." in the request (json.dumps spelling, no escapes). */
static int string_member(const char* json, const char* key, char* out, size_t size) {
  char pattern[64];
  snprintf(pattern, sizeof pattern, "\"%s\": \"", key);
  const char* start = strstr(json, pattern);
  if (!start) return 0;
  start += strlen(pattern);
  const char* end = strchr(start, '"');
  if (!end || (size_t)(end - start) >= size) return 0;
  memcpy(out, start, (size_t)(end - start));
  out[end - start] = '\0';
  return 1;
}

int fact_engine_plan(const char* request_json, char** response_json) {
  char out_dir[4096], precision[32] = "", path[4200], response[4400];
  string_member(request_json, "precision", precision, sizeof precision);
  if (strcmp(precision, "tf32") == 0) {
    *response_json = copy("{\"status\": \"error\", \"error\": \"fake engine: no tf32 here\"}");
    return 1;
  }
  if (!string_member(request_json, "out_dir", out_dir, sizeof out_dir)) {
    *response_json = copy("{\"status\": \"error\", \"error\": \"fake engine: no out_dir\"}");
    return 1;
  }
  snprintf(path, sizeof path, "%s/plan.json", out_dir);
  FILE* file = fopen(path, "w");
  if (!file) {
    *response_json = copy("{\"status\": \"error\", \"error\": \"fake engine: cannot write\"}");
    return 1;
  }
  fprintf(file, "{\"schema\": \"fact.plan/2\", \"abi_version\": 2, \"precision\": \"%s\", "
                "\"device\": \"cpu\", \"inputs\": [], \"status\": \"unplanned\", "
                "\"reason\": \"fake engine: planned nothing\", \"capture\": \"torch.export\", "
                "\"patterns\": null, \"kernels\": {}, \"replacements\": [], \"notes\": []}\n",
          precision[0] ? precision : "strict");
  fclose(file);
  snprintf(response, sizeof response,
           "{\"status\": \"ok\", \"plan\": \"%s\", \"summary\": \"nothing\"}", path);
  *response_json = copy(response);
  return 0;
}

void fact_engine_free(char* text) { free(text); }

const char* fact_engine_version(void) { return "0.0.0 fake"; }
