"""The `fact::launch` op (python/fact/ops.py) and its native C++ implementation
(src/torch_ext/fact_launch_op.cpp, built by fact.native): schemas, call registration and its
checks, the CPU path through a host reference (the fake kind's, tests/python/fake_kind.py),
the fake implementation under torch.compile and FakeTensorMode, the backward error, the ABI
numbers Python mirrors (checked against the header with the C compiler), the ctypes kernel
loader, and the native extension compiling and registering here (its CUDA path runs in
test_compose_gpu.py)."""
import ctypes
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import fact.ops
import fake_kind
from fact import abi, kernels, native

REPO_ROOT = Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO_ROOT / "python"
C_COMPILER = shutil.which("cc") or shutil.which("gcc")
SHAPE = [4, 8]


def _call(a=2.0, b=3.0, **options):
    return fake_kind.axpby_call("t", "x", "z", "y", SHAPE, a, b, **options)


def test_schemas():
    assert str(torch.ops.fact.launch.default._schema) == \
        "fact::launch(Tensor[] operands, int call, SymInt[] sizes=[]) -> Tensor[]"
    assert str(torch.ops.fact.launch_out.default._schema) == \
        "fact::launch_out(Tensor[] operands, Tensor(a!)[] results, int call, SymInt[] sizes=[]) -> ()"
    assert torch.Tag.needs_exact_strides in torch.ops.fact.launch.default.tags


def test_registering_the_same_call_twice_gives_the_same_number():
    first = fact.ops.register_call(_call())
    assert fact.ops.register_call(json.dumps(_call())) == first
    assert fact.ops.register_call(_call(a=4.0)) != first
    spec = fact.ops.registered_call(first)
    assert spec.kind == "axpby" and spec.results[0].shape == (4, 8) and spec.library is None
    with pytest.raises(KeyError, match="no call 1000000"):
        fact.ops.registered_call(1_000_000)


@pytest.mark.parametrize("change,message", [
    (lambda c: c["args"].update(hex="zz"), "args.hex is not hexadecimal"),
    (lambda c: c["args"].update(size=8), "args.hex holds 112 bytes, args.size says 8"),
    (lambda c: c["args"].update(hex="02" + c["args"]["hex"][2:].replace("70000000", "71000000", 1)),
     "the argument image's header gives size 113, the plan 112"),
    (lambda c: c["args"]["pointers"][0].update(offset=108), "pointer at offset 108 lies outside"),
    (lambda c: c["args"]["pointers"][0].update(index=5), "operand 5 does not exist"),
    (lambda c: c["args"]["pointers"][0].update({"from": "scratch"}), "not operand or result"),
    (lambda c: c["results"][0].update(stride=[1]), "differ in rank"),
    (lambda c: c["operands"][0].update(dtype="torch.float128"), "unknown dtype 'torch.float128'"),
])
def test_inconsistent_calls_are_refused(change, message):
    call = _call()
    change(call)
    with pytest.raises(ValueError, match=message):
        fact.ops.register_call(call)


def test_cpu_launch_runs_the_host_reference(reference):
    call = fact.ops.register_call(_call(a=2.0, b=-0.5, w="w"))
    x, z = torch.randn(SHAPE), torch.randn(SHAPE)
    y, w = torch.ops.fact.launch([x, z], call)
    torch.testing.assert_close(y, 2.0 * x - 0.5 * z)
    torch.testing.assert_close(w, x * z)
    out = [torch.full(SHAPE, float("nan")), torch.full(SHAPE, float("nan"))]
    torch.ops.fact.launch_out([x, z], out, call)
    torch.testing.assert_close(out[0], y) and torch.testing.assert_close(out[1], w)
    with pytest.raises(ValueError, match=r"operand 0 is torch.float64, the call was planned for torch.float32"):
        torch.ops.fact.launch([x.double(), z], call)
    with pytest.raises(ValueError, match=r"result 0 is torch.float32 \[2, 8\]"):
        torch.ops.fact.launch_out([x, z], [torch.empty(2, 8), out[1]], call)


def test_pointer_slots_add_the_element_offset_to_the_data_pointer(reference):
    """x is read from element 8 of its operand (a view's offset folded into the image), and a
    sliced operand's storage offset is part of its data pointer already."""
    call = _call(a=1.0, b=1.0)
    call["args"]["pointers"][0]["element_offset"] = 8
    number = fact.ops.register_call(call)
    base = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    z = torch.zeros(6, 8)[2:]  # storage offset 16
    [y] = torch.ops.fact.launch([base[:4], z], number)
    torch.testing.assert_close(y, base[1:5])


