"""Training through FACT on a CUDA GPU (skipped elsewhere): a bf16 TinyMLP composed for
training runs its forward and backward graphs as compiled CUTLASS kernels; parameter gradients
match float64 autograd within bf16's bound, and AdamW steps track eager's losses."""
import copy

import pytest
import torch

import fact
from test_training_cpu import loss_of, rel_err, tiny_mlp

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA GPU (GPU tests run on the device host)"),
]


def test_a_bf16_mlp_trains_on_the_gpu_with_both_graphs_as_kernels(tmp_path):
    model, x = tiny_mlp()
    model = model.to("cuda", torch.bfloat16).train()
    x = x.to("cuda", torch.bfloat16)
    original, twin = copy.deepcopy(model), copy.deepcopy(model)
    composed = fact.optimize(model, (x,), "native", work_dir=tmp_path)
    report = composed.fact_report
    for graph in (report.forward, report.backward):
        assert graph.composed, str(report)
        assert all(c.verified and c.implementation == "kernels" for c in graph.composed), str(report)
    loss_of(composed(x).float()).backward()
    reference = copy.deepcopy(original).double()
    loss_of(reference(x.double())).backward()
    for (name, got), (_, want) in zip(model.named_parameters(), reference.named_parameters()):
        assert rel_err(got.grad, want.grad) <= 3e-2, (name, rel_err(got.grad, want.grad))
    model.zero_grad()
    losses = []
    for module, params in ((composed, model.parameters()), (twin, twin.parameters())):
        optimizer = torch.optim.AdamW(params, lr=1e-3)
        for _ in range(5):
            optimizer.zero_grad()
            loss = loss_of(module(x).float())
            loss.backward()
            optimizer.step()
        losses.append(float(loss))
    assert abs(losses[0] - losses[1]) <= 2e-2 * abs(losses[1]), losses
