#!/usr/bin/env bash
# PTX instruction count of each kernel of gelu_erf_ptx.cu (sm_90a, -O3), minus the identity
# kernel's. Usage: gelu_erf_ptx.sh [CUTLASS include dir] (default: the nvidia-cutlass package).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
cutlass=${1:-$(python -c "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))")}
ptx=$(mktemp --suffix=.ptx)
trap 'rm -f "$ptx"' EXIT
nvcc -arch=sm_90a -ptx -O3 -std=c++17 --expt-relaxed-constexpr -I"$root" -I"$cutlass" \
     -o "$ptx" "$here/gelu_erf_ptx.cu"
# Instructions: lines in an entry's body that end with ';' and are not declarations. "arith":
# without the moves of immediate constants (ptxas folds those into the using instruction) and
# branches; "mufu": the special-function unit's ops (ex2, rcp, tanh, lg2, sin, cos, rsqrt, sqrt).
awk '
  /^\.visible \.entry/ { name = $3; sub(/\(.*/, "", name); n[name] = 0; inside = 1; next }
  inside && /^}/ { inside = 0; order[++k] = name; next }
  inside && /;[ \t]*$/ && !/^[ \t]*(\.reg|\.local|\.shared|\/\/)/ { n[name]++;
    if (!/mov\.[a-z0-9]+[ \t]+%[a-z0-9]+, (0[fd][0-9A-F]+|-?[0-9.]+);/ && !/bra/) a[name]++;
    if (/(ex2|rcp|tanh|lg2|sin|cos|rsqrt|sqrt)\.approx/) f[name]++;
    if (match($0, /^[ \t]*(@%p[0-9]+ )?[a-z0-9_.]+/)) { op = substr($0, RSTART, RLENGTH);
      gsub(/^[ \t]*(@%p[0-9]+ )?/, "", op); ops[name] = ops[name] " " op } }
  END { for (i = 1; i <= k; i++) { m = order[i];
          printf "%-26s %3d PTX instructions, %2d over identity; arith %2d over identity, mufu %d\n", m, n[m], n[m] - n["identity"], a[m] - a["identity"], f[m] }
        for (i = 1; i <= k; i++) { m = order[i]; printf "\n%s:%s\n", m, ops[m] } }' "$ptx"
