"""Derived operands (docs/plan.md, "Derived operands"; python/fact/transforms.py): a plan call
reading an operand computed once, when the plan is applied, from module parameters by a program
the plan carries. Exercised with the made-up "axpby" kind (tests/python/fake_kind.py), so
nothing in python/fact can know what the kernel computes: the replacement is checked against
the subgraph it replaces, with the transform computed from the same parameter values."""
import warnings

import pytest
import torch

import fake_kind
from fact import transforms
from fact.compose import apply_plan

SHAPE = [4, 8]


class Folded(torch.nn.Module):
    """2 x + 3 (cat(a, b) * s): the second operand is a function of parameters only."""

    def __init__(self):
        super().__init__()
        generator = torch.Generator().manual_seed(7)
        self.a = torch.nn.Parameter(torch.randn(2, 8, generator=generator))
        self.b = torch.nn.Parameter(torch.randn(2, 8, generator=generator))
        self.s = torch.nn.Parameter(torch.randn(8, generator=generator))

    def forward(self, x):
        return 2.0 * x + 3.0 * (torch.cat([self.a, self.b], dim=0) * self.s)


def _param(name):
    return {"value": f"p_{name}", "kind": "parameter", "target": name}


def _derived(ops=None, shape=None, dtype="torch.float32"):
    return {"value": "derived:folded", "from": ["p_a", "p_b", "p_s"],
            "ops": ops if ops is not None else [
                {"op": "cat", "args": ["$0", "$1"], "attrs": {"dim": 0}},
                {"op": "mul", "args": ["%0", "$2"], "attrs": {}}],
            "dtype": dtype, "shape": shape or SHAPE, "stride": fake_kind.contiguous_stride(shape or SHAPE),
            "purpose": "cat(a, b) * s"}


def _plan(tmp_path, module, derived, inputs=None):
    x = torch.randn(SHAPE)
    nodes = fake_kind.node_names(module, (x,))
    call = fake_kind.axpby_call("0", "x", "derived:folded", nodes[-1], SHAPE, 2.0, 3.0)
    replaced = fake_kind.replacement(0, nodes, inputs or ["x", _param("a"), _param("b"), _param("s")],
                                     [nodes[-1]], [call])
    replaced["derived"] = [derived]
    folder = fake_kind.write_plan(tmp_path / "plan", [x], [replaced])
    return x, folder


def _check(composed, module, seeds=(1, 2)):
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        for seed in seeds:
            x = torch.randn(SHAPE, generator=torch.Generator().manual_seed(seed))
            torch.testing.assert_close(composed(x), module(x), rtol=1e-6, atol=1e-6)


def test_a_derived_operand_is_computed_once_and_verified_against_the_original(tmp_path, reference):
    module = Folded()
    x, folder = _plan(tmp_path, module, _derived())
    composed = apply_plan(module, (x,), folder, remainder="eager")
    assert len(composed.fact_report.composed) == 1, str(composed.fact_report)
    entry = composed.fact_report.composed[0]
    assert entry.verified and entry.rel_err < 1e-6
    assert entry.derived == ["derived:folded: cat(a, b) * s"]
    # the graph reads the derived buffer; the cat and the multiplies are gone
    names = [n.target for n in composed.graph_module.graph.nodes if n.op == "get_attr"]
    assert any(str(t).startswith("_fact_derived_0_") for t in names)
    assert not any(n.op == "call_function" and "cat" in str(n.target)
                   for n in composed.graph_module.graph.nodes)
    _check(composed, module)


def test_a_changed_parameter_computes_the_derived_operand_again(tmp_path, reference):
    module = Folded()
    x, folder = _plan(tmp_path, module, _derived())
    composed = apply_plan(module, (x,), folder, remainder="eager")
    with torch.no_grad():
        module.s.mul_(-2.0)
        module.a.add_(1.0)
    _check(composed, module, seeds=(5,))