def test_a_failing_status_raises_with_its_name(reference):
    call = _call()
    image = bytearray.fromhex(call["args"]["hex"])
    image[4:8] = fake_kind.kind_id("no_such_kind").to_bytes(4, "little")
    call["args"]["hex"] = image.hex()
    number = fact.ops.register_call(call)
    with pytest.raises(RuntimeError, match=r"fact::launch call \d+ \(t\): fact_reference_call "
                                           r"\(.*\) returned FACT_ERR_INVALID_ARGS"):
        torch.ops.fact.launch([torch.randn(SHAPE), torch.randn(SHAPE)], number)


def test_the_fake_implementation_traces_under_torch_compile_and_fake_tensors(reference):
    number = fact.ops.register_call(_call(w="w"))

    def layer(x, z):
        y, w = torch.ops.fact.launch([x, z], number)
        return y * 2.0 + w

    x, z = torch.randn(SHAPE), torch.randn(SHAPE)
    torch._dynamo.reset()
    compiled = torch.compile(layer, backend="eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, z), (2.0 * x + 3.0 * z) * 2.0 + x * z)
    torch._dynamo.reset()
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        y, w = torch.ops.fact.launch([mode.from_tensor(x), mode.from_tensor(z)], number)
    assert y.shape == (4, 8) and y.stride() == (8, 1) and y.dtype == torch.float32


def test_inputs_that_require_grad_fail_clearly_on_backward(reference):
    number = fact.ops.register_call(_call())
    x = torch.randn(SHAPE, requires_grad=True)
    [y] = torch.ops.fact.launch([x, torch.randn(SHAPE)], number)
    # the Python kernel's message, or the native one's where the extension is loaded (a GPU)
    with pytest.raises(RuntimeError, match="fact::launch has no backward|derivative for "
                                           "fact::launch is not implemented"):
        y.sum().backward()
    with torch.no_grad():
        [y] = torch.ops.fact.launch([x, torch.randn(SHAPE)], number)
    assert y.grad_fn is None


def test_describe_says_which_implementation_runs(reference):
    assert fact.ops.describe_implementation("cuda") == native.describe()
    assert fact.ops.describe_implementation("cpu") == \
        f"host reference (fact_reference_call in {reference})"


@pytest.mark.skipif(C_COMPILER is None, reason="no C compiler")
def test_abi_numbers_mirror_fact_abi_h(tmp_path):
    statuses = "\n".join(f'  printf("{name} %d\\n", (int){name});' for name in abi.STATUS_NAMES.values())
    program = textwrap.dedent(f"""
        #include <stdio.h>
        #include <stddef.h>
        #include "fact/core/fact_abi.h"
        int main(void) {{
          printf("version %d\\n", FACT_ABI_VERSION);
          printf("header %zu\\n", sizeof(FactCallHeader));
          printf("abi_version %zu\\n", offsetof(FactCallHeader, abi_version));
          printf("kind %zu\\n", offsetof(FactCallHeader, kind));
          printf("size %zu\\n", offsetof(FactCallHeader, size));
          printf("reserved %zu\\n", offsetof(FactCallHeader, reserved));
          printf("kind_id %u\\n", fact_kind_id("gemm"));
        {statuses}
          return 0;
        }}
    """)
    binary = tmp_path / "abi_numbers"
    subprocess.run([C_COMPILER, "-x", "c", "-", "-I", str(REPO_ROOT / "include"), "-o", str(binary)],
                   input=program, text=True, check=True)
    printed = dict(line.split() for line in
                   subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.splitlines())
    assert int(printed["version"]) == abi.FACT_ABI_VERSION
    assert int(printed["header"]) == abi.HEADER_SIZE
    assert [int(printed[f]) for f in ("abi_version", "kind", "size", "reserved")] == [0, 4, 8, 12]
    assert int(printed["kind_id"]) == fake_kind.kind_id("gemm")
    assert {int(printed[name]): name for name in abi.STATUS_NAMES.values()} == abi.STATUS_NAMES
    header = (REPO_ROOT / "include" / "fact" / "core" / "fact_abi.h").read_text()
    body = header[header.index("typedef enum FactStatus"):header.index("} FactStatus;")]
    declared = [line.split("=")[0].strip() for line in body.splitlines() if "FACT_" in line and "=" in line]
    assert declared == list(abi.STATUS_NAMES.values())  # every status has a Python name


def test_the_ctypes_loader_calls_a_library_entry_on_an_image(fake_kind_library):
    library = kernels.load(fake_kind_library)
    assert kernels.load(fake_kind_library) is library
    assert library.entry_name == "fact_axpby_host" and library.info["kind"] == "axpby"
    x, z, y = torch.randn(SHAPE), torch.randn(SHAPE), torch.empty(SHAPE)
    spec = fact.ops.registered_call(fact.ops.register_call(_call(a=0.5, b=2.0)))
    image = fact.ops._patched_image(spec, [x, z], [y])
    assert library.workspace_size(ctypes.addressof(image)) == 64
    workspace = torch.empty(64, dtype=torch.uint8)
    assert library.launch(ctypes.addressof(image), None, 0) == 3  # FACT_ERR_WORKSPACE
    assert library.launch(ctypes.addressof(image), workspace.data_ptr(), 0) == abi.FACT_OK
    torch.testing.assert_close(y, 0.5 * x + 2.0 * z)
    with pytest.raises(kernels.KernelLoadError, match="cannot load"):
        kernels.KernelLibrary(fake_kind_library.parent / "missing.so")
    with pytest.raises(kernels.KernelLoadError, match="does not export fact_nothing"):
        kernels.KernelLibrary(fake_kind_library, entry="fact_nothing")


# Runs in a child process: loading the native library changes the process's dispatcher.
# torch.cuda.is_available is forced true so fact.ops installs the native kernels as it does on
# a GPU machine when a call with a kernel library is registered.
NATIVE_CHECK = textwrap.dedent(r"""
    import json, sys, warnings
    import torch
    torch.cuda.is_available = lambda: True
    sys.path.insert(0, sys.argv[2])
    import fake_kind
    from fact import native, ops
    library = sys.argv[1]
    result = {"before": native.describe()}
    early = ops.register_call(fake_kind.axpby_call("early", "x", "z", "y", [4, 8], 1.0, 1.0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calls = [ops.register_call(fake_kind.axpby_call(f"c{i}", "x", "z", "y", [4, 8], 1.0, i),
                                   library) for i in range(2)]
        again = ops.register_call(fake_kind.axpby_call("c0", "x", "z", "y", [4, 8], 1.0, 0), library)
    result.update(early=early, calls=calls, again=again, active=native.active(),
                  describe=native.describe(), libraries=native.registered_libraries(),
                  warnings=[str(w.message) for w in caught])
    result["dispatch"] = torch._C._dispatch_dump("fact::launch")
    result["dispatch_out"] = torch._C._dispatch_dump("fact::launch_out")
    late = ops.register_call(fake_kind.axpby_call("late", "x", "z", "y", [4, 8], 2.0, 2.0))
    result["late"] = late
    try:
        ops.register_call(fake_kind.axpby_call("bad", "x", "z", "y", [4, 8], 3.0, 3.0),
                          library + ".missing")
    except Exception as error:
        result["missing"] = str(error).splitlines()[0]
    result["floor"] = len(torch.ops.fact_native.launch_floor.default([torch.ones(2)], calls[0]))
    # A call over declared symbols: its size tables and per-bucket libraries go to the native
    # registry (fact_native::register_sizes checks them); the CPU path still runs it.
    symbolic = ops.register_call(
        fake_kind.symbolic_axpby_call("sym", "x", "z", "y", 8, 2.0, 3.0, bucket_a={3: -1.0}),
        library, symbols=[fake_kind.batch_symbol()], bucket_libraries=[(library, None)] * 4)
    result["symbolic"] = symbolic - late
    x5, z5 = torch.randn(5, 8), torch.randn(5, 8)
    [y5] = torch.ops.fact.launch([x5, z5], symbolic, [5])
    result["symbolic_cpu_ok"] = bool(torch.allclose(y5, -1.0 * x5 + 3.0 * z5))
    x, z = torch.randn(4, 8, requires_grad=True), torch.randn(4, 8)
    [y] = torch.ops.fact.launch([x, z], late)  # CPU tensors: the host reference
    result["cpu_ok"] = bool(torch.allclose(y, 2.0 * x + 2.0 * z))
    try:
        y.sum().backward()
        result["backward"] = "no error"
    except RuntimeError as error:
        result["backward"] = str(error).splitlines()[0]
    print("RESULT " + json.dumps(result))
""")


@pytest.mark.skipif(C_COMPILER is None, reason="no C compiler")
@pytest.mark.skipif(torch.version.cuda is None, reason="torch is not a CUDA build")
def test_native_extension_compiles_loads_and_mirrors_the_call_registry(fake_kind_library):
    """Builds the extension (or finds this source's build in the FACT cache), loads it in a child
    process and checks what it registers: fact::launch's CUDA and Autograd kernels and
    fact::launch_out's CUDA kernel against the Python schemas (a mismatch fails the load), the
    call registry numbered as Python's (calls made before it loaded included), the libraries."""
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR),
               FACT_REFERENCE_LIBRARY=str(fake_kind_library))
    env.pop("FACT_NATIVE", None)
    run = subprocess.run([sys.executable, "-c", NATIVE_CHECK, str(fake_kind_library),
                          str(Path(__file__).resolve().parent)], env=env,
                         capture_output=True, text=True, timeout=600)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["active"], result
    assert result["before"].startswith("Python ctypes until")
    assert result["describe"].startswith("native C++"), result["describe"]
    assert (result["early"], result["calls"], result["again"], result["late"]) == (0, [1, 2], 1, 3)
    assert result["libraries"] == [str(fake_kind_library.resolve())]
    assert not result["warnings"], result["warnings"]
    dispatch = result["dispatch"]
    cuda_line = next(line for line in dispatch.splitlines() if line.startswith("CUDA:"))
    autograd_line = next(line for line in dispatch.splitlines() if line.startswith("Autograd"))
    assert "fact_launch_op.cpp" in cuda_line and "unboxed" in cuda_line, dispatch
    assert "fact_launch_op.cpp" in autograd_line, dispatch
    assert "CPU: registered at" in dispatch and "ops.py" in dispatch
    assert any(line.startswith("CUDA:") and "fact_launch_op.cpp" in line
               for line in result["dispatch_out"].splitlines()), result["dispatch_out"]
    assert "does not exist" in result["missing"]
    assert result["floor"] == 0
    assert result["symbolic"] == 1 and result["symbolic_cpu_ok"], result
    assert result["cpu_ok"]
    assert "derivative for fact::launch is not implemented" in result["backward"], result["backward"]


