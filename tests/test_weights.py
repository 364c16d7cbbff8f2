"""Weight sync pieces: a version's flat tensor in the engines' dtype, sent and received in bounded messages."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from asyncrl.executor.processes import weights  # noqa: E402
from asyncrl.executor.processes.weights import WeightLayout, receive_weights, send_weights  # noqa: E402


class _Wire:
    """torch.distributed's isend/recv between two ranks, as one in-order queue of copies."""

    def __init__(self) -> None:
        self.messages: list[torch.Tensor] = []

    def isend(self, tensor: torch.Tensor, dst: int) -> object:
        self.messages.append(tensor.clone())
        return type("Done", (), {"is_completed": lambda self: True, "wait": lambda self: None})()

    def recv(self, tensor: torch.Tensor, src: int) -> None:
        tensor.copy_(self.messages.pop(0))


def test_a_version_travels_in_pieces_of_bounded_size_and_arrives_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    wire = _Wire()
    monkeypatch.setattr(weights.dist, "isend", wire.isend)
    monkeypatch.setattr(weights.dist, "recv", wire.recv)
    monkeypatch.setattr(weights, "MESSAGE_BYTES", 64)
    state = {"a": torch.randn(7, 5), "b": torch.randn(13)}  # 48 weights: 96 bytes in bf16
    layout = WeightLayout.of(state, torch.bfloat16)
    flat = layout.flatten(state)

    sending = send_weights(flat, actor_rank=1)

    assert [m.numel() for m in wire.messages] == [32, 16] and sending.is_completed()
    received = layout.unflatten(receive_weights(layout.empty("cpu")))
    assert not wire.messages
    for name, tensor in state.items():
        assert received[name].dtype == torch.bfloat16
        assert torch.equal(received[name], tensor.to(torch.bfloat16))


def test_a_layout_of_mixed_dtypes_needs_the_dtype_it_is_sent_in() -> None:
    state = {"a": torch.zeros(2, dtype=torch.float32), "b": torch.zeros(2, dtype=torch.bfloat16)}
    with pytest.raises(ValueError, match="mix dtypes"):
        WeightLayout.of(state)
    assert WeightLayout.of(state, torch.bfloat16).flatten(state).dtype == torch.bfloat16