def test_a_wrong_transform_fails_verification(tmp_path, reference):
    module = Folded()
    wrong = _derived(ops=[{"op": "cat", "args": ["$1", "$0"], "attrs": {"dim": 0}},
                          {"op": "mul", "args": ["%0", "$2"], "attrs": {}}])
    x, folder = _plan(tmp_path, module, wrong)
    composed = apply_plan(module, (x,), folder, remainder="eager")
    assert not composed.fact_report.composed
    (item,) = composed.fact_report.left_to_pytorch[:1]
    assert item.stage == "verify" and "rel_err" in item.reason, item.reason
    _check(composed, module)


def test_a_program_whose_result_differs_from_its_declaration_is_declined(tmp_path, reference):
    module = Folded()
    x, folder = _plan(tmp_path, module, _derived(shape=[8, 4]))
    composed = apply_plan(module, (x,), folder, remainder="eager")
    assert not composed.fact_report.composed
    reason = composed.fact_report.left_to_pytorch[0].reason
    assert "the program made torch.float32 [4, 8], the plan declares torch.float32 [8, 4]" in reason


def test_a_derived_operand_read_from_an_activation_is_declined(tmp_path, reference):
    module = Folded()
    bad = _derived()
    bad["from"] = ["x", "p_b", "p_s"]
    x, folder = _plan(tmp_path, module, bad)
    composed = apply_plan(module, (x,), folder, remainder="eager")
    assert not composed.fact_report.composed
    assert composed.fact_report.left_to_pytorch[0].reason == (
        "derived value derived:folded: source x is not a parameter, buffer or constant among the "
        "replacement's inputs")


@pytest.mark.parametrize("ops, message", [
    ([{"op": "gather", "args": ["$0"]}], "unknown op 'gather'"),
    ([{"op": "mul", "args": ["$0", "%1"]}], "reference '%1' names nothing before it"),
    ([{"op": "mul", "args": ["$0", "$3"]}], "reference '$3' names nothing before it"),
])
def test_malformed_programs_are_refused_before_running(ops, message):
    with pytest.raises(transforms.TransformError, match=message.replace("$", r"\$")):
        transforms.check(_derived(ops=ops))


def test_the_vocabulary_follows_torch():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(6, 4, generator=g), torch.randn(6, 4, generator=g)
    doc = {"value": "derived:v", "from": ["a", "b"], "dtype": "torch.bfloat16", "shape": [12, 4],
           "ops": [{"op": "reshape", "args": ["$0"], "attrs": {"shape": [3, 2, 4]}},
                   {"op": "reshape", "args": ["$1"], "attrs": {"shape": [3, 2, 4]}},
                   {"op": "stack", "args": ["%0", "%1"], "attrs": {"dim": 1}},
                   {"op": "reshape", "args": ["%2"], "attrs": {"shape": [12, 4]}},
                   {"op": "add_scalar", "args": ["%3"], "attrs": {"value": 1.5}},
                   {"op": "to", "args": ["%4"], "attrs": {"dtype": "torch.bfloat16"}}]}
    got = transforms.evaluate(doc, [a, b])
    want = (torch.stack([a.reshape(3, 2, 4), b.reshape(3, 2, 4)], 1).reshape(12, 4) + 1.5).bfloat16()
    assert torch.equal(got, want) and got.is_contiguous()
    doc = {"value": "derived:w", "from": ["a"], "dtype": "torch.float32", "shape": [2, 3, 4],
           "ops": [{"op": "slice", "args": ["$0"], "attrs": {"dim": 0, "start": 1, "end": 4}},
                   {"op": "permute", "args": ["%0"], "attrs": {"dims": [1, 0]}},
                   {"op": "repeat", "args": ["%1"], "attrs": {"repeats": [2, 1, 1]}},
                   {"op": "permute", "args": ["%2"], "attrs": {"dims": [0, 2, 1]}}]}
    got = transforms.evaluate(doc, [a])
    assert torch.equal(got, a[1:4].t().repeat(2, 1, 1).permute(0, 2, 1))
