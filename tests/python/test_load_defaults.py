"""What a packaged module does by default when loaded, and what it says when the compiled
remainder fails: Inductor on a GPU, eager on the CPU (a CPU compile of the remainder costs about
a minute on every load); a failure's reason is the wrapped error's, not only the wrapper's first
line."""
from __future__ import annotations

import pytest

import fact.package
from fact.compose.signature import _root_reason


@pytest.mark.parametrize("device, expected", [("cpu", "eager"), ("cuda", "inductor"),
                                              ("cuda:1", "inductor")])
def test_load_package_picks_the_remainder_by_device(monkeypatch, tmp_path, device, expected):
    seen = {}
    monkeypatch.setattr(fact.package, "build_packaged_model", lambda folder, dev: (object(), ()))
    monkeypatch.setattr(fact.package, "apply_plan",
                        lambda model, inputs, folder, **options: seen.update(options) or "composed")
    assert fact.package.load_package(tmp_path, device) == "composed"
    assert seen["remainder"] == expected
    fact.package.load_package(tmp_path, device, remainder="inductor")
    assert seen["remainder"] == "inductor"  # an explicit choice is kept


def test_the_reason_of_a_wrapped_error_is_the_inner_one():
    try:
        try:
            raise RuntimeError("fact::launch has no backward: composed modules are for inference")
        except RuntimeError as inner:
            raise ValueError("backend='inductor' raised:") from inner
    except ValueError as error:
        reason = _root_reason(error)
    assert reason.startswith("ValueError: backend='inductor' raised:")
    assert "RuntimeError: fact::launch has no backward" in reason


def test_a_message_that_names_its_cause_on_the_next_line_keeps_it():
    error = RuntimeError("backend='inductor' raised:\nRuntimeError: fact::launch has no backward\n"
                         "\nSet TORCH_LOGS=... for more")
    assert _root_reason(error) == ("RuntimeError: backend='inductor' raised: RuntimeError: "
                                   "fact::launch has no backward")


def test_a_plain_error_reads_as_its_first_line():
    assert _root_reason(KeyError("x")) == "KeyError: 'x'"