@pytest.mark.skipif(torch.version.cuda is None, reason="torch is not a CUDA build")
def test_native_build_failure_keeps_the_compiler_output_and_is_not_retried(tmp_path):
    source_root = tmp_path / "checkout"
    (source_root / "src" / "torch_ext").mkdir(parents=True)
    (source_root / "include" / "fact" / "core").mkdir(parents=True)
    for header in ("fact_abi.h", "status_names.hpp"):
        shutil.copy(REPO_ROOT / "include" / "fact" / "core" / header, source_root / "include" / "fact" / "core" / header)
    (source_root / "src" / "torch_ext" / "fact_launch_op.cpp").write_text(
        "this_is_not_cpp fact_native_test_marker;\n")
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), FACT_SOURCE_DIR=str(source_root),
               FACT_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("FACT_NATIVE", None)
    command = [sys.executable, "-m", "fact.native"]
    first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "failed to build" in first.stdout and "this_is_not_cpp" in first.stdout, first.stdout
    [failed] = (tmp_path / "cache" / "torch_ext").glob("*/failed.txt")
    written = failed.stat().st_mtime_ns
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 1 and "this_is_not_cpp" in again.stdout
    assert failed.stat().st_mtime_ns == written  # remembered, not rebuilt


def test_native_turned_off_is_reported(monkeypatch):
    monkeypatch.setenv("FACT_NATIVE", "0")
    assert native._missing_prerequisite() == "turned off with FACT_NATIVE=0"


def test_build_key_depends_on_the_source(tmp_path, monkeypatch):
    key = native.build_key()
    copy = tmp_path / "checkout"
    shutil.copytree(REPO_ROOT / "src" / "torch_ext", copy / "src" / "torch_ext")
    shutil.copytree(REPO_ROOT / "include" / "fact" / "core", copy / "include" / "fact" / "core")
    monkeypatch.setenv("FACT_SOURCE_DIR", str(copy))
    assert native.build_key() == key
    source = copy / "src" / "torch_ext" / "fact_launch_op.cpp"
    source.write_text(source.read_text() + "\n// changed\n")
    assert native.build_key() != key
    monkeypatch.setenv("FACT_CACHE_DIR", str(tmp_path / "cache"))
    assert native.build_dir() == tmp_path / "cache" / "torch_ext" / native.build_key()
