"""`fact::launch` with calls planned over declared symbols (docs/dynamic_shapes.md) on the CPU
path: sizes as a SymInt[] argument, patches written into the image, buckets picked per symbol,
polynomial element offsets, result shapes; the fake implementation under FakeTensor and
torch.export gives symbolic result shapes; static calls are unchanged."""
import pytest
import torch

import fact.ops
import fake_kind
from fact.symbolic_sizes import BucketTable, Poly, parse_size


def _register(**options):
    return fact.ops.register_call(fake_kind.symbolic_axpby_call("t", "x", "z", "y", 8, 2.0, 3.0, **options),
                                  symbols=[fake_kind.batch_symbol()])


def test_schemas_take_sizes():
    assert str(torch.ops.fact.launch.default._schema) == \
        "fact::launch(Tensor[] operands, int call, SymInt[] sizes=[]) -> Tensor[]"
    assert str(torch.ops.fact.launch_out.default._schema) == \
        "fact::launch_out(Tensor[] operands, Tensor(a!)[] results, int call, SymInt[] sizes=[]) -> ()"


def test_polynomials_and_buckets():
    size = parse_size({"expr": "768*batch*seq + seq", "poly": [[768, [1, 1]], [1, [0, 1]]]}, 2)
    assert isinstance(size, Poly) and size.value((3, 5)) == 768 * 15 + 5
    assert parse_size(7, 2) == 7
    with pytest.raises(ValueError, match="has 1 exponents, the plan has 2 symbols"):
        parse_size({"poly": [[1, [1]]]}, 2)
    table = BucketTable.from_symbols([{"name": "batch", "edges": [1, 2, 4]},
                                      {"name": "seq", "edges": [16, 64]}])
    assert table.count == 6 and table.index((1, 16)) == 0 and table.index((3, 17)) == 5
    assert table.index((2, 64)) == 3 and table.edge_tuples()[3] == (2, 64)
    with pytest.raises(ValueError, match="seq=65 is above its range"):
        table.index((1, 65))


@pytest.mark.parametrize("batch", [1, 2, 3, 8])
def test_cpu_launch_at_several_sizes(reference, batch):
    call = _register()
    x, z = torch.randn(batch, 8), torch.randn(batch, 8)
    (y,) = torch.ops.fact.launch([x, z], call, [batch])
    torch.testing.assert_close(y, 2.0 * x + 3.0 * z)
    out = [torch.full((batch, 8), float("nan"))]
    torch.ops.fact.launch_out([x, z], out, call, [batch])
    torch.testing.assert_close(out[0], y)


def test_patch_is_written_little_endian(reference):
    call = _register()
    bound = fact.ops._bound(fact.ops.registered_call(call), (5,))
    assert int.from_bytes(bound.image[16:24], "little") == 40
    assert bound.results[0].shape == (5, 8) and bound.results[0].stride == (8, 1)


def test_bucket_images_are_picked_per_size(reference):
    # bucket 0 (batch 1) and bucket 3 (batch 5..8) carry another `a`: the image of the size's bucket runs
    call = _register(bucket_a={0: 10.0, 3: -1.0})
    for batch, a in [(1, 10.0), (2, 2.0), (3, 2.0), (4, 2.0), (5, -1.0), (8, -1.0)]:
        x, z = torch.randn(batch, 8), torch.randn(batch, 8)
        (y,) = torch.ops.fact.launch([x, z], call, [batch])
        torch.testing.assert_close(y, a * x + 3.0 * z)


def test_polynomial_element_offset(reference):
    call = _register(z_rows=2)  # z is [2*batch, 8]; the call reads its last batch rows
    x, z = torch.randn(3, 8), torch.randn(6, 8)
    (y,) = torch.ops.fact.launch([x, z], call, [3])
    torch.testing.assert_close(y, 2.0 * x + 3.0 * z[3:])


def test_sizes_are_checked(reference):
    call = _register()
    x = torch.randn(3, 8)
    with pytest.raises(ValueError, match="batch=9 is above its range"):
        torch.ops.fact.launch([torch.randn(9, 8), torch.randn(9, 8)], call, [9])
    with pytest.raises(ValueError, match="planned over batch; pass their sizes"):
        torch.ops.fact.launch([x, x], call)
    with pytest.raises(ValueError, match=r"operand 0 has shape \[3, 8\]"):
        torch.ops.fact.launch([x, x], call, [4])
    static = fact.ops.register_call(fake_kind.axpby_call("t", "x", "z", "y", [3, 8], 1.0, 1.0))
    with pytest.raises(ValueError, match="a static call takes no sizes"):
        torch.ops.fact.launch([x, x], static, [3])


def test_malformed_symbolic_calls_are_refused():
    call = fake_kind.symbolic_axpby_call("t", "x", "z", "y", 8, 2.0, 3.0)
    with pytest.raises(ValueError, match="the plan has 0 symbols"):
        fact.ops.register_call(call)
    call["buckets"] = call["buckets"][:3]
    with pytest.raises(ValueError, match="lists 3 buckets, the symbols' edges make 4"):
        fact.ops.register_call(call, symbols=[fake_kind.batch_symbol()])
    call = fake_kind.symbolic_axpby_call("t", "x", "z", "y", 8, 2.0, 3.0)
    call["args"]["patches"][0]["bytes"] = 2
    with pytest.raises(ValueError, match="2 bytes"):
        fact.ops.register_call(call, symbols=[fake_kind.batch_symbol()])


def test_fake_results_are_symbolic_under_export(reference):
    call = _register()

    class UsesTheCall(torch.nn.Module):
        def forward(self, x, z):
            (y,) = torch.ops.fact.launch([x, z], call, [x.shape[0]])
            return y * 2

    batch = torch.export.Dim("batch", min=1, max=8)
    program = torch.export.export(UsesTheCall(), (torch.randn(2, 8), torch.randn(2, 8)),
                                  dynamic_shapes=({0: batch}, {0: batch}), strict=False)
    launch = next(n for n in program.graph.nodes if n.target is torch.ops.fact.launch.default)
    result = next(iter(launch.users)).meta["val"]
    assert isinstance(result.shape[0], torch.SymInt) and str(result.shape[0]) == \
        str(launch.args[0][0].meta["val"].shape[0])
    x, z = torch.randn(5, 8), torch.randn(5, 8)
    torch.testing.assert_close(program.module()(x, z), 2 * (2.0 * x + 3.0 * z))


def test_fake_results_under_fake_tensor_mode(reference):
    from torch._subclasses.fake_tensor import FakeTensorMode
    call = _register()
    with FakeTensorMode():
        x, z = torch.empty(6, 8), torch.empty(6, 8)
        (y,) = torch.ops.fact.launch([x, z], call, [6])
    assert tuple(y.shape) == (6, 8) and y.stride() == (8, 1)
